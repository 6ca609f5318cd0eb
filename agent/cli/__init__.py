"""The face of rein: the `rein` command line (its dispatcher and the commands rein's runtime
provides). It composes the core (agent/, tools/) and reaches the other packages only through
the entry points they declare; nothing in the core imports it (docs/architecture.md)."""

from __future__ import annotations

from typing import Any

from agent.cli.main import build_command_parser, commands, main

__all__ = ["COMMANDS", "build_command_parser", "commands", "main"]


def __getattr__(name: str) -> Any:
    # COMMANDS is read from the entry points when asked for, so a plug-in installed later is seen.
    if name == "COMMANDS":
        return commands()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

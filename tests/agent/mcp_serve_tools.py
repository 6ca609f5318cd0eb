"""Tools for the `rein mcp serve` tests, named in specs as "mcp_serve_tools:TOOLS" (PYTHONPATH)."""

from __future__ import annotations

import os
from pathlib import Path

from tools import tool


@tool(kind="READ")
def lookup(key: str) -> str:
    """Look a key up.

    Args:
        key: The key to look up.
    """
    return f"value of {key}"


@tool(kind="WRITE")
def note(text: str) -> str:
    """Append a line to the notes file.

    Args:
        text: The line to append.
    """
    with Path(os.environ["NOTES_FILE"]).open("a", encoding="utf-8") as f:
        f.write(text + "\n")
    return f"noted {text}"


@tool(kind="WRITE", needs_approval=True)
def wipe() -> str:
    """Delete every note."""
    Path(os.environ["NOTES_FILE"]).unlink(missing_ok=True)
    return "wiped"


TOOLS = [lookup, note, wipe]

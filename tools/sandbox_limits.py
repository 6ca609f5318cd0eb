"""What a sandbox session may use, and which isolation layers it gets on this machine."""

from __future__ import annotations

import os
from dataclasses import dataclass

from tools.sandbox_bwrap import OS_LAYERS, OsLayer, bwrap_status


class SandboxError(RuntimeError):
    """The worker could not be started or initialised (e.g. the preamble failed)."""


@dataclass(frozen=True)
class SandboxLimits:
    """Resource and isolation limits of one sandbox session."""

    cpu_s: float = 5.0
    """CPU seconds one run may use."""
    wall_s: float = 10.0
    """Wall-clock seconds one run may take before the worker is killed."""
    memory_mb: int = 256
    """Address-space cap of the worker process, in MiB."""
    output_chars: int = 20_000
    """Printed characters kept per run; printing more stops the code."""
    max_events: int = 10_000
    """Events the preamble may emit per run."""
    session_cpu_s: float = 600.0
    """CPU seconds over the worker's whole life; past it the worker is killed and restarted."""
    max_code_chars: int = 100_000
    """Longest code accepted."""
    max_reply_bytes: int = 8_000_000
    """Largest answer accepted from the worker; a bigger one kills it."""
    startup_s: float = 15.0
    """Wall-clock seconds allowed for starting the worker and running the preamble."""
    snapshot_bytes: int = 4_000_000
    """Largest pickled namespace kept to restore a killed worker's variables; 0 turns restoring off."""
    os_layer: OsLayer = "auto"
    """OS isolation around the worker: "bwrap" (required), "none", or "auto" (bwrap when usable)."""

    def __post_init__(self) -> None:
        if self.os_layer not in OS_LAYERS:
            raise ValueError(f"os_layer must be one of {', '.join(OS_LAYERS)}, got {self.os_layer!r}")


BASE_LAYERS = ("ast-check", "builtins-allow-list", "rlimits", "uncatchable-cpu-limit")
"""Layers every sandbox session has, whatever the machine."""


def sandbox_layers(limits: SandboxLimits | None = None) -> tuple[list[str], str]:
    """The layers a session with these limits gets on this machine, and a note on the OS layer.

    "uid-nobody" is listed when the host runs as root (the worker drops to nobody); "bwrap" when
    the OS layer resolves to bubblewrap. Raises SandboxError when os_layer="bwrap" cannot be met.
    """
    limits = limits or SandboxLimits()
    layers = list(BASE_LAYERS)
    if os.geteuid() == 0:
        layers.append("uid-nobody")
    use, note = resolve_os_layer(limits.os_layer)
    if use:
        layers.append("bwrap")
    return layers, note


def resolve_os_layer(mode: str) -> tuple[bool, str]:
    """Whether bubblewrap wraps the worker under `mode` ("auto", "bwrap" or "none"), and why."""
    if mode == "none":
        return False, "OS layer off (os_layer='none')"
    status = bwrap_status()
    if status.usable:
        return True, f"bwrap active ({status.detail}): no network, read-only /usr and Python only, own /tmp and PIDs"
    if mode == "bwrap":
        raise SandboxError(f"os_layer='bwrap' was asked for, but {status.detail}")
    return False, f"bwrap not used: {status.detail}"


__all__ = ["BASE_LAYERS", "SandboxError", "SandboxLimits", "resolve_os_layer", "sandbox_layers"]

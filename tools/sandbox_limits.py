"""What a sandbox session may use, and which isolation layers it gets on this machine."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Literal

from tools.sandbox_bwrap import bwrap_status
from tools.sandbox_kernel import kernel_status

OsLayer = Literal["auto", "bwrap", "landlock", "none"]
OS_LAYERS: tuple[str, ...] = ("auto", "bwrap", "landlock", "none")
KernelMode = Literal["off", "try", "require"]


class SandboxError(RuntimeError):
    """The worker could not be started or initialised (e.g. the preamble failed, no OS layer here)."""


@dataclass(frozen=True)
class SandboxLimits:
    """Resource and isolation limits of one sandbox session."""

    cpu_s: float = 5.0
    """CPU seconds one run may use (restoring saved variables after a restart gets the same)."""
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
    """OS isolation: "auto" (bwrap when usable, Landlock + seccomp when available, refuse when
    neither), "bwrap" or "landlock" (required), or "none" (the explicit opt-out: no OS layer)."""

    def __post_init__(self) -> None:
        if self.os_layer not in OS_LAYERS:
            raise ValueError(f"os_layer must be one of {', '.join(OS_LAYERS)}, got {self.os_layer!r}")


@dataclass(frozen=True)
class OsPlan:
    """The OS layers a worker gets on this machine, decided before it starts."""

    bwrap: bool
    """Whether the worker starts inside bubblewrap."""
    kernel: KernelMode
    """Whether the worker confines itself with Landlock and seccomp ("try": when it can; "require": or fail)."""
    seccomp: bool
    """Whether the kernel layer includes a seccomp filter on this machine."""
    note: str
    """What the OS layer covers here, or why a part of it is missing."""


BASE_LAYERS = ("ast-check", "builtins-allow-list", "rlimits", "uncatchable-cpu-limit")
"""Layers every sandbox session has, whatever the machine."""

_NO_OS_LAYER_FIX = (
    "install bubblewrap (Debian package `bubblewrap`) or use a Linux kernel with Landlock enabled "
    "(5.13+, `landlock` in its LSM list); to run untrusted code without OS isolation anyway, opt in "
    "with SandboxLimits(os_layer='none') (rein jigsaw: --sandbox none)"
)


def sandbox_layers(limits: SandboxLimits | None = None) -> tuple[list[str], str]:
    """The layers a session with these limits gets on this machine, and a note on the OS layer.

    "uid-nobody" is listed when the host runs as root (the worker drops to nobody); "bwrap",
    "landlock" and "seccomp" when the OS layer resolves to them. Raises SandboxError when the
    asked-for OS layer cannot be met, or when "auto" finds no OS layer at all.
    """
    limits = limits or SandboxLimits()
    layers = list(BASE_LAYERS)
    if os.geteuid() == 0:
        layers.append("uid-nobody")
    plan = resolve_os_layer(limits.os_layer)
    if plan.bwrap:
        layers.append("bwrap")
    if plan.kernel != "off":
        layers.append("landlock")
        if plan.seccomp:
            layers.append("seccomp")
    return layers, plan.note


def resolve_os_layer(mode: str) -> OsPlan:
    """Which OS layers wrap the worker under `mode` ("auto", "bwrap", "landlock" or "none"), and why."""
    if mode == "none":
        return OsPlan(False, "off", False, "OS layer off (os_layer='none'): code that got past the language "
                                           "checks could reach files and the network the host user can")
    kernel = kernel_status()
    if mode == "landlock":
        if not kernel.usable:
            raise SandboxError(f"os_layer='landlock' was asked for, but {kernel.detail}")
        return OsPlan(False, "require", kernel.seccomp, f"bwrap not used (os_layer='landlock'); {kernel.detail}")
    status = bwrap_status()
    inner: KernelMode = "try" if kernel.usable else "off"
    if status.usable:
        note = f"bwrap active ({status.detail}): no network, read-only /usr and Python only, own /tmp and PIDs"
        return OsPlan(True, inner, kernel.seccomp, f"{note}; {kernel.detail}")
    if mode == "bwrap":
        raise SandboxError(f"os_layer='bwrap' was asked for, but {status.detail}")
    if kernel.usable:
        return OsPlan(False, "require", kernel.seccomp, f"bwrap not used: {status.detail}; {kernel.detail}")
    raise SandboxError(f"no OS sandbox layer is available here ({status.detail}; {kernel.detail}): "
                       f"{_NO_OS_LAYER_FIX}")


__all__ = ["BASE_LAYERS", "OS_LAYERS", "OsLayer", "OsPlan", "SandboxError", "SandboxLimits", "resolve_os_layer",
           "sandbox_layers"]

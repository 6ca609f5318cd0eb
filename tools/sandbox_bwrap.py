"""The sandbox's OS layer: the worker started inside bubblewrap (`bwrap`) when it is usable.

bwrap gives the worker new mount, PID, network, IPC and UTS namespaces. Its filesystem is a
read-only view of /usr and the Python installation alone (no project, no home directories, no
/etc beyond the loader cache), /tmp is a fresh empty tmpfs, the network namespace has only a
loopback that is down, and /proc shows the sandbox's own processes only. bwrap is Debian's
`bubblewrap` package: nothing is downloaded at run time.

Started as root, bwrap creates the namespaces with root's own rights and keeps no user namespace,
so the worker can still drop to `nobody` (a uid that owns nothing on the host). Started as another
user, bwrap needs unprivileged user namespaces, which some kernels or containers forbid; the probe
finds that out once per process and the sandbox falls back to its other layers, saying why.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

WORKER_PATH = "/sandbox/sandbox_worker.py"
"""Where the worker script is mounted inside the sandbox."""
WORKER_MODULES = ("sandbox_kernel.py", "sandbox_snapshot.py")
"""The worker's sibling files, which it loads by path: mounted beside it in /sandbox."""


@dataclass(frozen=True)
class BwrapStatus:
    """Whether bwrap can start the worker on this machine."""

    usable: bool
    """True when a trial run inside bwrap started Python and exited cleanly."""
    detail: str
    """bwrap's version when usable; otherwise why not (not installed, namespaces refused, ...)."""


def python_executable() -> str:
    """The real interpreter file (a virtual environment's `python` is usually a symlink to it)."""
    return os.path.realpath(sys.executable)


def bwrap_command(bwrap: str, worker: Path) -> list[str]:
    """The bwrap argument list (up to and including `--`) that runs the worker in its namespaces."""
    args = [bwrap, "--ro-bind", "/usr", "/usr"]
    for name in ("bin", "lib", "lib32", "lib64", "libx32", "sbin"):
        top = Path("/") / name
        if top.is_symlink():
            args += ["--symlink", os.readlink(top), str(top)]
        elif top.is_dir():
            args += ["--ro-bind", str(top), str(top)]
    args += ["--ro-bind-try", "/etc/ld.so.cache", "/etc/ld.so.cache"]
    prefix = os.path.realpath(sys.base_prefix)
    args += ["--ro-bind", prefix, prefix]
    executable = python_executable()
    if not executable.startswith(prefix.rstrip("/") + "/") and not executable.startswith("/usr/"):
        args += ["--ro-bind", executable, executable]
    args += ["--ro-bind", str(worker), WORKER_PATH]
    for name in WORKER_MODULES:
        args += ["--ro-bind", str(worker.with_name(name)), f"/sandbox/{name}"]
    args += [
        "--proc", "/proc",
        "--dev", "/dev",
        "--tmpfs", "/tmp",
        "--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try",
        "--hostname", "sandbox",
        "--die-with-parent",
        "--clearenv",
        "--chdir", "/",
    ]
    if os.geteuid() != 0:
        # Without root, the other namespaces can only be made inside a new user namespace.
        args.append("--unshare-user")
    return [*args, "--"]


@functools.cache
def bwrap_status() -> BwrapStatus:
    """Probe bwrap once per process: is it installed, and may it create the namespaces here?"""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return BwrapStatus(False, "bwrap is not installed (Debian package `bubblewrap`)")
    worker = Path(__file__).with_name("sandbox_worker.py")
    command = [*bwrap_command(bwrap, worker), python_executable(), "-I", "-S", "-c", "print('ok')"]
    try:
        done = subprocess.run(command, capture_output=True, timeout=15, env={}, cwd="/", check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return BwrapStatus(False, f"bwrap could not be run: {exc}")
    if done.returncode != 0 or done.stdout.strip() != b"ok":
        reason = done.stderr.decode(errors="replace").strip().splitlines()
        return BwrapStatus(False, f"bwrap failed here (exit {done.returncode}): {reason[-1] if reason else 'no message'}")
    try:
        version = subprocess.run([bwrap, "--version"], capture_output=True, timeout=5, check=False)
        detail = version.stdout.decode(errors="replace").strip() or "bwrap"
    except (OSError, subprocess.TimeoutExpired):
        detail = "bwrap"
    return BwrapStatus(True, detail)

"""The sandbox's kernel layer: Landlock and seccomp applied by the worker to itself, no bubblewrap needed.

After its preamble has run, the worker confines itself for good (the kernel keeps both across
exec and never lifts them):

- Landlock denies every filesystem access except reading the Python standard library (minus
  site-packages), so no project file, secret, database or new file can be reached whatever the
  code does with its descriptors; from ABI 4 it also denies TCP bind and connect, and from ABI 6
  it scopes signals and abstract unix sockets to the sandbox.
- A seccomp filter makes socket creation (every family: UDP, unix, raw, netlink), exec, ptrace,
  io_uring, bpf, perf and keyring calls fail with EPERM.

Standard library only, through ctypes: the worker runs without site-packages and imports this file
by path. Maintained packages exist (sandlock needs Landlock ABI 6 and ships a native library),
but the worker cannot import them, and the syscalls are small and stable.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import os
import platform
from collections.abc import Sequence
from dataclasses import dataclass

_SYS_CREATE_RULESET, _SYS_ADD_RULE, _SYS_RESTRICT_SELF = 444, 445, 446  # same number on every arch
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS, _PR_SET_SECCOMP, _SECCOMP_MODE_FILTER = 38, 22, 2

_FS_EXECUTE, _FS_READ_FILE, _FS_READ_DIR = 1 << 0, 1 << 2, 1 << 3
_FS_RIGHTS_BY_ABI = {1: (1 << 13) - 1, 2: (1 << 14) - 1, 3: (1 << 15) - 1, 5: (1 << 16) - 1}
"""Every filesystem right the kernel knows at each ABI (v2 adds refer, v3 truncate, v5 ioctl)."""
_NET_BIND_TCP, _NET_CONNECT_TCP = 1 << 0, 1 << 1
_SCOPE_ABSTRACT_UNIX, _SCOPE_SIGNAL = 1 << 0, 1 << 1

DENIED_SYSCALLS = ("socket", "socketpair", "execve", "execveat", "ptrace", "process_vm_readv", "process_vm_writev",
                   "io_uring_setup", "bpf", "perf_event_open", "userfaultfd", "add_key", "request_key", "keyctl")
"""What the worker's seccomp filter refuses with EPERM; it needs none of them once it serves code."""

# (audit arch, syscall numbers) per machine.
_SECCOMP_ARCH: dict[str, tuple[int, dict[str, int]]] = {
    "x86_64": (0xC000003E, {
        "socket": 41, "socketpair": 53, "execve": 59, "execveat": 322, "ptrace": 101,
        "process_vm_readv": 310, "process_vm_writev": 311, "io_uring_setup": 425, "bpf": 321,
        "perf_event_open": 298, "userfaultfd": 323, "add_key": 248, "request_key": 249, "keyctl": 250,
        "landlock_create_ruleset": 444,
    }),
    "aarch64": (0xC00000B7, {
        "socket": 198, "socketpair": 199, "execve": 221, "execveat": 281, "ptrace": 117,
        "process_vm_readv": 270, "process_vm_writev": 271, "io_uring_setup": 425, "bpf": 280,
        "perf_event_open": 241, "userfaultfd": 282, "add_key": 217, "request_key": 218, "keyctl": 219,
        "landlock_create_ruleset": 444,
    }),
}
_X32_BIT = 0x40000000


@dataclass(frozen=True)
class KernelStatus:
    """Which kernel confinement this machine offers a sandbox worker."""

    landlock_abi: int
    """Landlock ABI version the kernel supports; 0 when Landlock is missing or disabled."""
    seccomp: bool
    """Whether a seccomp filter can be installed (kernel support and a known CPU architecture)."""
    detail: str
    """What the layer covers here, or why it is unavailable."""

    @property
    def usable(self) -> bool:
        """True when Landlock is available; seccomp alone cannot keep files out of reach."""
        return self.landlock_abi > 0


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


class _SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_SockFilter))]


@functools.cache
def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return libc


def _syscall(number: int, *args: object) -> int:
    result = _libc().syscall(ctypes.c_long(number), *args)
    if result < 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))
    return int(result)


def landlock_abi() -> int:
    """The Landlock ABI version of the running kernel, or 0 when Landlock is unavailable."""
    try:
        return _syscall(_SYS_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(_CREATE_RULESET_VERSION))
    except OSError:  # ENOSYS: not built in; EOPNOTSUPP: disabled at boot; EPERM: a container's filter
        return 0


@functools.cache
def kernel_status() -> KernelStatus:
    """Probe once per process what the kernel layer can do here."""
    abi = landlock_abi()
    seccomp = platform.machine() in _SECCOMP_ARCH and _seccomp_supported()
    if abi <= 0:
        return KernelStatus(0, seccomp, "Landlock is not available here (it needs Linux 5.13+ with landlock "
                                        "in the LSM list, and a container that lets its syscalls through)")
    net = "TCP bind/connect denied" if abi >= 4 else "TCP not covered (ABI < 4)"
    sockets = "; seccomp: no sockets, exec or ptrace" if seccomp else "; seccomp unavailable"
    return KernelStatus(abi, seccomp, f"Landlock ABI {abi}: no files but the standard library, {net}{sockets}")


def _seccomp_supported() -> bool:
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as status:
            return any(line.startswith("Seccomp:") for line in status)
    except OSError:
        return False


def landlock_ruleset(readable: list[str]) -> int:
    """A Landlock ruleset that handles every right this kernel knows and allows only reading `readable`.

    Build it while the paths can still be opened (before dropping privileges or lowering
    RLIMIT_NOFILE); `confine` enforces it. Raises OSError when Landlock is unavailable.
    """
    abi = landlock_abi()
    if abi <= 0:
        raise OSError(errno.ENOSYS, "Landlock is not available")
    fs_rights = next(rights for version, rights in sorted(_FS_RIGHTS_BY_ABI.items(), reverse=True) if abi >= version)
    attr = _RulesetAttr(handled_access_fs=fs_rights)
    size = 8
    if abi >= 4:
        attr.handled_access_net = _NET_BIND_TCP | _NET_CONNECT_TCP
        size = 16
    if abi >= 6:
        attr.scoped = _SCOPE_ABSTRACT_UNIX | _SCOPE_SIGNAL
        size = 24
    ruleset = _syscall(_SYS_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
    try:
        for path in readable:
            _allow_read(ruleset, path)
    except OSError:
        os.close(ruleset)
        raise
    return ruleset


def confine(ruleset: int | None, landlock_error: str = "") -> dict[str, object]:
    """Enforce `ruleset` (from landlock_ruleset; None when it could not be built) and the seccomp
    filter on this thread, for good. The process must have a single thread.

    Returns what is active: {"landlock_abi": int, "seccomp": bool, "kernel_error": str}; a layer
    that failed is 0/False and the error says why.
    """
    _no_new_privs()
    outcome: dict[str, object] = {"landlock_abi": 0, "seccomp": False, "kernel_error": ""}
    errors = [f"landlock: {landlock_error}"] if landlock_error else []
    if ruleset is not None:
        try:
            _syscall(_SYS_RESTRICT_SELF, ctypes.c_int(ruleset), ctypes.c_uint32(0))
            outcome["landlock_abi"] = landlock_abi()
        except OSError as exc:
            errors.append(f"landlock: {exc}")
        finally:
            os.close(ruleset)
    try:
        deny_syscalls(DENIED_SYSCALLS)
        outcome["seccomp"] = True
    except OSError as exc:
        errors.append(f"seccomp: {exc}")
    outcome["kernel_error"] = "; ".join(errors)
    return outcome


def _allow_read(ruleset: int, path: str) -> None:
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return  # a path that vanished grants nothing
    try:
        rights = _FS_READ_FILE | (_FS_READ_DIR if os.path.isdir(path) else 0)
        rule = _PathBeneathAttr(allowed_access=rights, parent_fd=fd)
        _syscall(_SYS_ADD_RULE, ctypes.c_int(ruleset), ctypes.c_int(_RULE_PATH_BENEATH), ctypes.byref(rule),
                 ctypes.c_uint32(0))
    finally:
        os.close(fd)


def stdlib_paths() -> list[str]:
    """The standard library's entries, without site-packages: what the worker may still read."""
    root = os.path.dirname(os.__file__)
    try:
        names = os.listdir(root)
    except OSError:
        return []
    return [os.path.join(root, name) for name in sorted(names) if name not in ("site-packages", "dist-packages")]


def _no_new_privs() -> None:
    # Required for an unprivileged process to install Landlock or seccomp; also bars setuid gains.
    _libc().prctl(ctypes.c_int(_PR_SET_NO_NEW_PRIVS), ctypes.c_ulong(1), ctypes.c_ulong(0),
                  ctypes.c_ulong(0), ctypes.c_ulong(0))


def deny_syscalls(names: Sequence[str]) -> None:
    """Install a seccomp filter on this thread (inherited by its children) that fails `names` with EPERM.

    Raises OSError on an unknown architecture or when the kernel refuses the filter.
    """
    machine = platform.machine()
    if machine not in _SECCOMP_ARCH:
        raise OSError(errno.ENOSYS, f"no seccomp syscall table for {machine}")
    arch, numbers = _SECCOMP_ARCH[machine]
    program = _filter_program(arch, sorted(numbers[name] for name in names), x32=machine == "x86_64")
    filters = (_SockFilter * len(program))(*(_SockFilter(*insn) for insn in program))
    fprog = _SockFprog(len(program), filters)
    _no_new_privs()
    result = _libc().prctl(ctypes.c_int(_PR_SET_SECCOMP), ctypes.c_ulong(_SECCOMP_MODE_FILTER),
                           ctypes.cast(ctypes.byref(fprog), ctypes.c_void_p), ctypes.c_ulong(0), ctypes.c_ulong(0))
    if result != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))


def _filter_program(arch: int, denied: list[int], *, x32: bool) -> list[tuple[int, int, int, int]]:
    """A classic BPF program: kill on a foreign architecture, EPERM for `denied`, allow the rest."""
    ld_abs, jeq, jge, ret = 0x20, 0x15, 0x35, 0x06
    kill, allow, deny = 0x80000000, 0x7FFF0000, 0x00050000 | errno.EPERM
    program = [(ld_abs, 0, 0, 4), (jeq, 1, 0, arch), (ret, 0, 0, kill), (ld_abs, 0, 0, 0)]
    checks = ([(jge, _X32_BIT)] if x32 else []) + [(jeq, number) for number in denied]
    last = len(program) + len(checks) + 1  # index of the final "deny" return
    for op, value in checks:
        program.append((op, last - len(program) - 1, 0, value))
    program += [(ret, 0, 0, allow), (ret, 0, 0, deny)]
    return program

"""A Python sandbox: untrusted code runs in a long-lived worker process with limits and an allow-list.

One `SandboxSession` owns one worker process (tools/sandbox_worker.py) and speaks to it over
pipes. The worker's namespace persists between `run` calls. What the code may touch is limited in
layers: an AST check and an allow-list of builtins (no imports, no dunder or private attributes,
no open/getattr/eval/type); OS limits in the child (CPU time, address space, no new file
descriptors, no child processes, no file writes; privileges dropped when started as root); and an
OS layer the kernel enforces: bubblewrap namespaces around the whole worker where usable
(tools/sandbox_bwrap.py: no network, no host files beyond /usr and Python, no host processes),
and Landlock + seccomp applied by the worker to itself where the kernel has them
(tools/sandbox_kernel.py: no files but the standard library, no TCP, no sockets, no exec). With
neither, a session refuses to start unless the host opts out with os_layer="none".
`SandboxSession.layers` says which are active. Wall time is enforced here: a worker that overruns
is killed and replaced at once; the new worker gets the namespace back from the snapshot the old
one sent after its last run, under the CPU limit, and the result says which variables could not be
brought back (all of them, with `restore_error`, when restoring failed and the session was reset).

Hosts extend the sandbox with trusted `preamble` source (exec'd in the worker before the limits
apply; its public names become visible to the code) plus picklable `data`. Preamble code may call
`emit(obj)` to send JSON data back with the step's result, and `user_namespace()` to reach the
code's namespace; the host may call preamble functions before the code through `hooks`.
"""

from __future__ import annotations

import base64
import concurrent.futures
import contextlib
import os
import pickle
import select
import signal
import subprocess
import threading
import time
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tools.sandbox_bwrap import WORKER_PATH, bwrap_command, python_executable
from tools.sandbox_limits import (
    BASE_LAYERS,
    OsPlan,
    SandboxError,
    SandboxLimits,
    resolve_os_layer,
    sandbox_layers,
)
from tools.sandbox_worker import HEADER

_WORKER = Path(__file__).with_name("sandbox_worker.py")


@dataclass
class SandboxResult:
    """What one run produced."""

    stdout: str = ""
    """Printed output (capped)."""
    stdout_truncated: bool = False
    """Whether printed output was cut at the cap."""
    value: Any = None
    """Value of a final expression when it is small JSON data; otherwise None."""
    value_repr: str | None = None
    """Short repr of the final expression's value, when there was one."""
    error_type: str | None = None
    """Exception name, or ForbiddenCode / CpuTimeExceeded / WallTimeExceeded / MemoryLimitExceeded / OutputLimitExceeded / ResultNotSerializable / SandboxCrashed."""
    error_message: str | None = None
    """Human-readable error."""
    traceback: str | None = None
    """Lines of the sandboxed code on the failing call path."""
    events: list[Any] = field(default_factory=list)
    """JSON data the preamble emitted during the run, in order."""
    duration_s: float = 0.0
    """Wall time of the run as seen by the host, round trip included."""
    namespace_reset: bool = False
    """True when the worker was killed or lost; variables from earlier runs are gone except `restored`."""
    restored: list[str] = field(default_factory=list)
    """After a reset: variables the new worker got back, as they were after the last finished run."""
    lost: list[str] = field(default_factory=list)
    """After a reset: variables that could not be brought back (lambdas, generators, too large, ...)."""
    restore_error: str | None = None
    """After a reset: why restoring the variables failed (e.g. a def whose default loops); all are gone."""

    @property
    def ok(self) -> bool:
        """Whether the code ran without error."""
        return self.error_type is None

    def describe(self) -> str:
        """A compact text report for a model: output, value, error, reset notice."""
        parts = []
        if self.stdout:
            parts.append(self.stdout.rstrip("\n") + ("\n[output truncated]" if self.stdout_truncated else ""))
        if self.value_repr is not None and self.ok:
            parts.append(f"=> {self.value_repr}")
        if not self.ok:
            parts.append(f"{self.error_type}: {self.error_message}")
            if self.traceback:
                parts.append(self.traceback)
        if self.namespace_reset:
            parts.append(self._reset_notice())
        return "\n".join(parts) if parts else "(no output)"


    def _reset_notice(self) -> str:
        if self.restore_error:
            return (f"[the sandbox was restarted and restoring the earlier variables failed ({self.restore_error}): "
                    "the session was reset and all variables are gone]")
        if not self.restored:
            return "[the sandbox was restarted: variables from earlier runs are gone]"
        notice = "[the sandbox was restarted: variables were restored as they were before this run"
        if self.lost:
            notice += "; not restorable and gone: " + ", ".join(self.lost[:20])
        return notice + "]"


class SandboxSession:
    """One worker process with a persistent namespace; thread-safe, restarted on demand."""

    def __init__(
        self,
        preamble: str = "",
        data: Mapping[str, Any] | None = None,
        exports: Sequence[str] | None = None,
        limits: SandboxLimits | None = None,
    ) -> None:
        self.preamble = preamble
        self.data = dict(data or {})
        self.exports = list(exports) if exports is not None else None
        self.limits = limits or SandboxLimits()
        self.starts = 0
        """How many worker processes this session has started."""
        self.worker_info: dict[str, Any] = {}
        """What the worker reported at start (e.g. whether it dropped root privileges)."""
        self.os_layer_note = ""
        """Why the OS layer is or is not active, once the session has started."""
        self._plan = OsPlan(False, "off", False, "")
        self._restore_error: str | None = None
        self._snapshot: dict[str, str] = {}
        """Per variable, the worker's last pickled copy (base64); opaque here, never unpickled."""
        self._aliases: dict[str, str] = {}
        self._unrestorable: list[str] = []
        self._proc: subprocess.Popen[bytes] | None = None
        self._lost = False
        self._lock = threading.Lock()
        self._finalizer: weakref.finalize | None = None

    def __enter__(self) -> SandboxSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def layers(self) -> list[str]:
        """The isolation layers active in the running worker (before start: those planned)."""
        if self._proc is None:
            return sandbox_layers(self.limits)[0]
        layers = list(BASE_LAYERS)
        if self.worker_info.get("privileges_dropped"):
            layers.append("uid-nobody")
        if self._plan.bwrap:
            layers.append("bwrap")
        if self.worker_info.get("landlock_abi"):
            layers.append("landlock")
        if self.worker_info.get("seccomp"):
            layers.append("seccomp")
        return layers

    def describe(self) -> str:
        """One line naming the active layers and the OS layer's status."""
        note = self.os_layer_note or sandbox_layers(self.limits)[1]
        return f"sandbox layers: {', '.join(self.layers)} ({note})"

    @property
    def alive(self) -> bool:
        """Whether a worker process is running."""
        return self._proc is not None and self._proc.poll() is None

    def start(self) -> None:
        """Start the worker now (run() starts it when needed); raises SandboxError."""
        with self._lock:
            self._ensure_started()

    def run(
        self,
        code: str,
        *,
        inject: Mapping[str, Any] | None = None,
        hooks: Sequence[tuple[str, Sequence[Any]]] = (),
    ) -> SandboxResult:
        """Run code in the persistent namespace.

        inject: picklable values bound in the namespace before the code runs.
        hooks: (preamble function name, args) called before the code, under the same limits.
        """
        if not isinstance(code, str):
            return SandboxResult(error_type="TypeError", error_message="code must be a string")
        if len(code) > self.limits.max_code_chars:
            return SandboxResult(
                error_type="ForbiddenCode",
                error_message=f"code is {len(code)} characters; the limit is {self.limits.max_code_chars}",
            )
        request = {"op": "run", "code": code, "inject": dict(inject or {}),
                   "hooks": [(name, list(args)) for name, args in hooks]}
        try:
            payload = pickle.dumps(request, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as exc:
            raise SandboxError(f"inject/hooks values must be picklable: {exc}") from exc
        with self._lock:
            started = time.perf_counter()
            self._ensure_started()
            reset, self._lost = self._lost, False
            notice = self._restore_notice
            result = self._exchange(payload, self.limits.wall_s)
            if result.namespace_reset:
                self._replace_worker(result)
            elif reset:
                result.namespace_reset = True
                result.restored, result.lost, result.restore_error = notice
            result.duration_s = time.perf_counter() - started
            return result

    def restart(self) -> None:
        """Kill the worker and start a fresh one (the namespace is lost)."""
        with self._lock:
            self._kill()
            self._forget_snapshot()
            self._ensure_started()

    def close(self) -> None:
        """Stop the worker."""
        with self._lock:
            self._kill()
            self._forget_snapshot()

    def _forget_snapshot(self) -> None:
        self._snapshot, self._aliases, self._unrestorable = {}, {}, []

    def _replace_worker(self, result: SandboxResult) -> None:
        # Start the next worker now, so this result can say what came back and the next run
        # does not pay for the start-up.
        try:
            self._ensure_started()
        except SandboxError as exc:
            result.error_message = f"{result.error_message}; the sandbox could not be restarted: {exc}"
            return
        self._lost = False
        result.restored, result.lost, result.restore_error = self._restore_notice

    # -- process management ------------------------------------------------------------

    def _ensure_started(self) -> None:
        if self.alive:
            return
        if self._proc is not None:
            self._kill()
            self._lost = True
        self._plan = resolve_os_layer(self.limits.os_layer)
        self.os_layer_note = self._plan.note
        self._restore_error = None
        restore = self._restore_request()
        try:
            self._start_worker(restore)
        except SandboxError as exc:
            if restore is None:
                raise
            # The saved variables broke the start (a def whose default loops, say): a session that
            # tried again with them would fail on every later run, so it starts clean instead.
            lost = sorted({*self._snapshot, *self._aliases, *self._unrestorable})
            self._forget_snapshot()
            self._unrestorable = lost
            self._restore_error = str(exc)
            self._start_worker(None)

    def _restore_request(self) -> dict[str, Any] | None:
        if not (self._snapshot or self._aliases) or self.limits.snapshot_bytes <= 0:
            return None
        entries = {}
        for name, blob in self._snapshot.items():
            with contextlib.suppress(ValueError):
                entries[name] = base64.b64decode(blob, validate=True)
        return {"entries": entries, "aliases": dict(self._aliases)}

    def _start_worker(self, restore: dict[str, Any] | None) -> None:
        python = [python_executable(), "-I", "-S", "-X", "utf8"]
        if self._plan.bwrap:
            argv = [*bwrap_command(_bwrap_binary(), _WORKER), *python, WORKER_PATH]
        else:
            argv = [*python, str(_WORKER)]
        # bwrap's --die-with-parent kills the worker when the *thread* that started it ends, and
        # sync tools run on short-lived threads: start every worker from one long-lived thread.
        proc = _spawner().submit(
            subprocess.Popen,
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            cwd="/",
            env={},
            close_fds=True,
            start_new_session=True,
        ).result()
        self._proc = proc
        self._finalizer = weakref.finalize(self, _kill_process, proc)
        self.starts += 1
        init = {"op": "init", "preamble": self.preamble, "data": self.data, "exports": self.exports,
                "limits": {
                    "cpu_s": self.limits.cpu_s, "memory_mb": self.limits.memory_mb,
                    "output_chars": self.limits.output_chars, "max_events": self.limits.max_events,
                    "session_cpu_s": self.limits.session_cpu_s,
                    "snapshot_bytes": self.limits.snapshot_bytes, "kernel": self._plan.kernel,
                }}
        if restore is not None:
            init["restore"] = restore
        try:
            payload = pickle.dumps(init, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as exc:
            self._kill()
            raise SandboxError(f"sandbox data must be picklable: {exc}") from exc
        try:
            self._send(payload)
            reply = self._receive(time.monotonic() + self.limits.startup_s)
        except _WorkerGone as exc:
            self._kill()
            stage = "while restoring the saved variables" if restore is not None else "to start"
            raise SandboxError(f"the sandbox worker failed {stage}: {exc}") from None
        if not reply.get("ok"):
            self._kill()
            stage = str(reply.get("stage") or "preamble")
            detail = "" if stage == "restore" else f"\n{reply.get('traceback') or ''}"
            raise SandboxError(f"the sandbox {stage} failed: {reply.get('error')}{detail}")
        self.worker_info = {k: v for k, v in reply.items() if k != "ok"}

    @property
    def _restore_notice(self) -> tuple[list[str], list[str], str | None]:
        """What the current worker restored from the snapshot, what stayed lost, and why restoring failed."""
        if "restored" not in self.worker_info:
            return [], list(self._unrestorable), self._restore_error
        restored = [str(n) for n in self.worker_info.get("restored") or []]
        lost = self._unrestorable + [str(n) for n in self.worker_info.get("restore_failed") or []]
        return restored, sorted(set(lost)), None

    def _kill(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            _kill_process(proc)
        if self._finalizer is not None:
            self._finalizer.detach()
            self._finalizer = None

    # -- protocol ------------------------------------------------------------------------

    def _exchange(self, payload: bytes, wall_s: float) -> SandboxResult:
        try:
            self._send(payload)
            reply = self._receive(time.monotonic() + wall_s)
        except _WorkerGone as exc:
            self._kill()
            self._lost = False
            return SandboxResult(error_type=exc.kind, error_message=str(exc), namespace_reset=True)
        snapshot = reply.get("snapshot")
        if isinstance(snapshot, dict):
            self._update_snapshot(snapshot)
        return SandboxResult(
            stdout=str(reply.get("stdout", "")),
            stdout_truncated=bool(reply.get("stdout_truncated")),
            value=reply.get("value"),
            value_repr=reply.get("value_repr"),
            error_type=reply.get("error_type"),
            error_message=reply.get("error_message"),
            traceback=reply.get("traceback"),
            events=list(reply.get("events") or []),
        )

    def _update_snapshot(self, snapshot: dict[str, Any]) -> None:
        names = {str(n) for n in snapshot.get("names") or []}
        changed = snapshot.get("set") or {}
        kept = {name: blob for name, blob in self._snapshot.items() if name in names}
        kept.update({str(k): v for k, v in changed.items() if isinstance(v, str) and k in names})
        self._snapshot = kept
        aliases = snapshot.get("aliases") or {}
        self._aliases = {str(k): str(v) for k, v in aliases.items()} if isinstance(aliases, dict) else {}
        self._unrestorable = sorted(str(n) for n in snapshot.get("lost") or [])
        # The worker enforces the cap; this bounds what a worker gone rogue could make us hold.
        if sum(len(blob) for blob in kept.values()) > 2 * self.limits.snapshot_bytes:
            self._unrestorable = sorted({*self._unrestorable, *kept})
            self._snapshot = {}

    def _send(self, payload: bytes) -> None:
        assert self._proc is not None and self._proc.stdin is not None
        try:
            self._proc.stdin.write(HEADER.pack(len(payload)) + payload)
            self._proc.stdin.flush()
        except (BrokenPipeError, OSError):
            raise _WorkerGone("SandboxCrashed", self._exit_reason()) from None

    def _receive(self, deadline: float) -> dict[str, Any]:
        import json

        header = self._read_exact(HEADER.size, deadline)
        (size,) = HEADER.unpack(header)
        if size > self.limits.max_reply_bytes:
            raise _WorkerGone("OutputLimitExceeded",
                              f"the sandbox answer was {size} bytes; the limit is {self.limits.max_reply_bytes}")
        body = self._read_exact(size, deadline)
        try:
            reply = json.loads(body)
        except ValueError:
            raise _WorkerGone("SandboxCrashed", "the sandbox sent a malformed answer") from None
        if not isinstance(reply, dict):
            raise _WorkerGone("SandboxCrashed", "the sandbox sent a malformed answer")
        return reply

    def _read_exact(self, size: int, deadline: float) -> bytes:
        assert self._proc is not None and self._proc.stdout is not None
        fd = self._proc.stdout.fileno()
        chunks: list[bytes] = []
        while size:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise _WorkerGone(
                    "WallTimeExceeded",
                    f"the code ran longer than {self.limits.wall_s:g}s and was stopped",
                )
            ready, _, _ = select.select([fd], [], [], remaining)
            if not ready:
                continue
            chunk = os.read(fd, min(size, 1 << 20))
            if not chunk:
                raise _WorkerGone(*self._exit_kind())
            chunks.append(chunk)
            size -= len(chunk)
        return b"".join(chunks)

    def _exit_kind(self) -> tuple[str, str]:
        return ("CpuTimeExceeded" if self._exit_code() == -signal.SIGXCPU else "SandboxCrashed",
                self._exit_reason())

    def _exit_code(self) -> int | None:
        if self._proc is None:
            return None
        try:
            code = self._proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            return None
        if self._plan.bwrap and code > 128:
            return -(code - 128)  # bwrap reports a worker killed by signal N as exit 128 + N
        return code

    def _exit_reason(self) -> str:
        code = self._exit_code()
        if code == -signal.SIGXCPU:
            return f"the code used more than {self.limits.cpu_s:g}s of CPU time and the sandbox was stopped"
        if code is not None and code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            hint = " (a C-level crash, e.g. from very deeply nested data)" if -code == signal.SIGSEGV else ""
            return f"the sandbox process was killed by {name}{hint}"
        return f"the sandbox process exited unexpectedly (code {code})"


class _WorkerGone(Exception):
    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def _bwrap_binary() -> str:
    import shutil

    return shutil.which("bwrap") or "bwrap"


_SPAWNER: tuple[int, concurrent.futures.ThreadPoolExecutor] | None = None
_SPAWNER_LOCK = threading.Lock()


def _spawner() -> concurrent.futures.ThreadPoolExecutor:
    """The process's one thread that starts sandbox workers; it lives until the interpreter exits."""
    global _SPAWNER
    with _SPAWNER_LOCK:
        # A forked child has the executor but not its thread: it needs its own.
        if _SPAWNER is None or _SPAWNER[0] != os.getpid():
            executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="rein-sandbox-spawn")
            _SPAWNER = (os.getpid(), executor)
        return _SPAWNER[1]


def _kill_process(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            proc.kill()
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=5)
    for stream in (proc.stdin, proc.stdout):
        if stream is not None:
            with contextlib.suppress(OSError):
                stream.close()


__all__ = ["BASE_LAYERS", "SandboxError", "SandboxLimits", "SandboxResult", "SandboxSession", "sandbox_layers"]

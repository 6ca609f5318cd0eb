"""The sandbox worker: a child process that runs untrusted Python under an allow-list and OS limits.

Run as a script (`python -I -S sandbox_worker.py`); it speaks length-prefixed frames on its
stdin/stdout: pickled requests from the parent (trusted) and JSON answers back (so a worker
taken over by hostile code still cannot make the parent unpickle anything). Importable as a
module too, so the parent and tests share `check_code`. Standard library only: the child starts
without site-packages and never imports rein; it loads its sibling files (sandbox_snapshot.py, and
sandbox_kernel.py for the Landlock + seccomp layer) by path.

Two guarantees hold however hostile the code: the CPU limit cannot be caught (after it fires, every
further line of sandboxed code raises it again, so `except:` or `finally: continue` only delay it
by one line), and the worker always answers (a result it cannot encode becomes an error). After
each run the worker sends the host a snapshot of the namespace so that a worker that has to die
(a C-level crash, a C call that ignores the CPU timer) can be replaced by one with the same
variables, restored under the same CPU limit.
"""

from __future__ import annotations

import ast
import io
import json
import math
import os
import pickle
import reprlib
import resource
import signal
import struct
import sys
import time
import traceback
from typing import Any


def _load_sibling(name: str) -> Any:
    """A module from this file's directory, by path: the worker runs without rein on sys.path."""
    import importlib.util

    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), f"{name}.py")
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the file runs
    spec.loader.exec_module(module)
    return module


if __package__:  # imported as tools.sandbox_worker by the host or a test
    from tools import sandbox_snapshot as _snapshots
else:
    _snapshots = _load_sibling("sandbox_snapshot")

HEADER = struct.Struct(">I")
SOURCE_NAME = "<sandbox>"

SAFE_BUILTINS = (
    "abs", "all", "any", "ascii", "bin", "bool", "bytearray", "bytes", "callable", "chr",
    "complex", "dict", "divmod", "enumerate", "filter", "float", "frozenset", "hash", "hex", "int",
    "isinstance", "issubclass", "iter", "len", "list", "map", "max", "min", "next", "oct", "ord",
    "pow", "range", "repr", "reversed", "round", "set", "slice", "sorted", "str", "sum", "tuple",
    "zip", "ArithmeticError", "AssertionError", "AttributeError", "Exception", "IndexError",
    "KeyError", "LookupError", "NameError", "NotImplementedError", "OverflowError", "RuntimeError",
    "StopIteration", "TypeError", "ValueError", "ZeroDivisionError",
)
"""Builtins code in the sandbox may use; everything else (open, getattr, eval, type, ...) is absent."""

# Frame, code and generator internals that reach globals without a dunder, and str.format,
# whose replacement fields ("{0.__class__}") read attributes the AST check cannot see.
BLOCKED_ATTRIBUTES = frozenset((
    "format", "format_map", "mro", "gi_frame", "gi_code", "gi_yieldfrom", "ag_frame", "ag_code",
    "cr_frame", "cr_code", "cr_await", "f_globals", "f_locals", "f_builtins", "f_back", "f_code",
    "tb_frame", "tb_next", "co_code",
))

_REJECTED_NODES: dict[type[ast.AST], str] = {
    ast.Import: "imports are not allowed; the available helpers are already defined",
    ast.ImportFrom: "imports are not allowed; the available helpers are already defined",
    ast.ClassDef: "class definitions are not allowed; use functions, dicts and lists",
    ast.AsyncFunctionDef: "async code is not allowed",
    ast.Await: "async code is not allowed",
    ast.AsyncFor: "async code is not allowed",
    ast.AsyncWith: "async code is not allowed",
}
_IDENTIFIER_FIELDS = ("id", "name", "arg", "attr", "names", "kwd_attrs", "rest")


class ForbiddenCode(Exception):
    """The code uses a construct the sandbox does not allow."""


class CpuTimeExceeded(BaseException):
    """Raised inside the worker when a step uses up its CPU time; raised again on every later line, so it cannot be caught."""


class RestoreFailed(Exception):
    """Restoring the saved variables hit the CPU limit; the host resets the session."""


class OutputLimitExceeded(BaseException):
    """Raised inside the worker when printed output passes the cap."""


def check_code(source: str) -> ast.Module:
    """Parse and vet code; raises ForbiddenCode (or SyntaxError) naming the first problem found."""
    tree = ast.parse(source, SOURCE_NAME, "exec")
    for node in ast.walk(tree):
        reason = _REJECTED_NODES.get(type(node))
        if reason:
            raise ForbiddenCode(f"line {getattr(node, 'lineno', '?')}: {reason}")
        for field in _IDENTIFIER_FIELDS:
            value = getattr(node, field, None)
            for ident in value if isinstance(value, list) else [value]:
                if isinstance(ident, str):
                    _check_identifier(node, field, ident)
    return tree


def _check_identifier(node: ast.AST, field: str, ident: str) -> None:
    line = getattr(node, "lineno", "?")
    if ident.startswith("__"):
        raise ForbiddenCode(f"line {line}: names starting with '__' are not allowed ({ident!r})")
    if field in ("attr", "kwd_attrs"):
        if ident.startswith("_"):
            raise ForbiddenCode(f"line {line}: private attributes are not allowed (.{ident})")
        if ident in BLOCKED_ATTRIBUTES:
            hint = "; use an f-string" if ident.startswith("format") else ""
            raise ForbiddenCode(f"line {line}: attribute .{ident} is not allowed{hint}")


class _Output:
    """Collects printed text up to a cap."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.buffer = io.StringIO()
        self.size = 0
        self.truncated = False

    def write(self, text: str) -> None:
        room = self.cap - self.size
        if len(text) > room:
            self.buffer.write(text[: max(room, 0)])
            self.size = self.cap
            self.truncated = True
            raise OutputLimitExceeded(f"printed output passed the limit of {self.cap} characters")
        self.buffer.write(text)
        self.size += len(text)


class Worker:
    """State of one sandbox session inside the child."""

    def __init__(self, init: dict[str, Any]) -> None:
        self.limits: dict[str, Any] = init["limits"]
        self.events: list[Any] = []
        self.output = _Output(self.limits["output_chars"])
        self.namespace: dict[str, Any] = {"__name__": "__sandbox__", "__builtins__": self._builtins()}
        self.host: dict[str, Any] = {
            "__name__": "__sandbox_host__",
            "emit": self.emit,
            "user_namespace": lambda: self.namespace,
            **init.get("data", {}),
        }
        preamble = init.get("preamble") or ""
        if preamble:
            exec(compile(preamble, "<preamble>", "exec", dont_inherit=True), self.host)
        exports = init.get("exports")
        if exports is None:
            given = {"emit", "user_namespace", *init.get("data", {})}
            exports = [
                k for k, v in self.host.items()
                if not k.startswith("_") and k not in given and type(v).__name__ != "module"
            ]
        for name in exports:
            self.namespace[name] = self.host[name]
        self.repr = reprlib.Repr()
        self.repr.maxstring = self.repr.maxother = 400
        self.repr.maxlist = self.repr.maxtuple = self.repr.maxdict = self.repr.maxset = 50
        self.exported = {name: self.namespace[name] for name in exports}
        self.snapshots = _snapshots.Snapshots(int(self.limits.get("snapshot_bytes", 0)), self.exported, SOURCE_NAME)
        """What the last snapshot sent, and the source of each top-level `def`."""
        self.expired = False
        """Whether the running step used up its CPU time."""

    def _builtins(self) -> dict[str, Any]:
        import builtins

        table = {name: getattr(builtins, name) for name in SAFE_BUILTINS}
        table["print"] = self.print
        table["math"] = math
        return table

    def print(self, *args: Any, sep: str = " ", end: str = "\n") -> None:
        """print() for sandboxed code: writes to the capped output buffer."""
        self.output.write(str(sep).join(str(a) for a in args) + str(end))

    def emit(self, event: Any) -> None:
        """Send plain data (JSON-able) back to the host with this step's result."""
        if len(self.events) >= self.limits["max_events"]:
            raise RuntimeError(f"too many events in one step (limit {self.limits['max_events']})")
        self.events.append(event)

    def run(self, request: dict[str, Any]) -> dict[str, Any]:
        self.events = []
        self.output = _Output(self.limits["output_chars"])
        for name, value in (request.get("inject") or {}).items():
            self.namespace[name] = value
        answer: dict[str, Any] = {"value": None, "value_repr": None, "error_type": None, "error_message": None,
                                  "traceback": None}
        code = request["code"]
        self.expired = False
        self._arm(self.limits["cpu_s"])
        started = time.perf_counter()
        try:
            for hook, args in request.get("hooks") or ():
                self.host[hook](*args)
            value = self._execute(code)
            if value is not None:
                answer["value_repr"] = self.repr.repr(value)
                answer["value"] = _plain(value, self.limits["output_chars"])
        except ForbiddenCode as exc:
            answer.update(error_type="ForbiddenCode", error_message=str(exc))
        except SyntaxError as exc:
            answer.update(error_type="SyntaxError", error_message=f"line {exc.lineno}: {exc.msg}")
        except CpuTimeExceeded:
            answer.update(error_type="CpuTimeExceeded",
                          error_message=f"the code used more than {self.limits['cpu_s']:g}s of CPU time")
        except MemoryError:
            answer.update(error_type="MemoryLimitExceeded",
                          error_message=f"the code needed more than {self.limits['memory_mb']} MB of memory")
        except OutputLimitExceeded as exc:
            answer.update(error_type="OutputLimitExceeded", error_message=str(exc))
        except BaseException as exc:
            answer.update(error_type=type(exc).__name__, error_message=str(exc)[:2000],
                          traceback=_sandbox_traceback(exc, code))
        finally:
            self._arm(0)
            sys.settrace(None)
        if self.expired and answer["error_type"] != "CpuTimeExceeded":
            # The code caught the limit and then ended before its next line could raise it again.
            answer.update(error_type="CpuTimeExceeded", value=None, value_repr=None, traceback=None,
                          error_message=f"the code used more than {self.limits['cpu_s']:g}s of CPU time")
        elif self.output.truncated and answer["error_type"] is None:
            answer.update(error_type="OutputLimitExceeded", value=None, value_repr=None,
                          error_message=f"printed output passed the limit of {self.limits['output_chars']} characters")
        answer["duration_s"] = time.perf_counter() - started
        answer["stdout"] = self.output.buffer.getvalue()
        answer["stdout_truncated"] = self.output.truncated
        answer["events"] = self.events
        return answer

    def _execute(self, code: str) -> Any:
        tree = check_code(code)
        defs = [node for node in tree.body if isinstance(node, ast.FunctionDef) and not node.decorator_list]
        last: ast.expr | None = None
        if tree.body and isinstance(tail := tree.body[-1], ast.Expr):
            tree.body.pop()
            last = tail.value
        try:
            exec(compile(tree, SOURCE_NAME, "exec", dont_inherit=True), self.namespace)
        finally:
            self._record_defs(code, defs)
        if last is None:
            return None
        expression = ast.Expression(last)
        return eval(compile(expression, SOURCE_NAME, "eval", dont_inherit=True), self.namespace)

    def _record_defs(self, code: str, defs: list[ast.FunctionDef]) -> None:
        self.snapshots.record_defs(self.namespace, code, defs)

    # -- CPU limit -------------------------------------------------------------------------

    def on_cpu_timer(self, signum: int, frame: Any) -> None:
        """SIGPROF handler: mark the step expired, poison the sandboxed frames, raise the limit."""
        self.expired = True
        sys.settrace(self._refuse)
        while frame is not None:
            if frame.f_code.co_filename == SOURCE_NAME:
                frame.f_trace = self._refuse
                frame.f_trace_lines = True
            frame = frame.f_back
        raise CpuTimeExceeded()

    def _refuse(self, frame: Any, event: str, arg: Any) -> Any:
        # Installed once the limit has fired: any line or call of sandboxed code raises it again,
        # so a handler that caught it cannot run a single statement.
        if frame.f_code.co_filename != SOURCE_NAME:
            return None
        if event in ("call", "line"):
            raise CpuTimeExceeded()
        return self._refuse

    # -- snapshots ---------------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any] | None:
        """What changed in the namespace since the last snapshot sent, or None when nothing did."""
        return self.snapshots.take(self.namespace)

    def restore(self, entries: dict[str, bytes], aliases: dict[str, str]) -> dict[str, list[str]]:
        """Load the variables an earlier worker of this session sent, after the OS limits apply and
        under the per-run CPU limit: a `def` re-run evaluates its default values, which may loop.

        Raises RestoreFailed when the limit fires; the host then starts a worker without them.
        """
        seconds = float(self.limits.get("cpu_s") or 0)  # absent only for a Worker built by hand
        self.expired = False
        self._arm(seconds)
        try:
            return self.snapshots.load(self.namespace, entries, aliases, self._define)
        except CpuTimeExceeded:
            raise RestoreFailed(f"re-running the saved definitions used more than {seconds:g}s of CPU time") from None
        finally:
            self._arm(0)
            sys.settrace(None)

    def _define(self, source: str) -> None:
        tree = check_code(source)
        exec(compile(tree, SOURCE_NAME, "exec", dont_inherit=True), self.namespace)
        self._record_defs(source, [n for n in tree.body if isinstance(n, ast.FunctionDef)])

    def _arm(self, seconds: float) -> None:
        # The profiling timer interrupts Python-level loops gracefully; RLIMIT_CPU (set a second
        # later) kills the process when a single C call (a huge power, a sort) ignores the timer.
        signal.setitimer(signal.ITIMER_PROF, seconds)
        if seconds:
            usage = resource.getrusage(resource.RUSAGE_SELF)
            used = usage.ru_utime + usage.ru_stime
            _, hard = resource.getrlimit(resource.RLIMIT_CPU)
            soft = math.ceil(used + seconds) + 1
            if hard != resource.RLIM_INFINITY:
                soft = min(soft, hard)
            resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))


def _plain(value: Any, cap: int) -> Any:
    """The value itself when it is small JSON data, else None (the repr is always sent)."""
    if isinstance(value, (str, bytes, list, tuple, dict)) and len(value) > cap:
        return None
    try:
        text = json.dumps(value, allow_nan=False)
    except (TypeError, ValueError, RecursionError):
        return None
    return value if len(text) <= cap else None


def _sandbox_traceback(exc: BaseException, code: str) -> str:
    lines = code.splitlines()
    out = []
    for frame in traceback.extract_tb(exc.__traceback__):
        if frame.filename == SOURCE_NAME and frame.lineno:
            text = lines[frame.lineno - 1].strip() if frame.lineno <= len(lines) else ""
            out.append(f"  line {frame.lineno}, in {frame.name}: {text}")
    return "\n".join(out[-8:])


def _restrict(limits: dict[str, Any], worker: Worker) -> dict[str, Any]:
    """Apply OS limits; after this the process cannot open files, fork, or grow past its memory cap."""
    info: dict[str, Any] = {}
    kernel = limits.get("kernel", "off")
    layer, ruleset, ruleset_error = None, None, ""
    if kernel != "off":
        # Loaded and built while the worker can still read the rein and Python directories, and
        # before RLIMIT_NOFILE: each Landlock rule needs a descriptor for its path.
        layer = _load_sibling("sandbox_kernel")
        try:
            ruleset = layer.landlock_ruleset(layer.stdlib_paths())
        except OSError as exc:
            ruleset_error = str(exc)
    dropped = False
    if os.geteuid() == 0:
        # Root ignores RLIMIT_NPROC and file permissions; become nobody first.
        try:
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            dropped = True
        except OSError:
            dropped = False
    info["privileges_dropped"] = dropped
    if layer is not None:
        info.update(layer.confine(ruleset, ruleset_error))
        if kernel == "require" and not info["landlock_abi"]:
            raise OSError(f"the required kernel layer could not be applied: {info['kernel_error']}")
    memory = limits["memory_mb"] * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    session_cpu = math.ceil(limits["session_cpu_s"])
    resource.setrlimit(resource.RLIMIT_CPU, (session_cpu, session_cpu))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))
    resource.setrlimit(resource.RLIMIT_NPROC, (0, 0))
    # Descriptors 0-2 hold the pipes; a limit of 3 means no new file, socket or pipe can be opened.
    resource.setrlimit(resource.RLIMIT_NOFILE, (3, 3))
    signal.signal(signal.SIGXCPU, signal.SIG_DFL)
    signal.signal(signal.SIGPROF, worker.on_cpu_timer)
    return info


def _read_exact(stream: Any, size: int) -> bytes | None:
    chunks = []
    while size:
        chunk = stream.read(size)
        if not chunk:
            return None
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def _read_frame(stream: Any) -> bytes | None:
    header = _read_exact(stream, HEADER.size)
    if header is None:
        return None
    (size,) = HEADER.unpack(header)
    return _read_exact(stream, size)


def _write_frame(stream: Any, payload: dict[str, Any]) -> None:
    data = _encode(payload)
    stream.write(HEADER.pack(len(data)) + data)
    stream.flush()


def _encode(payload: dict[str, Any]) -> bytes:
    try:
        return json.dumps(payload, allow_nan=False, default=repr).encode()
    except (ValueError, TypeError, RecursionError, MemoryError) as exc:
        # Emitted events or reprs too deep or odd for JSON: the step fails, the worker lives on.
        safe = {k: payload.get(k) for k in ("stdout", "stdout_truncated", "duration_s", "snapshot")}
        safe.update(value=None, value_repr=None, events=[], traceback=None,
                    error_type="ResultNotSerializable",
                    error_message=f"the step's result could not be sent back ({type(exc).__name__}: "
                                  f"{str(exc)[:200]}); keep emitted data flat and plain")
        return json.dumps(safe, allow_nan=False, default=repr).encode()


def _run_step(worker: Worker, request: dict[str, Any]) -> dict[str, Any]:
    try:
        answer = worker.run(request)
    except BaseException as exc:  # e.g. the CPU timer firing while run() was already cleaning up
        worker._arm(0)
        sys.settrace(None)
        kind = "CpuTimeExceeded" if isinstance(exc, CpuTimeExceeded) else type(exc).__name__
        answer = {"value": None, "value_repr": None, "traceback": None, "events": [], "stdout": "",
                  "stdout_truncated": False, "error_type": kind, "error_message": str(exc)[:2000]}
    try:
        snapshot = worker.snapshot()
    except BaseException:
        snapshot = None
    if snapshot is not None:
        answer["snapshot"] = snapshot
    return answer


def main() -> None:
    """Serve requests until the parent closes the pipe."""
    # The protocol owns descriptors 0 and 1; 2 goes to /dev/null so a stray write cannot block.
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 2)
    os.close(null)
    inp = os.fdopen(0, "rb", buffering=0)
    out = os.fdopen(1, "wb")
    sys.stdin = sys.stdout = sys.stderr = None
    worker: Worker | None = None
    while True:
        frame = _read_frame(inp)
        if frame is None:
            return
        request = pickle.loads(frame)
        op = request.get("op")
        if op == "init":
            stage = "preamble"
            try:
                worker = Worker(request)
                stage = "os limits"
                info: dict[str, Any] = _restrict(request["limits"], worker)
                stage = "restore"
                restore = request.get("restore")
                if restore:
                    info.update(worker.restore(restore["entries"], restore["aliases"]))
            except BaseException as exc:
                _write_frame(out, {"ok": False, "stage": stage, "error": f"{type(exc).__name__}: {exc}",
                                   "traceback": traceback.format_exc(limit=-4)})
                return
            _write_frame(out, {"ok": True, **info})
        elif op == "run" and worker is not None:
            _write_frame(out, _run_step(worker, request))
        else:
            _write_frame(out, {"ok": False, "error": f"unexpected request {op!r}"})


if __name__ == "__main__":
    main()

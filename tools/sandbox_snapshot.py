"""Namespace snapshots: what a sandbox worker sends after each run, so a replacement worker can restore it.

Standard library only, and free of rein imports: the worker (tools/sandbox_worker.py) loads this file
by path, since it runs without rein on sys.path.
"""

from __future__ import annotations

import ast
import base64
import io
import pickle
import types
from collections.abc import Callable
from typing import Any

SCALARS = (int, float, complex, str, bytes, bool, type(None))
"""Immutable values: an unchanged one is not pickled again, and two names holding one are no alias."""

_SNAPSHOT_GLOBALS = frozenset(("set", "frozenset", "complex", "bytearray", "slice", "range", "list",
                               "dict", "tuple", "str", "bytes", "int", "float", "bool"))


class Snapshots:
    """One worker's snapshot state: what it last sent, and the source of each top-level `def`."""

    def __init__(self, cap: int, exported: dict[str, Any], source_name: str) -> None:
        self.cap = cap
        """Largest snapshot in bytes; 0 turns snapshots off."""
        self.exported = exported
        """Preamble names exported into the namespace: never snapshotted while still bound as exported."""
        self.source_name = source_name
        """The file name sandboxed code is compiled under."""
        self.def_sources: dict[str, tuple[types.CodeType, str]] = {}
        """Source of each top-level `def` still bound to its name, so a snapshot can re-create it."""
        self.sent: dict[str, tuple[Any, bytes]] = {}
        """Per variable: the value (when immutable) and the bytes last sent in a snapshot."""
        self.last_shape: tuple[list[str], dict[str, str], list[str]] | None = None

    def record_defs(self, namespace: dict[str, Any], code: str, defs: list[ast.FunctionDef]) -> None:
        """Remember the source of the `def`s in `code` that are still bound to the functions they made."""
        for node in defs:
            fn = namespace.get(node.name)
            if isinstance(fn, types.FunctionType) and fn.__code__.co_filename == self.source_name \
                    and fn.__code__.co_firstlineno == node.lineno:
                source = ast.get_source_segment(code, node)
                if source:
                    self.def_sources[node.name] = (fn.__code__, source)

    def take(self, namespace: dict[str, Any]) -> dict[str, Any] | None:
        """What changed in the namespace since the last snapshot sent, or None when nothing did.

        Each variable is pickled alone, so one that cannot be pickled (a lambda, a generator, a
        helper object, data nested too deep) is listed as lost without taking the others along.
        Functions from `def` statements travel as their source; a variable bound to the same
        object as an earlier one (`b = a`) travels as an alias. Sharing inside containers is not
        kept. Unchanged immutable values are not pickled again.
        """
        if self.cap <= 0:
            return None
        entries: dict[str, bytes] = {}
        aliases: dict[str, str] = {}
        lost: list[str] = []
        first: dict[int, str] = {}
        sent: dict[str, tuple[Any, bytes]] = {}
        room = self.cap
        for name, value in namespace.items():
            if name.startswith("__") or (name in self.exported and value is self.exported[name]):
                continue
            if not isinstance(value, SCALARS) and id(value) in first:
                owner = first[id(value)]
                if owner in entries:
                    aliases[name] = owner
                else:
                    lost.append(name)
                continue
            first[id(value)] = name
            previous = self.sent.get(name)
            if previous is not None and previous[0] is value and isinstance(value, SCALARS):
                blob: bytes | None = previous[1]
            elif isinstance(value, types.FunctionType):
                known = self.def_sources.get(name)
                fresh = known is not None and value.__code__ is known[0]
                blob = pickle.dumps(("def", known[1])) if fresh and known else None
            else:
                blob = _capped_pickle(("value", value), room)
            if blob is None or len(blob) > room:
                lost.append(name)
                continue
            room -= len(blob)
            entries[name] = blob
            sent[name] = (value if isinstance(value, SCALARS) else None, blob)
        changed = {name: blob for name, blob in entries.items()
                   if name not in self.sent or self.sent[name][1] != blob}
        shape = (sorted(entries), aliases, sorted(lost))
        self.sent = sent
        if not changed and shape == self.last_shape:
            return None
        self.last_shape = shape
        return {"set": {name: base64.b64encode(blob).decode("ascii") for name, blob in changed.items()},
                "names": shape[0], "aliases": aliases, "lost": shape[2]}

    def load(self, namespace: dict[str, Any], entries: dict[str, bytes], aliases: dict[str, str],
             define: Callable[[str], None]) -> dict[str, list[str]]:
        """Bring back what an earlier worker sent: plain values into `namespace`, `def` sources
        through `define` (which vets and runs them), then aliases. Which names came back, which not."""
        restored, failed = [], []
        sources = []
        for name, blob in entries.items():
            try:
                kind, payload = _SnapshotUnpickler(io.BytesIO(blob)).load()
            except Exception:
                failed.append(name)
                continue
            if not isinstance(name, str) or name.startswith("__"):
                failed.append(str(name))
            elif kind == "def" and isinstance(payload, str):
                sources.append((name, payload))
            elif kind == "value":
                namespace[name] = payload
                restored.append(name)
            else:
                failed.append(name)
        for name, source in sources:
            try:
                define(source)
                restored.append(name)
            except Exception:
                failed.append(name)
        for name, owner in aliases.items():
            if owner in restored and not name.startswith("__"):
                namespace[name] = namespace[owner]
                restored.append(name)
            else:
                failed.append(name)
        return {"restored": sorted(restored), "restore_failed": sorted(failed)}


class _CappedBuffer(io.BytesIO):
    """A pickle target that gives up as soon as the snapshot passes its size cap."""

    def __init__(self, cap: int) -> None:
        super().__init__()
        self.cap = cap

    def write(self, data: Any) -> int:
        if self.tell() + len(data) > self.cap:
            raise OverflowError("snapshot too large")
        return super().write(data)


def _capped_pickle(value: Any, cap: int) -> bytes | None:
    buffer = _CappedBuffer(cap)
    try:
        pickle.Pickler(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump(value)
    except Exception:  # unpicklable, too deep (RecursionError), too large (OverflowError)
        return None
    return buffer.getvalue()


class _SnapshotUnpickler(pickle.Unpickler):
    """Loads plain builtin data only: a snapshot can never name a module or function to call."""

    def find_class(self, module: str, name: str) -> Any:
        if module == "builtins" and name in _SNAPSHOT_GLOBALS:
            import builtins

            return getattr(builtins, name)
        raise pickle.UnpicklingError(f"{module}.{name} is not allowed in a snapshot")

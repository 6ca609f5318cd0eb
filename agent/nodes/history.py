"""The thread's history as Message objects, validated once per message instead of on every call."""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

from agent.messages import Message


class HistoryMemo:
    """Validated messages per thread: a call validates only the messages it has not seen before.

    The state keeps plain dicts (checkpoints stay small and readable); this memo sits beside it
    in memory. A message counts as seen when it is the same dict as before (within a turn) or an
    equal one (a turn restored from a checkpoint), so a stale entry can cost a validation, never
    a wrong message. Nodes never change state in place (LangGraph's contract), so an identical
    dict is an unchanged one.
    """

    def __init__(self, threads: int = 256) -> None:
        self.threads = threads
        """How many threads are remembered; the least recently used is dropped first."""
        self._seen: OrderedDict[str, tuple[list[dict[str, Any]], list[Message]]] = OrderedDict()
        # One Agent may run on several event loops (the sync API's private one and the caller's).
        self._lock = threading.Lock()

    def messages(self, thread: str | None, raw: list[dict[str, Any]]) -> list[Message]:
        """The thread's messages as Message objects (a new list, so callers may extend it)."""
        if thread is None:
            return [Message.model_validate(m) for m in raw]
        with self._lock:
            known_raw, known = self._seen.pop(thread, ([], []))
        n = _shared_prefix(known_raw, raw)
        out = known[:n] + [Message.model_validate(m) for m in raw[n:]]
        with self._lock:
            self._seen[thread] = (list(raw), out)
            while len(self._seen) > self.threads:
                self._seen.popitem(last=False)
        return list(out)


def _shared_prefix(known: list[dict[str, Any]], raw: list[dict[str, Any]]) -> int:
    n = 0
    for a, b in zip(known, raw, strict=False):
        if a is not b and a != b:
            break
        n += 1
    return n

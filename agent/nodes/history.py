"""The thread's history as Message objects, validated once per message instead of on every call."""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
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


@dataclass
class _View:
    version: str | None
    messages: list[Message]
    hold: object | None


class ThreadViews:
    """The last known messages of each thread, keyed by the thread's latest checkpoint id.

    The server reads a thread before every turn to reconcile the request with it; with this, a read
    whose thread has not changed since the agent last saw it costs one checkpoint-id query instead
    of a checkpoint load (and, on delta channels, a replay of its writes). An entry is trusted only
    while the thread's latest checkpoint id is the one it was stored with, so a write by another
    process or another Agent on the same database is never missed. A turn extends the entry with
    the messages it added only when it ran under the hold that validated the entry (nobody could
    change the thread in between); any other run drops it.
    """

    def __init__(self, threads: int = 512) -> None:
        self.threads = threads
        """How many threads are remembered; the least recently used is dropped first."""
        self._views: OrderedDict[str, _View] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, thread: str, version: str | None, hold: object | None) -> list[Message] | None:
        """The thread's messages if they were stored at `version` (a new list), claiming the entry
        for `hold` (the caller's hold on the thread, or None)."""
        with self._lock:
            view = self._views.get(thread)
            if view is None or view.version != version:
                return None
            view.hold = hold
            self._views.move_to_end(thread)
            return list(view.messages)

    def put(self, thread: str, version: str | None, messages: list[Message], hold: object | None) -> None:
        """Remember the thread's messages at `version`, read or run under `hold`."""
        with self._lock:
            self._views[thread] = _View(version, list(messages), hold)
            self._views.move_to_end(thread)
            while len(self._views) > self.threads:
                self._views.popitem(last=False)

    def held_by(self, thread: str, hold: object) -> list[Message] | None:
        """The thread's messages when the entry was validated (or last extended) under `hold`."""
        with self._lock:
            view = self._views.get(thread)
            return list(view.messages) if view is not None and view.hold is hold else None

    def drop(self, thread: str) -> None:
        """Forget the thread (a run changed it in a way this cache did not follow)."""
        with self._lock:
            self._views.pop(thread, None)

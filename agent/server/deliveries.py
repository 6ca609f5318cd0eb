"""Replies the server handed to a client still connected to receive them.

A full-history request whose history is its thread minus the last reply is either a retry (the
client never got that reply: it timed out, its connection dropped, the server restarted) or a
request for another answer (a Regenerate button, or another end user whose conversation opens the
same way). Unless the request says it is a retry (`retries.is_resend`), the server tells the two
apart by whether it delivered that reply: a reply some client received is not resent to a request
that does not say it is a retry.

The record is this process's memory, bounded, so after a restart, or on another process sharing
the database, or once it has been pushed out by newer replies, a reply counts as undelivered and
an identical resend gets it again: never running a turn twice wins over a new answer.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections import OrderedDict
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Any, TypeVar

T = TypeVar("T")

MAX_REMEMBERED = 50_000
"""Threads whose last delivered reply is remembered (about 150 bytes each)."""


def _digest(reply: str) -> bytes:
    # Whitespace-insensitive, as replies are compared (`threads.Turn.key`).
    return hashlib.sha256(" ".join(reply.split()).encode()).digest()[:12]


class Deliveries:
    """The last reply delivered on each thread (by storage id), most recent first to stay."""

    def __init__(self, limit: int = MAX_REMEMBERED) -> None:
        self.limit = limit
        self._last: OrderedDict[str, bytes] = OrderedDict()

    def add(self, storage_id: str, reply: str) -> None:
        """Record that a client received `reply` as the answer on this thread."""
        self._last[storage_id] = _digest(reply)
        self._last.move_to_end(storage_id)
        while len(self._last) > self.limit:
            self._last.popitem(last=False)

    def seen(self, storage_id: str, reply: str) -> bool:
        """Whether a client received this reply on this thread."""
        return self._last.get(storage_id) == _digest(reply)

    def __len__(self) -> int:
        return len(self._last)


def client_connected(request: Any) -> Callable[[], Awaitable[bool]]:
    """Whether the client of a Starlette request is still there to receive its answer (one that
    gave up must get it on its resend, not a new one)."""

    async def connected() -> bool:
        return not await request.is_disconnected()

    return connected


async def delivered_stream(
    body: AsyncGenerator[bytes, None],
    connected: Callable[[], Awaitable[bool]],
    done: asyncio.Future[T],
    record: Callable[[T], None],
    is_last: Callable[[bytes], bool] = lambda chunk: chunk.endswith(b"data: [DONE]\n\n"),
) -> AsyncGenerator[bytes, None]:
    """A stream's body that calls `record` with the turn's outcome when its last write (`is_last`:
    Chat Completions' [DONE], the Responses API's terminal event) goes to a client still connected.

    Checked before that write: once the body has ended, the server reports every client gone.
    """
    try:
        async for chunk in body:
            finished = is_last(chunk) and done.done() and not done.cancelled()
            if finished and done.exception() is None and await connected():
                record(done.result())
            yield chunk
    finally:
        await body.aclose()

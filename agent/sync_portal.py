"""A private event loop on a daemon thread: how the Agent's sync API runs its async core."""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import AsyncIterator, Coroutine, Iterator
from typing import Any, TypeVar

T = TypeVar("T")


class Portal:
    """A private event loop on a daemon thread, for the sync API."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="rein-agent-loop", daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def iterate(self, agen: AsyncIterator[T]) -> Iterator[T]:
        q: queue.Queue[tuple[str, Any]] = queue.Queue()

        async def pump() -> None:
            try:
                async for item in agen:
                    q.put(("item", item))
            except BaseException as exc:  # re-raised in the caller's thread
                q.put(("error", exc))
            else:
                q.put(("done", None))

        asyncio.run_coroutine_threadsafe(pump(), self.loop)
        while True:
            kind, value = q.get()
            if kind == "item":
                yield value
            elif kind == "error":
                raise value
            else:
                return

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=5)


__all__ = ["Portal"]

"""The SSE stream's wait for a turn's next event."""

from __future__ import annotations

import asyncio

import pytest

from agent.server.sse import next_item


async def test_next_item_takes_what_is_there_and_times_out_at_the_deadline() -> None:
    loop = asyncio.get_running_loop()
    items: asyncio.Queue[str] = asyncio.Queue()
    items.put_nowait("token")
    # Already queued: taken even with the deadline passed (the turn produced it in time).
    assert await next_item(items, loop.time() - 1) == "token"
    started = loop.time()
    with pytest.raises(TimeoutError):
        await next_item(items, started + 0.05)
    assert 0.04 <= loop.time() - started < 1.0
    # An item that arrives while it waits ends the wait, and nothing keeps running afterwards.
    loop.call_later(0.02, items.put_nowait, "late")
    assert await next_item(items, loop.time() + 5) == "late"
    assert items.empty() and len(asyncio.all_tasks()) == 1

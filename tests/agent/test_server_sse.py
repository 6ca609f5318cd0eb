"""The SSE stream: its wait for a turn's next event, its writes, and its response."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator

import pytest

from agent.server.chat_turns import TurnHandle, TurnOutcome
from agent.server.schema import ChatRequest, parse_request
from agent.server.sse import DONE, EventStream, next_item, stream_turn


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


def _request(**extra: object) -> ChatRequest:
    body = {"model": "bot", "stream": True, "messages": [{"role": "user", "content": "hi"}], **extra}
    return parse_request(json.dumps(body).encode())


def _events(data: bytes) -> list[str]:
    assert data.endswith(b"\n\n")
    return [e.removeprefix("data: ") for e in data.decode().split("\n\n")[:-1]]


async def test_events_queued_together_go_out_in_one_write_and_nothing_waits_behind_a_wait() -> None:
    loop = asyncio.get_running_loop()
    handle = TurnHandle()
    writes = stream_turn(handle, _request(), loop.time() + 5, 5)
    # Nothing queued yet: the role chunk is written before the stream waits for the turn.
    first = _events(await anext(writes))
    assert [json.loads(e)["choices"][0]["delta"] for e in first] == [{"role": "assistant", "content": ""}]
    handle.streamed += ["Hel", "lo"]
    for kind, value in [("event", {"type": "mode", "mode": "instant"}), ("token", "Hel"), ("token", "lo")]:
        handle.put(kind, value)
    second = _events(await anext(writes))
    assert [json.loads(e).get("rein") or json.loads(e)["choices"][0]["delta"] for e in second] == [
        {"event": {"type": "mode", "mode": "instant"}}, {"content": "Hel"}, {"content": "lo"}]
    # A token and the turn's end that arrive while it waits: one write, ending with [DONE].
    loop.call_soon(handle.put, "token", "!")
    handle.streamed.append("!")
    loop.call_soon(handle.put, "done", TurnOutcome(thread_id="t1", action="append", reply="Hello!"))
    last = _events(await anext(writes))
    assert last[-1] == "[DONE]" and json.loads(last[0])["choices"][0]["delta"] == {"content": "!"}
    final = json.loads(last[1])
    assert final["choices"][0]["finish_reason"] == "stop" and final["rein"]["thread_id"] == "t1"
    with pytest.raises(StopAsyncIteration):
        await anext(writes)


async def test_a_turn_that_does_not_finish_in_time_ends_the_stream_with_a_timeout_error() -> None:
    loop = asyncio.get_running_loop()
    handle = TurnHandle()
    handle.put("token", "partial")
    handle.streamed.append("partial")
    data = b"".join([w async for w in stream_turn(handle, _request(), loop.time() + 0.05, 0.05)])
    events = _events(data)
    assert events[-1] == "[DONE]" and json.loads(events[-2])["error"]["code"] == "request_timeout"
    assert json.loads(events[1])["choices"][0]["delta"] == {"content": "partial"}


async def test_a_client_that_left_ends_the_response_and_closes_its_stream() -> None:
    closed: list[bool] = []
    sent: list[dict[str, object]] = []

    async def body() -> AsyncGenerator[bytes, None]:
        try:
            for i in range(100):
                yield f"data: {i}\n\n".encode()
        finally:
            closed.append(True)

    async def send(message: dict[str, object]) -> None:
        if len(sent) == 3:
            raise OSError("connection reset")  # what an ASGI 2.4 server raises for a client that left
        sent.append(message)

    async def receive() -> dict[str, object]:
        raise AssertionError("the response does not read the request")

    await EventStream(body(), headers={"X-Rein-Thread": "t1"})({"type": "http"}, receive, send)  # type: ignore[arg-type]
    assert closed == [True] and len(sent) == 3
    start = sent[0]
    assert start["status"] == 200 and (b"content-type", b"text/event-stream; charset=utf-8") in start["headers"]  # type: ignore[operator]
    assert (b"x-rein-thread", b"t1") in start["headers"]  # type: ignore[operator]


async def test_the_write_that_ends_with_done_ends_the_body() -> None:
    sent: list[dict[str, object]] = []

    async def body() -> AsyncGenerator[bytes, None]:
        yield b"data: {}\n\n"
        yield b"data: {}\n\n" + DONE

    async def send(message: dict[str, object]) -> None:
        sent.append(message)

    await EventStream(body())({"type": "http"}, None, send)  # type: ignore[arg-type]
    assert [(m.get("body"), m.get("more_body")) for m in sent[1:]] == [
        (b"data: {}\n\n", True), (b"data: {}\n\n" + DONE, False)]

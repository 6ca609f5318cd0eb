"""Streaming answers as server-sent events in OpenAI's chunk format, ending with `data: [DONE]`."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncGenerator, Mapping
from typing import Any

from agent.extras import needs_extra

with needs_extra("server", "rein's HTTP server"):
    from starlette.responses import Response
    from starlette.types import Receive, Scope, Send

from agent.server.chat_turns import TurnHandle, TurnOutcome
from agent.server.errors import ApiError, error_body, still_running
from agent.server.schema import ChatRequest, chunk_object, new_completion_id, tool_call_deltas

log = logging.getLogger("rein.server")

DONE = b"data: [DONE]\n\n"


def encode(obj: dict[str, Any]) -> bytes:
    """One SSE data event."""
    return b"data: " + json.dumps(obj, ensure_ascii=False, default=str, separators=(",", ":")).encode() + b"\n\n"


def error_event(exc: BaseException) -> bytes:
    """An error inside a stream: OpenAI clients raise it as an APIError."""
    if isinstance(exc, ApiError):
        body = exc.body()
        body["error"]["status"] = exc.status
    else:
        body = error_body(f"internal error: {type(exc).__name__}: {exc}", type="server_error")
        body["error"]["status"] = 500
    return encode(body)


async def next_item(items: asyncio.Queue[Any], deadline: float) -> Any:
    """The queue's next item; TimeoutError once the loop's clock passes deadline.

    Items come in bursts (a model's tokens), so one already there is taken without a timer; the
    wait is bounded by a timeout scope rather than wait_for, which starts a task per call."""
    if not items.empty():
        return items.get_nowait()
    async with asyncio.timeout_at(deadline):
        return await items.get()


async def stream_turn(
    handle: TurnHandle, request: ChatRequest, deadline: float, timeout_s: float
) -> AsyncGenerator[bytes, None]:
    """The SSE body of a streamed turn: a role chunk, content (and rein event) chunks, a chunk
    with the paused calls' `tool_calls` when the turn paused for approval, a final chunk with the
    finish reason, an optional usage chunk, and [DONE]. rein's metadata rides on the last chunk
    before [DONE].

    Each yield is one write: the events queued by the time the stream would wait go out together
    (a loaded server queues several between two wake-ups; each write costs the ASGI stack's send
    wrappers), and nothing is held back while the turn has not produced its next event."""
    cid, created, model = new_completion_id(), int(time.time()), request.model
    usage_field = request.include_usage

    def chunk(**kw: Any) -> bytes:
        return encode(chunk_object(id=cid, model=model, created=created, with_usage_field=usage_field, **kw))

    pending = [chunk(delta={"role": "assistant", "content": ""})]
    items = handle.items
    outcome: TurnOutcome | None = None
    failure: BaseException | None = None
    while outcome is None and failure is None:
        if pending and items.empty():
            yield b"".join(pending)
            pending = []
        try:
            kind, value = await next_item(items, deadline)
        except TimeoutError:
            failure = still_running(timeout_s)
            continue
        if kind == "token":
            pending.append(chunk(delta={"content": value}))
        elif kind == "reasoning":
            pending.append(chunk(delta={"reasoning_content": value}))
        elif kind == "event":
            pending.append(chunk(rein={"event": value}))
        elif kind == "error":
            failure = value
        else:
            outcome = value
            failure = outcome.failed()
    if failure is not None:  # the status line went out with the first write: errors are events
        pending += [error_event(failure), DONE]
        yield b"".join(pending)
        return
    assert outcome is not None  # the loop ends on an outcome or a failure
    shown = "".join(handle.streamed)
    if not shown and outcome.reply:
        pending.append(chunk(delta={"content": outcome.reply}))  # a replayed or continued answer
    elif " ".join(shown.split()) != " ".join(outcome.reply.split()):
        log.warning("thread %s: streamed text differs from the committed reply", outcome.thread_id)
    meta = outcome.metadata()
    if outcome.pending:  # a pause: the calls awaiting decisions, whole, as OpenAI streams tool calls
        pending.append(chunk(delta={"tool_calls": tool_call_deltas(outcome.pending)}))
    pending.append(chunk(finish_reason=outcome.finish_reason, rein=None if usage_field else meta))
    if usage_field:
        pending.append(
            encode(
                chunk_object(
                    id=cid, model=model, created=created, usage=outcome.usage, with_usage_field=True,
                    no_choices=True, rein=meta,
                )
            )
        )
    pending.append(DONE)
    yield b"".join(pending)


class EventStream(Response):
    """A `text/event-stream` response written straight from its iterator.

    Starlette's StreamingResponse runs each response in a task group with a second task that
    listens for the client leaving, so as to cancel the stream; here that would only stop the
    rendering of events early, since a turn runs to its end whether or not anyone reads it
    (chat_turns), and it cost about a tenth of a streamed turn's CPU. After a client leaves,
    uvicorn drops the writes (ASGI 2.3) and servers of ASGI 2.4 raise OSError, which ends the
    stream here. A write that ends with [DONE] ends the body (one send fewer per turn)."""

    media_type = "text/event-stream"

    def __init__(self, content: AsyncGenerator[bytes, None], headers: Mapping[str, str] | None = None) -> None:
        self.body_iterator = content
        self.status_code = 200
        self.background = None  # a Response attribute; this one runs no background task
        self.init_headers(headers)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = self.body_iterator
        try:
            await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
            async for data in body:
                last = data.endswith(DONE)  # stream_turn's last write: the body ends with it
                await send({"type": "http.response.body", "body": data, "more_body": not last})
                if last:
                    return
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except OSError:
            log.debug("a stream's client left before its end")
        finally:
            await body.aclose()

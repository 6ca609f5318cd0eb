"""Streaming answers as server-sent events in OpenAI's chunk format, ending with `data: [DONE]`."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

from agent.server.chat_turns import TurnHandle, TurnOutcome
from agent.server.errors import ApiError, error_body
from agent.server.schema import ChatRequest, chunk_object, new_completion_id

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


async def stream_turn(handle: TurnHandle, request: ChatRequest, deadline: float, timeout_s: float) -> AsyncIterator[bytes]:
    """The SSE body of a streamed turn: a role chunk, content (and rein event) chunks, a final
    chunk with the finish reason, an optional usage chunk, and [DONE]. rein's metadata rides on
    the last chunk before [DONE]."""
    cid, created, model = new_completion_id(), int(time.time()), request.model
    usage_field = request.include_usage

    def chunk(**kw: Any) -> bytes:
        return encode(chunk_object(id=cid, model=model, created=created, with_usage_field=usage_field, **kw))

    yield chunk(delta={"role": "assistant", "content": ""})
    outcome: TurnOutcome | None = None
    while outcome is None:
        try:
            kind, value = await next_item(handle.items, deadline)
        except TimeoutError:
            yield error_event(
                ApiError(
                    504,
                    f"the agent did not finish within {timeout_s:g} s; the turn keeps running and is "
                    "committed to its thread; resend the same messages to get its answer",
                    type="timeout",
                    code="request_timeout",
                )
            )
            yield DONE
            return
        if kind == "token":
            yield chunk(delta={"content": value})
        elif kind == "reasoning":
            yield chunk(delta={"reasoning_content": value})
        elif kind == "event":
            yield chunk(rein={"event": value})
        elif kind == "error":
            yield error_event(value)
            yield DONE
            return
        else:
            outcome = value
    failure = outcome.failed()
    if failure is not None:
        yield error_event(failure)
        yield DONE
        return
    shown = "".join(handle.streamed)
    if not shown and outcome.reply:
        yield chunk(delta={"content": outcome.reply})  # a replayed or continued answer
    elif " ".join(shown.split()) != " ".join(outcome.reply.split()):
        log.warning("thread %s: streamed text differs from the committed reply", outcome.thread_id)
    meta = outcome.metadata()
    yield chunk(finish_reason=outcome.finish_reason, rein=None if usage_field else meta)
    if usage_field:
        yield encode(
            chunk_object(
                id=cid, model=model, created=created, usage=outcome.usage, with_usage_field=True,
                no_choices=True, rein=meta,
            )
        )
    yield DONE

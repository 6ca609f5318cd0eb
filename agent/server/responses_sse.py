"""Streaming a response as the Responses API's server-sent events.

Each event is `event: TYPE` and `data: {…, "type": TYPE, "sequence_number": N}`, in the order
OpenAI sends them: response.created and response.in_progress; the output message's
response.output_item.added and response.content_part.added; a response.output_text.delta per
token; then response.output_text.done, response.content_part.done, response.output_item.done and
response.completed (response.incomplete when the agent ran out of steps) with the usage and rein's
metadata. The mode decision and each intervention ride on `rein.event` events as they happen. A
turn that fails after the headers went out ends with response.failed; the stream has no [DONE].
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncGenerator
from typing import Any

from agent.server.chat_turns import TurnHandle, TurnOutcome
from agent.server.errors import ApiError
from agent.server.responses_objects import (
    ResponseShape,
    Status,
    failure,
    message_item,
    output_text,
    response_object,
)
from agent.server.sse import next_item

log = logging.getLogger("rein.server")


class _Events:
    """Numbers and encodes the events of one stream."""

    def __init__(self) -> None:
        self.sequence = 0

    def __call__(self, type: str, **fields: Any) -> bytes:
        data = {"type": type, "sequence_number": self.sequence, **fields}
        self.sequence += 1
        body = json.dumps(data, ensure_ascii=False, default=str, separators=(",", ":"))
        return f"event: {type}\ndata: {body}\n\n".encode()


def response_status(outcome: TurnOutcome) -> Status:
    """completed, or incomplete when the agent ran out of steps."""
    return "incomplete" if outcome.termination == "max_steps" else "completed"


async def stream_response(
    handle: TurnHandle, shape: ResponseShape, deadline: float, timeout_s: float
) -> AsyncGenerator[bytes, None]:
    """The SSE body of a streamed response.

    As in Chat Completions' stream, the events queued by the time the stream would wait go out in
    one write, and the turn runs to its end whether or not anyone reads them."""
    event = _Events()
    ids = {"item_id": shape.ref.message_id, "output_index": 0, "content_index": 0}
    pending = [
        event("response.created", response=response_object(shape, status="in_progress", text=None)),
        event("response.in_progress", response=response_object(shape, status="in_progress", text=None)),
        event("response.output_item.added", output_index=0, item=message_item(shape, "", "in_progress")),
        event("response.content_part.added", **ids, part=output_text("")),
    ]
    streamed: list[str] = []
    items = handle.items
    outcome: TurnOutcome | None = None
    problem: BaseException | None = None
    while outcome is None and problem is None:
        if pending and items.empty():
            yield b"".join(pending)
            pending = []
        try:
            kind, value = await next_item(items, deadline)
        except TimeoutError:
            problem = ApiError(
                504,
                f"the agent did not finish within {timeout_s:g} s; the turn keeps running and is committed "
                "to its thread; resend the same request (the same Idempotency-Key) to get its answer "
                "without running it again",
                type="timeout",
                code="request_timeout",
            )
            continue
        if kind == "token":
            streamed.append(value)
            pending.append(event("response.output_text.delta", **ids, delta=value, logprobs=[]))
        elif kind == "event":
            pending.append(event("rein.event", event=value))
        elif kind == "error":
            problem = value
        elif kind == "done":
            outcome = value
            problem = outcome.failed()
    if problem is not None:
        message = problem.message if isinstance(problem, ApiError) else f"internal error: {type(problem).__name__}"
        failed = response_object(shape, status="failed", text="".join(streamed) or None, error=failure(message))
        pending.append(event("response.failed", response=failed))
        yield b"".join(pending)
        return
    assert outcome is not None  # the loop ends on an outcome or a problem
    shown = "".join(streamed)
    if not shown and outcome.reply:
        # a replayed or continued answer: it arrives whole
        pending.append(event("response.output_text.delta", **ids, delta=outcome.reply, logprobs=[]))
    elif " ".join(shown.split()) != " ".join(outcome.reply.split()):
        log.warning("thread %s: streamed text differs from the committed reply", outcome.thread_id)
    text = outcome.reply
    status = response_status(outcome)
    final = response_object(shape, status=status, text=text, usage=outcome.usage, rein=outcome.metadata())
    pending += [
        event("response.output_text.done", **ids, text=text, logprobs=[]),
        event("response.content_part.done", **ids, part=output_text(text)),
        event("response.output_item.done", output_index=0, item=final["output"][0]),
        event(f"response.{status}", response=final),
    ]
    yield b"".join(pending)

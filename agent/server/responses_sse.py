"""Streaming a response as the Responses API's server-sent events.

Each event is `event: TYPE` and `data: {…, "type": TYPE, "sequence_number": N}`, in the order
OpenAI sends them: response.created and response.in_progress; the output message's
response.output_item.added and response.content_part.added (with the first token); a
response.output_text.delta per token; then response.output_text.done, response.content_part.done
and response.output_item.done. A turn paused for approval then adds each call it waits on as a
function_call item (response.output_item.added, response.function_call_arguments.delta and .done,
response.output_item.done), and leaves the message out when it said nothing. Last comes
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
from agent.server.errors import ApiError, still_running
from agent.server.responses_objects import (
    ResponseShape,
    Status,
    failure,
    function_call_item,
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
    ]
    # The message is announced with its first token: a turn that pauses for approval before it
    # says anything answers with its function_call items alone, as OpenAI does.
    def opening() -> list[bytes]:
        return [
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
            problem = still_running(timeout_s, "the same Idempotency-Key")
            continue
        if kind == "token":
            if not streamed:
                pending += opening()
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
    text = outcome.reply
    has_message = bool(streamed or text or not outcome.pending)
    if not streamed and has_message:
        pending += opening()
    if not shown and text:
        # a replayed or continued answer: it arrives whole
        pending.append(event("response.output_text.delta", **ids, delta=text, logprobs=[]))
    elif " ".join(shown.split()) != " ".join(text.split()):
        log.warning("thread %s: streamed text differs from the committed reply", outcome.thread_id)
    status = response_status(outcome)
    final = response_object(shape, status=status, text=text if has_message else None, usage=outcome.usage,
                            rein=outcome.metadata(), calls=outcome.pending)
    if has_message:
        pending += [
            event("response.output_text.done", **ids, text=text, logprobs=[]),
            event("response.content_part.done", **ids, part=output_text(text)),
            event("response.output_item.done", output_index=0, item=final["output"][0]),
        ]
    for index, call in enumerate(outcome.pending, start=int(has_message)):
        item = final["output"][index]
        where = {"item_id": item["id"], "output_index": index}
        pending += [
            event("response.output_item.added", output_index=index, item=function_call_item(shape, call, arguments="")),
            event("response.function_call_arguments.delta", **where, delta=call.arguments),
            event("response.function_call_arguments.done", **where, arguments=call.arguments),
            event("response.output_item.done", output_index=index, item=item),
        ]
    pending.append(event(f"response.{status}", response=final))
    yield b"".join(pending)

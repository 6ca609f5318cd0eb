"""Response objects of the Responses API: the `response` itself, its output message, the
`function_call` items of calls awaiting approval, and usage."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from agent.messages import Usage
from agent.server.approvals import PendingCall
from agent.server.responses_ids import ResponseRef

Status = Literal["in_progress", "completed", "failed", "incomplete"]
ItemStatus = Literal["in_progress", "completed", "incomplete"]


@dataclass
class ResponseShape:
    """What a response object says besides its answer, fixed when its request arrives."""

    ref: ResponseRef
    """Its agent, thread and nonce (and so its id and its message's id)."""
    created_at: int = field(default_factory=lambda: int(time.time()))
    """Unix seconds when the request arrived (or, retrieved, when its turn was first asked)."""
    instructions: str | None = None
    """The request's instructions, echoed back."""
    metadata: dict[str, str] = field(default_factory=dict)
    """The request's metadata, echoed back."""
    previous_response_id: str | None = None
    """The response this one continues."""
    conversation: str | None = None
    """The conversation it belongs to, when the request named one."""
    store: bool = True
    """Whether it can be retrieved and continued by its id."""


def response_object(
    shape: ResponseShape, *, status: Status, text: str | None, usage: Usage | None = None,
    rein: dict[str, Any] | None = None, error: dict[str, Any] | None = None, calls: Sequence[PendingCall] = (),
) -> dict[str, Any]:
    """A `response` object; its output is an assistant message when `text` is not None, then a
    `function_call` item for each call the turn paused on."""
    item_status: ItemStatus = "in_progress" if status == "failed" else status
    output = [] if text is None else [message_item(shape, text, item_status)]
    output += [function_call_item(shape, c) for c in calls]
    obj: dict[str, Any] = {
        "id": shape.ref.response_id,
        "object": "response",
        "created_at": shape.created_at,
        "status": status,
        "completed_at": int(time.time()) if status == "completed" else None,
        "error": error,
        "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
        "instructions": shape.instructions,
        "metadata": shape.metadata,
        "model": shape.ref.agent,
        "output": output,
        "parallel_tool_calls": False,
        "previous_response_id": shape.previous_response_id,
        "conversation": {"id": shape.conversation} if shape.conversation else None,
        "store": shape.store,
        "temperature": None,
        "top_p": None,
        "text": {"format": {"type": "text"}},
        "tool_choice": "none",
        "tools": [],
        "truncation": "disabled",
        "usage": responses_usage(usage) if usage is not None else None,
    }
    if rein is not None:
        obj["rein"] = rein
    return obj


def message_item(shape: ResponseShape, text: str, status: ItemStatus) -> dict[str, Any]:
    """The response's output message (an in-progress one holds its text so far, if any)."""
    content = [output_text(text)] if status != "in_progress" or text else []
    return {"type": "message", "id": shape.ref.message_id, "role": "assistant", "status": status, "content": content}


def function_call_item(shape: ResponseShape, call: PendingCall, arguments: str | None = None) -> dict[str, Any]:
    """A call awaiting approval as the `function_call` item OpenAI answers when its model asks for a
    client's tool (`arguments` given: the item as first announced in a stream, still in progress)."""
    digest = hashlib.sha256(f"{shape.ref.response_id}\0{call.id}".encode()).hexdigest()[:24]
    return {
        "type": "function_call", "id": "fc_" + digest, "call_id": call.id, "name": call.name,
        "arguments": call.arguments if arguments is None else arguments,
        "status": "completed" if arguments is None else "in_progress",
    }


def output_text(text: str) -> dict[str, Any]:
    """An `output_text` content part."""
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def responses_usage(usage: Usage) -> dict[str, Any]:
    """Usage in the Responses API's field names (the whole turn's tokens)."""
    return {
        "input_tokens": usage.input_tokens,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": usage.output_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": usage.total_tokens,
    }


def failure(message: str, code: str = "server_error") -> dict[str, Any]:
    """The `error` of a failed response."""
    return {"code": code, "message": message}

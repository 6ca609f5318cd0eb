"""The Responses API request: validation and its `input` items as rein's surface turns.

`input` is a string (one user message) or a list of items. Message items (`role` user, assistant,
system or developer, with text or `input_text` / `output_text` / `input_image` parts) are the
conversation, as in Chat Completions; system and developer text, like `instructions`, only enters
the derived thread key (the agent has its own system prompt). `item_reference` items name an
earlier response's output message and are resolved against its thread. `function_call_output`
items that end the input are decisions on the calls a paused turn waits on (docs/server.md, "The
Responses API"); other tool traffic (`function_call`, earlier outputs) and `reasoning` items stay
out of the thread.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from agent.messages import PART_SEPARATOR
from agent.server.approvals import Decision, parse_decision
from agent.server.errors import bad_request
from agent.server.schema import MAX_MESSAGES, load_body, validated

SKIPPED_ITEMS = frozenset({"function_call", "function_call_output", "reasoning"})
"""Input items that are client-side tool traffic or model reasoning: kept out of the thread."""
_TEXT_PARTS = frozenset({"input_text", "output_text", "text"})


class InputItem(BaseModel):
    """One item of a list `input`."""

    model_config = ConfigDict(extra="allow")
    type: str = "message"
    """message (the default, for `{role, content}` items), item_reference, or tool traffic."""
    role: Literal["user", "assistant", "system", "developer"] | None = None
    """For a message: who said it."""
    content: str | list[dict[str, Any]] | None = None
    """For a message: text, or content parts."""
    id: str | None = None
    """For an item_reference: the id of the item it names."""
    call_id: str | None = None
    """For a function_call_output: the call it answers."""
    output: str | list[dict[str, Any]] | None = None
    """For a function_call_output: its text (a decision, when it answers a paused call)."""

    @model_validator(mode="after")
    def _complete(self) -> InputItem:
        if self.type == "message" and (self.role is None or self.content is None):
            raise ValueError("a message item needs a `role` and `content`")
        if self.type == "item_reference" and not self.id:
            raise ValueError("an item_reference needs an `id`")
        if self.type == "function_call_output" and (not self.call_id or self.output is None):
            raise ValueError("a function_call_output needs a `call_id` and an `output`")
        if self.type not in SKIPPED_ITEMS | {"message", "item_reference"}:
            raise ValueError(f"input items of type {self.type!r} are not supported")
        return self


class ResponsesRequest(BaseModel):
    """A `POST /v1/responses` request. Sampling and output settings (temperature,
    max_output_tokens, reasoning, …) are accepted and ignored: the agent's own settings apply."""

    model_config = ConfigDict(extra="allow")
    model: str = Field(min_length=1)
    """The served agent's name."""
    input: str | list[InputItem]
    """A user message, or a list of input items ending with a user message."""
    instructions: str | None = None
    """System text: echoed back and part of the derived thread key, never sent to the agent."""
    previous_response_id: str | None = None
    """Continue the thread of this response, from that response on."""
    conversation: str | dict[str, Any] | None = None
    """A conversation id (or `{"id": …}`): the thread key, like the X-Rein-Thread header."""
    store: bool = True
    """Whether the response can be retrieved and continued by its id later."""
    stream: bool = False
    """Answer as server-sent events of the Responses types."""
    metadata: dict[str, str] | None = None
    """Up to 16 key-value pairs echoed back on the response."""
    user: str | None = None
    """End-user id; keys the thread when no conversation, header or previous response names one."""
    tools: list[dict[str, Any]] | None = None
    """Client-side tools: rejected when non-empty (the agent's own tools run on the server)."""
    background: bool | None = None
    """Background mode: not supported."""

    @model_validator(mode="after")
    def _supported(self) -> ResponsesRequest:
        if self.tools:
            raise ValueError(
                "client-side tools are not supported: the agent's own tools run on the server; remove `tools` from the request"
            )
        if self.background:
            raise ValueError("background responses are not supported")
        if self.conversation is not None and self.previous_response_id is not None:
            raise ValueError("send `conversation` or `previous_response_id`, not both")
        if self.metadata is not None and len(self.metadata) > 16:
            raise ValueError("metadata holds at most 16 pairs")
        return self

    @property
    def conversation_id(self) -> str | None:
        """The conversation's id, from either form."""
        if isinstance(self.conversation, dict):
            value = self.conversation.get("id")
            if not isinstance(value, str):
                raise bad_request("conversation.id must be a string", param="conversation")
            return value
        return self.conversation


@dataclass(frozen=True)
class Entry:
    """One input item as the thread sees it."""

    role: Literal["user", "assistant", "system", "reference"]
    """user and assistant messages, system text, or a reference to an earlier output message."""
    content: str | list[dict[str, Any]]
    """Text, or (user) chat-format content parts with images; for a reference, the item id."""

    @property
    def text(self) -> str:
        """The text, with text parts joined."""
        if isinstance(self.content, str):
            return self.content
        return PART_SEPARATOR.join(p.get("text", "") for p in self.content if p.get("type") == "text")


def parse_responses_request(body: bytes, *, max_messages: int = MAX_MESSAGES) -> ResponsesRequest:
    """Validate a request body; raise a 400 ApiError naming the first problems."""
    data = load_body(body, max_messages, "input", "input items", "a JSON Responses request")
    return validated(ResponsesRequest, data)


def input_decisions(request: ResponsesRequest) -> list[Decision] | None:
    """The decisions of the function_call_output items that end the input (after its last message),
    answering calls awaiting approval; None when there are none."""
    if isinstance(request.input, str):
        return None
    answers: list[InputItem] = []
    for item in reversed(request.input):
        if item.type in ("message", "item_reference"):
            break
        if item.type == "function_call_output":
            answers.insert(0, item)
    if not answers:
        return None
    return [parse_decision(a.call_id or "", _output_text(a.output or "")) for a in answers]


def _output_text(output: str | list[dict[str, Any]]) -> str:
    """A function_call_output's text (its text parts joined, when it has parts)."""
    if isinstance(output, str):
        return output
    return "".join(p.get("text", "") for p in output if p.get("type") in _TEXT_PARTS)


def input_entries(request: ResponsesRequest, *, decisions: bool = False) -> list[Entry]:
    """The request's input as entries (instructions first, as system text); 400 when it does not
    end with a user message (or, with `decisions`, with them) or holds parts rein cannot take."""
    entries = [Entry("system", request.instructions)] if request.instructions else []
    if isinstance(request.input, str):
        entries.append(Entry("user", request.input))
    else:
        for n, item in enumerate(request.input):
            if item.type == "item_reference":
                entries.append(Entry("reference", item.id or ""))
            elif item.type == "message" and item.role is not None and item.content is not None:
                role: Literal["user", "assistant", "system"] = (
                    "system" if item.role in ("system", "developer") else "user" if item.role == "user" else "assistant"
                )
                entries.append(Entry(role, _content(item.content, f"input.{n}.content", images=role == "user")))
    last = next((e for e in reversed(entries) if e.role != "system"), None)
    if not decisions and (last is None or last.role != "user"):
        raise bad_request(
            "the input must end with a user message (or with function_call_output items answering the calls "
            "a paused response waits on)", param="input",
        )
    return entries


def _content(content: str | list[dict[str, Any]], where: str, *, images: bool) -> str | list[dict[str, Any]]:
    """Chat-format content (as `Message.content` holds it) from Responses content parts."""
    if isinstance(content, str):
        return content
    parts: list[dict[str, Any]] = []
    for n, part in enumerate(content):
        kind = part.get("type")
        if kind in _TEXT_PARTS and isinstance(part.get("text"), str):
            parts.append({"type": "text", "text": part["text"]})
        elif kind == "refusal":
            continue
        elif kind == "input_image" and images and isinstance(part.get("image_url"), str):
            image: dict[str, Any] = {"url": part["image_url"]}
            if part.get("detail") in ("auto", "low", "high"):
                image["detail"] = part["detail"]
            parts.append({"type": "image_url", "image_url": image})
        else:
            raise bad_request(
                f"{where}.{n}: content parts of type {kind!r} are not supported here (send input_text, "
                "output_text, or input_image with an image_url)",
                param=f"{where}.{n}",
            )
    if all(p["type"] == "text" for p in parts):
        return "".join(p["text"] for p in parts)
    return parts

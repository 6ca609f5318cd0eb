"""The Chat Completions wire format: request validation and response objects."""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Sequence
from typing import Annotated, Any, Literal, TypeVar, overload

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from agent.messages import PART_SEPARATOR, Message, Usage
from agent.server.approvals import Decision, PendingCall, parse_decision
from agent.server.errors import bad_request
from agent.server.threads import Role, Turn, merge_turns

M = TypeVar("M", bound=BaseModel)

MAX_JSON_DEPTH = 64
"""Deepest nesting of arrays and objects accepted in a request body (a chat request needs about 6)."""
_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
"""A JSON string: dropped before the brackets are counted, so brackets inside strings do not count."""
MAX_MESSAGES = 2048
"""Most messages one request may carry (`ServerConfig.max_messages`, `rein serve --max-messages`)."""
CONTAINERS_PER_MESSAGE = 8
"""Arrays and objects a request may hold per message it may carry (a message with text and image
parts needs about four)."""
_SURROGATE_HINT = re.compile(rb"\\u[dD][89a-fA-F]|\xed[\xa0-\xbf]")
"""A surrogate escape, or a surrogate's UTF-8-like bytes: only then is the parsed body searched."""
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_AS_SQUARE = bytes.maketrans(b"{}", b"[]")


class TextPart(BaseModel):
    """A text content part."""

    model_config = ConfigDict(extra="allow")
    type: Literal["text"]
    """Always "text"."""
    text: str
    """The text."""


class ImageUrl(BaseModel):
    """Where an image is (an https or data: URL)."""

    model_config = ConfigDict(extra="allow")
    url: str
    """The URL."""
    detail: Literal["auto", "low", "high"] | None = None
    """Resolution hint."""


class ImagePart(BaseModel):
    """An image content part."""

    model_config = ConfigDict(extra="allow")
    type: Literal["image_url"]
    """Always "image_url"."""
    image_url: ImageUrl
    """The image."""


class RefusalPart(BaseModel):
    """A refusal content part of an assistant message."""

    model_config = ConfigDict(extra="allow")
    type: Literal["refusal"]
    """Always "refusal"."""
    refusal: str
    """The refusal text."""


ContentPart = Annotated[TextPart | ImagePart | RefusalPart, Field(discriminator="type")]


class ChatMessageIn(BaseModel):
    """One message of a request, in OpenAI's roles."""

    model_config = ConfigDict(extra="allow")
    role: Literal["system", "developer", "user", "assistant", "tool"]
    """system, developer, user, assistant or tool."""
    content: str | list[ContentPart] | None = None
    """Text or content parts; may be null only on an assistant message with tool calls."""
    name: str | None = None
    """Optional participant name."""
    tool_calls: list[dict[str, Any]] | None = None
    """Tool calls of an assistant message: the server's own calls that paused for approval, sent
    back with the history (the thread holds them already), or a client's (kept out of the thread)."""
    tool_call_id: str | None = None
    """For a tool message: the call it answers (at the end of a request, a decision on a paused call)."""

    @model_validator(mode="after")
    def _content_present(self) -> ChatMessageIn:
        if self.content is None and not (self.role == "assistant" and self.tool_calls):
            raise ValueError(f"a {self.role} message needs content")
        return self

    @property
    def text(self) -> str:
        """The text, with text parts joined."""
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return PART_SEPARATOR.join(p.text for p in self.content if isinstance(p, TextPart))


class StreamOptions(BaseModel):
    """Streaming options."""

    model_config = ConfigDict(extra="allow")
    include_usage: bool = False
    """Send a last chunk with the usage (and empty choices) before [DONE]."""


class ChatRequest(BaseModel):
    """A chat completion request. Sampling parameters (temperature, max_tokens, …) are accepted
    and ignored: the served agent's own settings apply."""

    model_config = ConfigDict(extra="allow")
    model: str = Field(min_length=1)
    """The served agent's name."""
    messages: list[ChatMessageIn] = Field(min_length=1)
    """The conversation; it ends with a user message, or with tool messages that decide calls
    awaiting approval."""
    stream: bool = False
    """Answer as server-sent events."""
    stream_options: StreamOptions | None = None
    """Streaming options."""
    user: str | None = None
    """End-user or conversation id; keys the thread when no thread header is sent."""
    n: int | None = None
    """Number of choices; only 1 is supported."""
    tools: list[dict[str, Any]] | None = None
    """Client-side tools: rejected when non-empty (the agent's own tools run on the server)."""
    functions: list[dict[str, Any]] | None = None
    """Legacy client-side functions: rejected when non-empty."""
    response_format: dict[str, Any] | None = None
    """Only `{"type": "text"}`: the served agent writes its answer its own way, so a JSON mode or
    schema it would not follow is refused rather than ignored."""

    @field_validator("response_format")
    @classmethod
    def _text_only(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is not None and value.get("type", "text") != "text":
            raise ValueError(
                f"response_format {value.get('type')!r} is not supported: the served agent answers in "
                "text and does not follow a JSON mode or schema; send {\"type\": \"text\"} or leave it out"
            )
        return value

    @model_validator(mode="after")
    def _supported(self) -> ChatRequest:
        if self.messages[-1].role not in ("user", "tool"):
            raise ValueError(
                f"the last message must come from the user (or be tool messages answering calls awaiting "
                f"approval), not {self.messages[-1].role!r}"
            )
        if any(m.role == "tool" and not m.tool_call_id for m in trailing_tool_messages(self.messages)):
            raise ValueError("a tool message answering a call awaiting approval needs its tool_call_id")
        if self.n not in (None, 1):
            raise ValueError("only n=1 is supported")
        if self.tools or self.functions:
            raise ValueError(
                "client-side tools are not supported: the agent's own tools run on the server; "
                "remove `tools` (and `functions`) from the request"
            )
        return self

    @property
    def decisions(self) -> list[Decision] | None:
        """The decisions of the tool messages that end the request, answering calls awaiting
        approval; None when it ends with a user message."""
        answers = trailing_tool_messages(self.messages)
        return [parse_decision(m.tool_call_id or "", m.text) for m in answers] if answers else None

    @property
    def include_usage(self) -> bool:
        """Whether a streamed answer ends with a usage chunk."""
        return bool(self.stream_options and self.stream_options.include_usage)


def trailing_tool_messages(messages: list[ChatMessageIn]) -> list[ChatMessageIn]:
    """The tool messages that end a conversation (the client's answers to the last tool calls)."""
    start = len(messages)
    while start > 0 and messages[start - 1].role == "tool":
        start -= 1
    return messages[start:]


def parse_request(body: bytes, *, max_messages: int = MAX_MESSAGES) -> ChatRequest:
    """Validate a request body; raise a 400 ApiError naming the first problems."""
    data = load_body(body, max_messages, "messages", "messages", "a JSON chat completion request")
    return validated(ChatRequest, data)


def load_body(body: bytes, max_items: int, field: str, noun: str, what: str) -> dict[str, Any]:
    """A request body parsed as a JSON object within the server's budget: at most `max_items` in
    its `field` list, and CONTAINERS_PER_MESSAGE arrays and objects for each (a 400 ApiError
    otherwise, before or after parsing). `noun` names the items, `what` the expected request."""
    if not body.strip():
        raise bad_request(f"the request body is empty: send {what}")
    containers = check_depth(body)
    if containers > CONTAINERS_PER_MESSAGE * max_items:
        raise bad_request(
            f"the request body holds {containers} arrays and objects ({noun}, content parts, other "
            f"values); this server accepts {CONTAINERS_PER_MESSAGE} for each of the {max_items} "
            f"{noun} a request may carry"
        )
    try:
        data = json.loads(body)
    except (ValueError, RecursionError) as exc:
        # ValueError covers JSONDecodeError, bad UTF-8 and integers past Python's 4,300 digits.
        raise bad_request(f"the request body is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise bad_request("the request body must be a JSON object")
    check_unicode(body, data)
    items = data.get(field)
    if isinstance(items, list) and len(items) > max_items:
        raise bad_request(
            f"the request has {len(items)} {noun}; this server accepts at most {max_items} in one request",
            param=field,
        )
    return data


def validated(model: type[M], data: dict[str, Any]) -> M:
    """`data` as a `model`, or a 400 ApiError naming its first five problems."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
        shown = []
        for e in errors[:5]:
            loc = ".".join(str(p) for p in e["loc"])
            shown.append(f"{loc}: {e['msg']}" if loc else e["msg"])
        more = f" (and {len(errors) - 5} more)" if len(errors) > 5 else ""
        first_loc = ".".join(str(p) for p in errors[0]["loc"]) or None
        raise bad_request("invalid request: " + "; ".join(shown) + more, param=first_loc) from None


def check_depth(body: bytes, limit: int = MAX_JSON_DEPTH) -> int:
    """The number of arrays and objects in the body; a 400 ApiError when it nests them deeper
    than `limit`.

    Checked before parsing: the json module recurses once a level, so a body nested thousands of
    levels deep would end in a RecursionError wherever it is next walked. Strings are dropped and
    only the brackets kept; each pass then removes the innermost pairs (`bytes.replace` does not
    rescan what it produced, so one pass removes exactly one level), all in C, so a 4 MiB body is
    checked in milliseconds. Unbalanced brackets are otherwise left for the JSON parser to report.

    The count is returned because arrays and objects are what parsing and validation spend their
    time on (about 4 µs each, on the event loop and under the GIL, so a worker thread would not
    help): a 4 MiB body of a million empty ones held every other request for a second.
    """
    brackets = _JSON_STRING.sub(b"", body).translate(_AS_SQUARE, _NOT_BRACKETS)
    containers = brackets.count(b"[")
    for _ in range(limit):
        reduced = brackets.replace(b"[]", b"")
        if len(reduced) == len(brackets):
            break
        brackets = reduced
    # What is left holds no `[]`, so its opening brackets are never closed and each nests in the
    # one before: the parser would recurse once for each before it found the body unbalanced.
    if b"[]" in brackets or brackets.count(b"[") > limit:
        raise bad_request(f"the request body nests arrays and objects more than {limit} levels deep")
    return containers


def check_unicode(body: bytes, data: Any) -> None:
    """A 400 ApiError when the parsed body holds a lone surrogate (`\\ud800` unpaired): no
    response or thread could hold such text, since it has no UTF-8 form."""
    utf8 = json.detect_encoding(body) in ("utf-8", "utf-8-sig")
    if utf8 and not _SURROGATE_HINT.search(body):
        return
    try:
        json.dumps(data, ensure_ascii=False).encode()
    except UnicodeEncodeError as exc:
        bad = exc.object[exc.start : exc.end].encode("unicode_escape").decode()
        raise bad_request(f"the request holds a lone surrogate ({bad}): text must be valid Unicode") from None


class CommitMessages(Sequence[Message]):
    """The messages that commit a request's turns, each built when first read: a client that
    resends its whole history needs them only for the turns its thread does not hold yet."""

    def __init__(self, sources: list[ChatMessageIn | str]) -> None:
        self._sources = sources  # a user turn's message, or an assistant turn's merged text
        self._built: dict[int, Message] = {}

    def __len__(self) -> int:
        return len(self._sources)

    @overload
    def __getitem__(self, index: int) -> Message: ...
    @overload
    def __getitem__(self, index: slice) -> list[Message]: ...
    def __getitem__(self, index: int | slice) -> Message | list[Message]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        i = range(len(self))[index]
        if i not in self._built:
            source = self._sources[i]
            self._built[i] = Message.assistant(source) if isinstance(source, str) else Message.user(_content(source))
        return self._built[i]


def client_history(request: ChatRequest) -> tuple[list[Turn], CommitMessages, list[str]]:
    """The request's surface turns, the messages that commit them, and its system texts.

    System and developer messages, tool messages and tool calls stay out of the thread: the agent
    has its own system prompt and runs its own tools (tool messages that end a request are decisions
    on paused calls, read by `ChatRequest.decisions`). User messages keep their image parts.
    """
    pairs: list[tuple[Role, str]] = []
    users: list[ChatMessageIn] = []
    system: list[str] = []
    for m in request.messages:
        role, text = m.role, m.text
        if role in ("system", "developer"):
            system.append(text)
        elif role == "user":
            pairs.append(("user", text))
            users.append(m)
        elif role == "assistant" and text.strip():
            pairs.append(("assistant", text))
    turns = merge_turns(pairs)
    user_iter = iter(users)
    sources: list[ChatMessageIn | str] = [next(user_iter) if t.role == "user" else t.text for t in turns]
    return turns, CommitMessages(sources), system


def _content(m: ChatMessageIn) -> str | list[dict[str, Any]]:
    if m.content is None or isinstance(m.content, str):
        return m.content or ""
    parts = [p.model_dump(exclude_none=True) for p in m.content if not isinstance(p, RefusalPart)]
    if all(p["type"] == "text" for p in parts):
        return PART_SEPARATOR.join(p["text"] for p in parts)
    return parts


# --- responses -------------------------------------------------------------------------------


def new_completion_id() -> str:
    """A fresh completion id."""
    return f"chatcmpl-{uuid.uuid4().hex}"


def openai_usage(usage: Usage) -> dict[str, int]:
    """Usage in OpenAI's field names."""
    return {
        "prompt_tokens": usage.input_tokens,
        "completion_tokens": usage.output_tokens,
        "total_tokens": usage.total_tokens,
    }


def completion_object(
    *, id: str, model: str, content: str, finish_reason: str, usage: Usage, rein: dict[str, Any],
    reasoning: str | None = None, pending: Sequence[PendingCall] = (),
) -> dict[str, Any]:
    """A `chat.completion` object with rein's metadata in a `rein` field; a turn paused on `pending`
    calls shows them as the message's `tool_calls` (its content null when it said nothing yet)."""
    message: dict[str, Any] = {"role": "assistant", "content": content or (None if pending else ""), "refusal": None}
    if reasoning:
        message["reasoning_content"] = reasoning
    if pending:
        message["tool_calls"] = [c.as_tool_call() for c in pending]
    return {
        "id": id,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason, "logprobs": None}],
        "usage": openai_usage(usage),
        "rein": rein,
    }


def tool_call_deltas(pending: Sequence[PendingCall]) -> list[dict[str, Any]]:
    """Paused calls as a stream chunk's `delta.tool_calls`: each whole, with its index."""
    return [{"index": i, **c.as_tool_call()} for i, c in enumerate(pending)]


def chunk_object(
    *, id: str, model: str, created: int, delta: dict[str, Any] | None = None,
    finish_reason: str | None = None, usage: Usage | None = None, rein: dict[str, Any] | None = None,
    with_usage_field: bool = False, no_choices: bool = False,
) -> dict[str, Any]:
    """A `chat.completion.chunk` object."""
    chunk: dict[str, Any] = {
        "id": id,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": [] if no_choices else [
            {"index": 0, "delta": delta or {}, "finish_reason": finish_reason, "logprobs": None}
        ],
    }
    if with_usage_field:
        chunk["usage"] = openai_usage(usage) if usage is not None else None
    if rein is not None:
        chunk["rein"] = rein
    return chunk

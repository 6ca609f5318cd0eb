"""Translation between rein's messages and the OpenAI Chat Completions wire format.

Pure functions and small accumulators, no I/O, so every mapping can be checked on plain data.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from agent.messages import FinishReason, Message, ModelResponse, ToolCall, Usage, new_call_id
from agent.models.toolcall_parse import parse_tagged_calls, parse_turn

_FINISH: dict[str, FinishReason] = {
    "stop": "stop",
    "eos": "stop",
    "end_turn": "stop",
    "tool_calls": "tool_calls",
    "function_call": "tool_calls",
    "length": "length",
    "max_tokens": "length",
    "content_filter": "content_filter",
}
_REASONING_FIELDS = ("reasoning_content", "reasoning")


def to_openai_messages(messages: list[Message], *, send_reasoning: bool) -> list[dict[str, Any]]:
    """OpenAI chat messages for our history; metadata never leaves rein.

    Reasoning stays in our history either way; it is sent back as `reasoning_content` only when
    send_reasoning is set, because some servers reject the field and others require its absence.
    """
    out: list[dict[str, Any]] = []
    # Chat Completions takes only text in tool messages: pictures a tool returned follow the
    # run of tool messages as one user message, so every tool call is still answered first.
    pictures: list[dict[str, Any]] = []
    for m in messages:
        if pictures and m.role != "tool":
            out.append({"role": "user", "content": pictures})
            pictures = []
        if m.role == "assistant":
            # An empty string rather than null: some servers (llama-cpp-python's) reject null.
            msg: dict[str, Any] = {"role": "assistant", "content": m.content or ""}
            if m.tool_calls:
                msg["tool_calls"] = [
                    {
                        "id": tc.id,
                        "type": "function",
                        "function": {"name": tc.name, "arguments": tc.arguments or "{}"},
                    }
                    for tc in m.tool_calls
                ]
            if send_reasoning and m.reasoning:
                msg["reasoning_content"] = m.reasoning
            out.append(msg)
        elif m.role == "tool":
            content = m.content
            if not isinstance(content, str):
                pictures.extend(p for p in content if p.get("type") != "text")
                content = m.text
            out.append({"role": "tool", "tool_call_id": m.tool_call_id or "", "content": content})
        else:
            out.append({"role": m.role, "content": m.content})
    if pictures:
        out.append({"role": "user", "content": pictures})
    return out


def finish_reason(raw: str | None, has_tool_calls: bool) -> FinishReason:
    """Our finish reason for a server's; tool calls win, because some servers say "stop"."""
    if has_tool_calls:
        return "tool_calls"
    return _FINISH.get(raw or "stop", "stop")


def reasoning_of(obj: Any) -> str | None:
    """The reasoning text of a response message or delta, under either field name servers use."""
    for name in _REASONING_FIELDS:
        value = getattr(obj, name, None)
        if value is None and getattr(obj, "model_extra", None):
            value = obj.model_extra.get(name)
        if isinstance(value, str) and value:
            return value
    return None


def usage_of(raw: Any) -> Usage:
    """Our usage for a server's usage object (missing counts are zero)."""
    if raw is None:
        return Usage(requests=1)
    return Usage(
        input_tokens=int(getattr(raw, "prompt_tokens", 0) or 0),
        output_tokens=int(getattr(raw, "completion_tokens", 0) or 0),
        requests=1,
    )


def split_think(text: str) -> tuple[str, str | None]:
    """Separate a leading `<think>...</think>` block, which some servers leave in the content."""
    stripped = text.lstrip()
    if not stripped.startswith("<think>"):
        return text, None
    body = stripped[len("<think>") :]
    thought, sep, rest = body.partition("</think>")
    if not sep:  # cut off while thinking: all of it was reasoning
        return "", thought.strip() or None
    return rest.lstrip(), thought.strip() or None


def text_tool_calls(text: str, tool_names: list[str]) -> tuple[str, list[ToolCall]]:
    """Tool calls a server left in the text (no tool parser configured), naming offered tools.

    Recognised: `<tool_call>` blocks, and content that is nothing but a JSON call such as
    `{"name": "get_weather", "arguments": {...}}`. Anything else stays text.
    """
    if not tool_names:
        return text, []
    parsed = parse_tagged_calls(text)
    if parsed is None:
        turn = parse_turn(text, tool_names)
        if not turn.tool_calls or turn.text:
            return text, []
        parsed = turn
    if any(c.name not in tool_names for c in parsed.tool_calls):
        return text, []
    return parsed.text, parsed.tool_calls


def looks_like_text_call(head: str) -> bool | None:
    """Whether streamed content that starts with head may be a tool call written as text.

    None while too little has arrived to tell.
    """
    stripped = head.lstrip()
    if not stripped:
        return None
    for opener in ("<tool_call>", "```", "{", "["):
        if stripped.startswith(opener):
            return True
        if opener.startswith(stripped):
            return None
    return False


def response_from_completion(
    completion: Any, *, model: str, tool_names: list[str], parse_text_calls: bool
) -> ModelResponse:
    """Our response for a (non-streamed) ChatCompletion object."""
    if not getattr(completion, "choices", None):
        raise ValueError("the server returned no choices")
    choice = completion.choices[0]
    message = choice.message
    text, reasoning = split_think(message.content or "")
    reasoning = reasoning_of(message) or reasoning
    calls = [
        ToolCall(id=tc.id or new_call_id(), name=tc.function.name, arguments=tc.function.arguments or "{}")
        for tc in (message.tool_calls or [])
        if getattr(tc, "function", None) is not None
    ]
    if not calls and parse_text_calls:
        text, calls = text_tool_calls(text, tool_names)
    return ModelResponse(
        text=text,
        reasoning=reasoning,
        tool_calls=calls,
        usage=usage_of(getattr(completion, "usage", None)),
        finish_reason=finish_reason(choice.finish_reason, bool(calls)),
        model=getattr(completion, "model", None) or model,
    )


class ThinkStreamSplitter:
    """Routes a streamed leading `<think>...</think>` block to reasoning, the rest to text."""

    _OPEN, _CLOSE = "<think>", "</think>"

    def __init__(self) -> None:
        self._buf = ""
        self._state = "start"  # start → thinking → text, or start → text

    def feed(self, chunk: str) -> tuple[str, str]:
        """Add content; return (new reasoning, new text)."""
        self._buf += chunk
        if self._state == "start":
            head = self._buf.lstrip()
            if not head or (len(head) < len(self._OPEN) and self._OPEN.startswith(head)):
                return "", ""
            if head.startswith(self._OPEN):
                self._state, self._buf = "thinking", head[len(self._OPEN) :]
            else:
                self._state = "text"
        if self._state == "thinking":
            end = self._buf.find(self._CLOSE)
            if end < 0:
                # Hold back a possible partial closing tag.
                keep = next(
                    (k for k in range(len(self._CLOSE) - 1, 0, -1) if self._buf.endswith(self._CLOSE[:k])),
                    0,
                )
                out, self._buf = self._buf[: len(self._buf) - keep], self._buf[len(self._buf) - keep :]
                return out, ""
            thought, rest = self._buf[:end], self._buf[end + len(self._CLOSE) :].lstrip()
            self._state, self._buf = "text", ""
            return thought, rest
        out, self._buf = self._buf, ""
        return "", out

    def flush(self) -> tuple[str, str]:
        """Whatever is held back, at the end of the stream."""
        out, self._buf = self._buf, ""
        if self._state == "thinking":
            return out, ""
        return "", out


class TextCallGate:
    """Holds back streamed text that may turn out to be a tool call written as text.

    Text that starts like prose passes through at once; text that starts like JSON or a
    `<tool_call>` block is held until the end, when the final parse decides what it was.
    """

    def __init__(self, active: bool) -> None:
        self._state = "undecided" if active else "pass"
        self._held: list[str] = []

    def feed(self, text: str) -> str:
        """Text to emit now (empty while holding)."""
        if self._state == "pass":
            return text
        self._held.append(text)
        if self._state == "undecided":
            verdict = looks_like_text_call("".join(self._held))
            if verdict is False:
                self._state = "pass"
                out, self._held = "".join(self._held), []
                return out
            if verdict:
                self._state = "hold"
        return ""

    def release(self, became_calls: bool) -> str:
        """At the end: the held text, unless it was parsed into tool calls."""
        out, self._held = "".join(self._held), []
        return "" if became_calls else out


@dataclass
class _PartialCall:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


@dataclass
class StreamAccumulator:
    """Collects streamed chunks into one response: text, reasoning, tool calls by index, usage."""

    text: list[str] = field(default_factory=list)
    """Text pieces, in order."""
    reasoning: list[str] = field(default_factory=list)
    """Reasoning pieces, in order."""
    calls: dict[int, _PartialCall] = field(default_factory=dict)
    """Tool calls being assembled, by the index the server gives."""
    finish: str | None = None
    """The server's last finish reason."""
    usage: Usage | None = None
    """Usage, from the final usage chunk when the server sends one."""
    model: str = ""
    """Model name the server reported."""

    def add_tool_deltas(self, deltas: Any) -> None:
        """Merge streamed tool-call fragments: the first names the call, later ones extend arguments."""
        for delta in deltas or []:
            index = getattr(delta, "index", None)
            if index is None:  # servers that omit the index: a new id starts a new call
                new_id = delta.id and all(c.id != delta.id for c in self.calls.values())
                index = len(self.calls) if new_id or not self.calls else max(self.calls)
            call = self.calls.setdefault(index, _PartialCall())
            if getattr(delta, "id", None):
                call.id = delta.id
            fn = getattr(delta, "function", None)
            if fn is not None:
                if fn.name:
                    call.name = fn.name if not call.name or call.name == fn.name else call.name + fn.name
                if fn.arguments:
                    call.arguments.append(fn.arguments)

    def response(self, *, model: str, tool_names: list[str], parse_text_calls: bool) -> ModelResponse:
        """The final response."""
        text = "".join(self.text)
        calls = [
            ToolCall(id=c.id or new_call_id(), name=c.name, arguments="".join(c.arguments) or "{}")
            for _, c in sorted(self.calls.items())
            if c.name
        ]
        if not calls and parse_text_calls:
            text, calls = text_tool_calls(text, tool_names)
        return ModelResponse(
            text=text,
            reasoning="".join(self.reasoning) or None,
            tool_calls=calls,
            usage=self.usage or Usage(requests=1),
            finish_reason=finish_reason(self.finish, bool(calls)),
            model=self.model or model,
        )


def error_detail(body: Any, fallback: str) -> str:
    """The server's own error message from an error body, else fallback."""
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict) and isinstance(err.get("message"), str):
            return err["message"]
        if isinstance(err, str):
            return err
        if isinstance(body.get("detail"), str | list):
            detail = body["detail"]
            return detail if isinstance(detail, str) else json.dumps(detail)[:500]
    if isinstance(body, str) and body.strip():
        return body.strip()[:500]
    return fallback

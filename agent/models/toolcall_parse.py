"""Lenient parsing of tool calls written as text, into the same typed ToolCall objects as the API path.

Small models and servers without a tool-call parser write calls as JSON in the answer text:
rein's own constrained format (`{"tool_calls": [...]}` / `{"answer": ...}`), a bare
`{"name": ..., "arguments": ...}`, or Hermes/Qwen-style `<tool_call>{...}</tool_call>` blocks,
sometimes inside a Markdown code fence, sometimes with arguments as a JSON string; and the
embedded models' action protocol (`Action: NAME` + `Arguments: {...}`) when a model writes it as
the text of its answer (parse_action_text).
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

from agent.messages import ToolCall

_FENCE = re.compile(r"^\s*```[a-zA-Z0-9_-]*\s*\n?(.*?)\n?\s*```\s*$", re.DOTALL)
_TAGGED = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.DOTALL)
_NAME_KEYS = ("name", "tool", "tool_name", "function")
ACTION_OPEN = "Action:"
"""What opens every assistant turn in the action protocol."""
ARGUMENTS_OPEN = "Arguments:"
"""What follows a chosen tool's name in the action protocol, before its JSON arguments."""
_ACTION_LINE = re.compile(rf"^[ \t]*{ACTION_OPEN}[ \t]*(\S*)[ \t]*\n?", re.MULTILINE)
_ARG_KEYS = ("arguments", "parameters", "args", "input")


@dataclass
class ParsedTurn:
    """A model turn recovered from text: the answer text and any tool calls."""

    text: str = ""
    """Answer text for the user (empty when the turn only calls tools)."""
    tool_calls: list[ToolCall] = field(default_factory=list)
    """Tool calls found, in order."""


def _arguments_text(value: Any) -> str:
    if value is None:
        return "{}"
    if isinstance(value, str):
        # Arguments given as JSON text are kept as written; invalid JSON reaches the tool layer,
        # which reports it back to the model.
        return value.strip() or "{}"
    return json.dumps(value, ensure_ascii=False)


def _call_from(obj: Any) -> ToolCall | None:
    if not isinstance(obj, dict):
        return None
    if isinstance(obj.get("function"), dict):  # OpenAI shape: {"function": {"name", "arguments"}}
        inner = obj["function"]
        name = inner.get("name")
        args = next((inner[k] for k in _ARG_KEYS if k in inner), None)
    else:
        name = next((obj[k] for k in _NAME_KEYS if isinstance(obj.get(k), str)), None)
        args = next((obj[k] for k in _ARG_KEYS if k in obj), None)
    if not isinstance(name, str) or not name.strip():
        return None
    return ToolCall(name=name.strip(), arguments=_arguments_text(args))


def _load_json(text: str) -> Any:
    """The JSON value in text: whole, inside a code fence, or the first object in it."""
    candidate = text.strip()
    if fence := _FENCE.match(candidate):
        candidate = fence.group(1).strip()
    try:
        return json.loads(candidate)
    except json.JSONDecodeError:
        pass
    start = candidate.find("{")
    if start < 0:
        return None
    try:
        value, _ = json.JSONDecoder().raw_decode(candidate[start:])
    except json.JSONDecodeError:
        return None
    return value


def _answer_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def parse_turn(text: str, tool_names: Collection[str] = ()) -> ParsedTurn:
    """Recover an answer and tool calls from a model's text, as leniently as is safe.

    A bare JSON object is read as a call only when it names one of tool_names, so that a JSON
    answer is not mistaken for one. Text that holds no recognisable call is the answer as is.
    """
    tagged = parse_tagged_calls(text)
    if tagged is not None:
        return tagged
    value = _load_json(text)
    if isinstance(value, dict):
        if "tool_calls" in value and isinstance(value["tool_calls"], list | dict):
            items = value["tool_calls"]
            items = [items] if isinstance(items, dict) else items
            found = [c for c in (_call_from(i) for i in items) if c is not None]
            answer = value.get("answer") or value.get("content") or ""
            if found:
                return ParsedTurn(_answer_text(answer), found)
        if isinstance(value.get("tool_call"), dict) and (one := _call_from(value["tool_call"])):
            return ParsedTurn("", [one])
        if "answer" in value:
            return ParsedTurn(_answer_text(value["answer"]))
        single = _call_from(value)
        if single is not None and single.name in tool_names:
            return ParsedTurn("", [single])
    if isinstance(value, list) and value:
        calls = [_call_from(v) for v in value]
        if all(c is not None and c.name in tool_names for c in calls):
            return ParsedTurn("", [c for c in calls if c is not None])
    if value is None and (salvaged := salvage_calls(text)):
        return ParsedTurn("", salvaged)
    return ParsedTurn(text.strip())


def is_action_text(text: str) -> bool:
    """Whether text opens as an action-protocol turn (`Action: ...`), not as an answer."""
    return text.lstrip().startswith(ACTION_OPEN)


def parse_action_text(text: str, tool_names: Collection[str], respond: str) -> ParsedTurn | None:
    """The calls and answer of action-protocol text, or None when it does not follow the protocol.

    Each block opens with `Action: NAME`: a tool's name followed by `Arguments:` and one JSON
    object, or `respond` followed by the answer. Arguments that are not valid JSON are kept as
    written, so the tool layer reports them to the model as for any call. An unknown name, a call
    without `Arguments:`, or text before the first block make the whole text unparseable.
    """
    heads = list(_ACTION_LINE.finditer(text))
    if not heads or text[: heads[0].start()].strip():
        return None
    turn = ParsedTurn()
    for head, following in zip(heads, [*heads[1:], None], strict=True):
        name = head.group(1)
        body = text[head.end() : following.start() if following else len(text)].strip()
        if name == respond:
            turn.text = f"{turn.text}\n\n{body}".strip()
            continue
        if name not in tool_names or not body.startswith(ARGUMENTS_OPEN):
            return None
        raw = body[len(ARGUMENTS_OPEN) :].strip()
        try:
            value, _ = json.JSONDecoder().raw_decode(raw)
        except json.JSONDecodeError:
            value = None
        arguments = json.dumps(value, ensure_ascii=False) if isinstance(value, dict) else raw or "{}"
        turn.tool_calls.append(ToolCall(name=name, arguments=arguments))
    return turn if turn.tool_calls or turn.text else None


_CALLS_ARRAY = re.compile(r'"tool_calls"\s*:\s*\[')


def salvage_calls(text: str) -> list[ToolCall]:
    """The complete call objects at the start of a `"tool_calls": [` array that was cut off."""
    match = _CALLS_ARRAY.search(text)
    if not match:
        return []
    decoder = json.JSONDecoder()
    calls: list[ToolCall] = []
    pos = match.end()
    while True:
        while pos < len(text) and text[pos] in " \t\r\n,":
            pos += 1
        try:
            value, pos = decoder.raw_decode(text, pos)
        except json.JSONDecodeError:
            return calls
        call = _call_from(value)
        if call is None:
            return calls
        calls.append(call)


def parse_tagged_calls(text: str) -> ParsedTurn | None:
    """Hermes/Qwen-style `<tool_call>{json}</tool_call>` blocks, or None when there are none."""
    if "<tool_call>" not in text:
        return None
    calls: list[ToolCall] = []
    for block in _TAGGED.findall(text):
        value = _load_json(block)
        call = _call_from(value)
        if call is not None:
            calls.append(call)
    if not calls:
        return None
    rest = _TAGGED.sub("", text).strip()
    return ParsedTurn(rest, calls)


_ANSWER_PREFIX = re.compile(r'\s*\{\s*"answer"\s*:\s*"')
_COMPACT_PREFIX = '{"answer":"'


class AnswerStreamExtractor:
    """Turns streamed constrained JSON into the answer's text as it arrives.

    Fed the raw chunks of `{"answer": "..."}`, it returns the decoded characters of the answer
    string piece by piece; for a tool-call object, or any other JSON, it returns nothing.
    """

    def __init__(self) -> None:
        self._raw = ""
        self._pos = 0
        self._state = "prefix"  # prefix → string → done, or prefix → other

    def feed(self, chunk: str) -> str:
        """Add raw model output; return newly decoded answer text (possibly empty)."""
        self._raw += chunk
        if self._state == "prefix":
            match = _ANSWER_PREFIX.match(self._raw)
            if match:
                self._state, self._pos = "string", match.end()
            else:
                compact = re.sub(r"\s+", "", self._raw)
                if not _COMPACT_PREFIX.startswith(compact):
                    self._state = "other"
        if self._state != "string":
            return ""
        return self._decode()

    def _decode(self) -> str:
        out: list[str] = []
        raw, i = self._raw, self._pos
        while i < len(raw):
            ch = raw[i]
            if ch == '"':
                self._state = "done"
                i += 1
                break
            if ch != "\\":
                out.append(ch)
                i += 1
                continue
            if i + 1 >= len(raw):
                break
            if raw[i + 1] != "u":
                esc = raw[i : i + 2]
            else:
                if i + 6 > len(raw):
                    break
                esc = raw[i : i + 6]
                # A high surrogate must be decoded together with the low one after it.
                if esc[2:].upper().startswith(("D8", "D9", "DA", "DB")):
                    if i + 12 > len(raw):
                        break
                    esc = raw[i : i + 12]
            try:
                out.append(json.loads(f'"{esc}"'))
            except (json.JSONDecodeError, ValueError):
                out.append(esc)
            i += len(esc)
        self._pos = i
        return "".join(out)

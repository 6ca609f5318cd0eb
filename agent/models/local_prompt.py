"""Prompt and grammar for one request to the embedded model, and the parse of its output.

The history is rewritten into plain system/user/assistant turns that any chat template renders:
tool results become user turns, and, when tools are offered, the assistant's past turns are shown
in the same JSON shape the grammar makes it write, so the model sees its own format in context.

Two protocols for tools (`ToolProtocol`). "action", the default: the model first chooses its next
action, one of the offered tool names or `respond`, under a grammar that allows nothing else; then
it writes that tool's arguments as JSON under the tool's parameter grammar, or its answer as plain
text. Past turns are shown as `Action: NAME` + `Arguments: {...}` or `Action: respond` + the text.
"json": one grammar for the whole turn, `{"answer": ...}` or `{"tool_calls": [...]}`; a greedy
small model takes the answer branch there unless its history already shows a JSON call.

Planted reasoning (agent.planted_reasoning) is rendered as the opening of the assistant's own turn, not as a
closed turn answered by an empty tool result: when it is the last thing in the history, the prompt
ends with the generation prompt and the plan (`Plan.prefix`), so the model goes on from its own
reasoning into its action in one generation; once the model has acted, the plan is shown as the
start of that turn. Only the generated continuation is parsed into the response.
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from agent.messages import FinishReason, Message, ModelRequest, ModelResponse, ToolCall, Usage
from agent.models.tool_grammar import (
    actions_prompt,
    callable_tools,
    choice_grammar,
    decision_schema,
    parameters_of,
    respond_action,
    schema_from_response_format,
    tool_names,
    tools_prompt,
)
from agent.models.toolcall_parse import (
    ACTION_OPEN,
    ARGUMENTS_OPEN,
    AnswerStreamExtractor,
    is_action_text,
    parse_action_text,
    parse_turn,
)
from agent.planted_reasoning import planted_reasoning

PlanMode = Literal["plain", "tools", "actions", "json"]
ToolProtocol = Literal["action", "json"]
DEFAULT_TOOL_PROTOCOL: ToolProtocol = "action"
"""How the embedded models call tools unless told otherwise (see the module docstring)."""
__all__ = ["ACTION_OPEN", "ARGUMENTS_OPEN"]  # the protocol's words, defined with their parser
_DEFAULT_SYSTEM = "You are a helpful assistant."
PROTOCOL_FREE_ANSWER = r"""root ::= head tail
head ::= [^A \t\r\n] | "A" ([^c] | "c" ([^t] | "t" ([^i] | "i" ([^o] | "o" ([^n] | "n" [^:])))))
tail ::= [^\x00]*
"""
"""GBNF of an answer that cannot open with the protocol's `Action:` (nor with blank space): the
grammar of answers the model is made to give (the repeat guard, tool_choice "none"), where a
protocol-text call could not be made."""
_ANY_OBJECT: dict[str, Any] = {"type": "object"}


@dataclass
class Plan:
    """How to prompt and constrain the model for one request."""

    mode: PlanMode
    """plain text, tool decision JSON, action-first tool use, or structured JSON output."""
    messages: list[dict[str, str]]
    """Chat-template messages (system, user, assistant only)."""
    grammar: str | None = None
    """GBNF grammar constraining the output, if any."""
    tool_names: list[str] = field(default_factory=list)
    """Names of the offered tools (tools mode)."""
    blocked: list[str] = field(default_factory=list)
    """Offered tools that may not be called on this request (ModelSettings.allowed_tools): they stay
    listed in the system block, but no grammar lets the model choose them."""
    prefix: str = ""
    """Planted reasoning that opens the assistant's turn: the rendered prompt ends with it, after
    the generation prompt, and the model continues from it; never part of the parsed output."""
    lead: str = ""
    """Fixed text after the prefix that the protocol opens every turn with (`Action:`)."""
    respond: str = ""
    """The action word that answers the user (actions mode; "" when an answer is not allowed)."""
    argument_grammars: dict[str, str] = field(default_factory=dict)
    """Per tool, the GBNF of its arguments after `Arguments:` (actions mode)."""
    answer_grammar: str | None = None
    """GBNF of the answer after `respond` (actions mode with a response_format), else free text."""
    answer_only: bool = False
    """Only `respond` may be chosen (tool_choice "none"): the tools stay listed in the system
    block, so the prompt and its cached state are those of every other step."""

    @property
    def actions(self) -> list[str]:
        """What the first step chooses among (actions mode): the tools, then respond if allowed."""
        if self.answer_only:
            return [self.respond]
        return [*self.callable_names, self.respond] if self.respond else self.callable_names

    @property
    def callable_names(self) -> list[str]:
        """The offered tools the model may call: tool_names less blocked."""
        return [n for n in self.tool_names if n not in self.blocked]


@functools.lru_cache(maxsize=128)
def _gbnf(schema_json: str) -> str:
    from llama_cpp.llama_grammar import json_schema_to_gbnf

    return json_schema_to_gbnf(schema_json)


def grammar_for(schema: dict[str, Any]) -> str:
    """GBNF for a JSON schema, as llama.cpp's response_format builds it; ValueError if unsupported."""
    try:
        # Not sort_keys: property order is the order the grammar makes the model write them in.
        return _gbnf(json.dumps(schema))
    except Exception as exc:  # the converter raises bare Exceptions and assertion errors
        raise ValueError(f"cannot turn the JSON schema into a grammar: {exc}") from None


_LOOSE_KEYS = ("pattern", "format", "not", "if", "then", "else", "dependentSchemas")


def _rewrite(schema: Any, node: Callable[[dict[str, Any]], dict[str, Any]]) -> Any:
    """The schema with `node` applied to every object in it, innermost first. The names under
    `properties` are data, not keywords, so `node` never sees that mapping itself."""
    if isinstance(schema, dict):
        out = {key: {name: _rewrite(sub, node) for name, sub in value.items()}
               if key == "properties" and isinstance(value, dict) else _rewrite(value, node)
               for key, value in schema.items()}
        return node(out)
    if isinstance(schema, list):
        return [_rewrite(v, node) for v in schema]
    return schema


def _loosen(schema: Any) -> Any:
    """The schema without the keywords llama.cpp's converter is pickiest about (regex patterns...)."""
    return _rewrite(schema, lambda d: {k: v for k, v in d.items() if k not in _LOOSE_KEYS})


MAX_ENUM_RANGE = 256
"""Bounded integers with at most this many values are written as an enum in the grammar."""
_BOUND_KEYS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")


def _integer_bounds(schema: dict[str, Any]) -> tuple[int, int] | None:
    """The inclusive range of an integer schema bounded at both ends (None if it is not, or empty)."""
    given = {k: v for k in _BOUND_KEYS
             if isinstance(v := schema.get(k), int | float) and not isinstance(v, bool)}
    lows = [math.ceil(given["minimum"])] if "minimum" in given else []
    if "exclusiveMinimum" in given:
        lows.append(math.floor(given["exclusiveMinimum"]) + 1)
    highs = [math.floor(given["maximum"])] if "maximum" in given else []
    if "exclusiveMaximum" in given:
        highs.append(math.ceil(given["exclusiveMaximum"]) - 1)
    if not lows or not highs or max(lows) > min(highs):
        return None
    return max(lows), min(highs)


def _as_enum(node: dict[str, Any]) -> dict[str, Any]:
    """An integer schema of a small bounded range as the enum of its values; any other unchanged."""
    bounds = _integer_bounds(node) if node.get("type") == "integer" and "enum" not in node else None
    if bounds is None or bounds[1] - bounds[0] >= MAX_ENUM_RANGE:
        return node
    rest = {k: v for k, v in node.items() if k != "type" and k not in _BOUND_KEYS}
    return {**rest, "enum": list(range(bounds[0], bounds[1] + 1))}


def _bounded_integers(schema: Any) -> Any:
    """The schema with each bounded integer of a small range spelled out as an enum.

    llama.cpp's converter ignores minimum and maximum, so a grammar for `k: integer (1-20)` lets
    a small model keep writing digits (`"k": 1000000000000000`) and then relay the tool's range
    error as its answer; as an enum, the grammar admits only the values the tool accepts."""
    return _rewrite(schema, _as_enum)


def _argument_schemas(tools: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per tool, the strictest arguments schema the grammar converter accepts.

    Its own schema (small bounded integer ranges as enums); else that schema without patterns and
    formats; else any object. The tool layer still validates arguments against the full schema and
    reports errors to the model.
    """
    out: dict[str, dict[str, Any]] = {}
    for tool, name in zip(tools, tool_names(tools), strict=True):
        params = _bounded_integers(parameters_of(tool))
        out[name] = _ANY_OBJECT
        for candidate in (params, _loosen(params)):
            try:
                grammar_for(candidate)
            except ValueError:
                continue
            out[name] = candidate
            break
    return out


def _text_of(m: Message) -> str:
    if isinstance(m.content, str):
        return m.content
    text = m.text
    if any(p.get("type") not in ("text", None) for p in m.content):
        text += "\n[an image was attached; this model cannot see images]"
    return text


def _calls_json(m: Message) -> str:
    calls = [{"name": tc.name, "arguments": tc.parsed_arguments() or {}} for tc in m.tool_calls]
    return json.dumps({"tool_calls": calls}, ensure_ascii=False)


def _actions_text(m: Message, respond: str) -> str:
    if not m.tool_calls:
        return f"{ACTION_OPEN} {respond}\n{_text_of(m)}"
    return "\n\n".join(
        f"{ACTION_OPEN} {tc.name}\n{ARGUMENTS_OPEN} "
        + json.dumps(tc.parsed_arguments() or {}, ensure_ascii=False)
        for tc in m.tool_calls
    )


def _content(m: Message, *, tools_mode: bool, respond: str = "") -> str:
    if respond:
        return _actions_text(m, respond)
    if m.tool_calls:
        return _calls_json(m)
    if tools_mode:
        return json.dumps({"answer": _text_of(m)}, ensure_ascii=False)
    return _text_of(m)


def _chat_messages(
    messages: list[Message], *, tools_mode: bool, system_extra: str, respond: str = ""
) -> tuple[list[dict[str, str]], str]:
    """The chat-template messages, and the planted reasoning left open at the end (or "")."""
    out: list[dict[str, str]] = []
    opening: list[str] = []  # planted reasoning waiting for the assistant turn it opens
    planted_calls: set[str] = set()
    for m in messages:
        plan = planted_reasoning(m)
        if plan is not None:
            opening.append(plan.strip())
            planted_calls.update(tc.id for tc in m.tool_calls)
            continue
        if m.role == "tool" and m.tool_call_id in planted_calls:
            continue  # the think tool's empty answer: the plan is the agent's own, not a result
        if opening and m.role != "assistant":
            # The agent never acted after the plan (the turn ended): it stays a turn of its own.
            out.append({"role": "assistant", "content": "\n\n".join(opening)})
            opening = []
        if m.role == "tool":
            label = "failed" if m.is_error else "returned"
            entry = f"Tool {m.name or 'call'} {label}:\n{_text_of(m)}"
            if out and out[-1]["role"] == "user" and out[-1].get("_tool") == "1":
                out[-1]["content"] += f"\n\n{entry}"
            else:
                out.append({"role": "user", "content": entry, "_tool": "1"})
        elif m.role == "assistant":
            content = _content(m, tools_mode=tools_mode, respond=respond)
            if opening:
                # The model wrote this turn as a continuation of its planted reasoning.
                content = "\n\n".join(opening) + "\n" + content
                opening = []
            out.append({"role": "assistant", "content": content})
        else:
            out.append({"role": m.role, "content": _text_of(m)})
    for msg in out:
        msg.pop("_tool", None)
    if system_extra:
        if out and out[0]["role"] == "system":
            out[0]["content"] = f"{out[0]['content']}\n\n{system_extra}".strip()
        else:
            out.insert(0, {"role": "system", "content": f"{_DEFAULT_SYSTEM}\n\n{system_extra}"})
    return out, "\n\n".join(opening)


_ROOT_RULE = re.compile(r"^root ::= (.*)$", re.MULTILINE)


def _opened(gbnf: str, prefix: str) -> str:
    """The grammar, letting a continuation of planted reasoning start on a new line first."""
    if not prefix:
        return gbnf
    return _ROOT_RULE.sub(lambda m: f'root ::= "\\n"? "\\n"? ({m.group(1)})', gbnf, count=1)


def _led(gbnf: str, lead: str) -> str:
    """The grammar with lead required before its root."""
    return _ROOT_RULE.sub(lambda m: f"root ::= {json.dumps(lead)} ({m.group(1)})", gbnf, count=1)


def _action_plan(request: ModelRequest, answer_schema: dict[str, Any] | None) -> Plan:
    names = tool_names(request.tools)
    callable_ = set(tool_names(callable_tools(request.tools, request.settings.allowed_tools)))
    blocked = [n for n in names if n not in callable_]
    # A required call with every tool blocked can only be an answer.
    require = request.settings.tool_choice == "required" and len(blocked) < len(names)
    answer_only = request.settings.tool_choice == "none"
    # The answer word exists even when required: the repeat guard may still force an answer.
    word = respond_action(names)
    extra = actions_prompt(request.tools, require_tool=require, respond=word)
    if answer_schema:
        extra += f"\nThe answer must be JSON matching: {json.dumps(answer_schema, separators=(',', ':'))}"
    messages, prefix = _chat_messages(request.messages, tools_mode=True, system_extra=extra, respond=word)
    arguments = {name: _led(grammar_for(schema), " ") for name, schema in _argument_schemas(request.tools).items()}
    plan = Plan(
        mode="actions",
        messages=messages,
        tool_names=names,
        blocked=blocked,
        prefix=prefix,
        lead=("\n" if prefix else "") + ACTION_OPEN,
        respond="" if require else word,
        argument_grammars={} if answer_only else {n: g for n, g in arguments.items() if n not in blocked},
        answer_grammar=grammar_for(answer_schema) if answer_schema is not None else None,
        answer_only=answer_only,
    )
    plan.grammar = choice_grammar(plan.actions)
    return plan


def action_step(plan: Plan, choice: str, *, made: bool = False) -> tuple[str, str | None]:
    """For a chosen action: the text that follows the choice in the prompt, and the grammar of
    what the model writes next (None: free text). made: the answer was chosen for the model
    (the repeat guard, a retry), not by it."""
    if choice in plan.argument_grammars:
        return f"\n{ARGUMENTS_OPEN}", plan.argument_grammars[choice]
    if plan.answer_grammar is None and (made or plan.answer_only or choice not in plan.actions):
        # A made answer (tool_choice "none", the repeat guard): protocol text could be no call.
        return "\n", PROTOCOL_FREE_ANSWER
    return "\n", plan.answer_grammar


def answer_word(plan: Plan) -> str:
    """The action word that answers the user, also under tool_choice="required" (repeat guard)."""
    return plan.respond or respond_action(plan.tool_names)


def build_plan(request: ModelRequest, protocol: ToolProtocol = DEFAULT_TOOL_PROTOCOL) -> Plan:
    """The prompt messages and grammar for a request; ValueError for a schema llama.cpp cannot use.

    protocol chooses how tools are offered when there are any (see the module docstring).
    """
    answer_schema = schema_from_response_format(request.response_format)
    if request.tools and protocol == "action":
        # tool_choice "none" included: the same prompt, with respond the only action.
        return _action_plan(request, answer_schema)
    callable_ = callable_tools(request.tools, request.settings.allowed_tools)
    use_tools = bool(callable_) and request.settings.tool_choice != "none"
    if use_tools:
        require = request.settings.tool_choice == "required"
        schema = decision_schema(
            callable_,
            require_tool=require,
            answer_schema=answer_schema,
            argument_schemas=_argument_schemas(request.tools),
        )
        extra = tools_prompt(request.tools, require_tool=require)
        if answer_schema:
            extra += f"\nThe answer must be JSON matching: {json.dumps(answer_schema, separators=(',', ':'))}"
        messages, prefix = _chat_messages(request.messages, tools_mode=True, system_extra=extra)
        return Plan(
            mode="tools",
            messages=messages,
            grammar=_opened(grammar_for(schema), prefix),
            tool_names=tool_names(callable_),
            prefix=prefix,
        )
    if answer_schema is not None:
        extra = (
            "Reply with one JSON object only, matching this schema: "
            + json.dumps(answer_schema, separators=(",", ":"))
        )
        messages, prefix = _chat_messages(request.messages, tools_mode=False, system_extra=extra)
        return Plan(mode="json", messages=messages, grammar=_opened(grammar_for(answer_schema), prefix), prefix=prefix)
    messages, prefix = _chat_messages(request.messages, tools_mode=False, system_extra="")
    return Plan(mode="plain", messages=messages, prefix=prefix)


def answer_only(plan: Plan) -> Plan:
    """The same prompt with the tool branch removed from the grammar: the model must answer."""
    schema = {
        "type": "object",
        "properties": {"answer": {"type": "string"}},
        "required": ["answer"],
        "additionalProperties": False,
    }
    return Plan(
        mode="tools",
        messages=plan.messages,
        grammar=_opened(grammar_for(schema), plan.prefix),
        tool_names=plan.tool_names,
        prefix=plan.prefix,
    )


def render_prompt(formatter: Any, plan: Plan) -> tuple[str, Any]:
    """The prompt text for a plan, and the formatter's response (stop tokens, special tokens).

    formatter is a llama_cpp chat formatter (the GGUF's own template) that ends the prompt with
    the generation prompt; planted reasoning is appended after it, so the plan opens the
    assistant's turn and nothing follows it.
    """
    rendered = formatter(messages=plan.messages)
    return rendered.prompt + plan.prefix + plan.lead, rendered


class ProtocolTextError(ValueError):
    """The model answered with action-protocol text that names no call it may make."""


def parse_action(choice: str, raw: str, plan: Plan, finish: str | None, usage: Usage, model: str) -> ModelResponse:
    """The typed response for an action chosen in the first step and what followed it.

    An answer that is itself protocol text (`Action: NAME` + `Arguments: {...}`, as the model saw
    its past calls written) is the call it describes, validated by the tool layer like any call;
    ProtocolTextError when it names no offered tool or does not follow the protocol, so that it
    never reaches the user as a reply.
    """
    if choice in plan.argument_grammars:
        # Arguments cut off by the token limit stay as written: the tool layer reports bad JSON.
        call = ToolCall(name=choice, arguments=raw.strip() or "{}")
        return ModelResponse(tool_calls=[call], usage=usage, finish_reason="tool_calls", model=model)
    reason: FinishReason = "length" if finish == "length" else "stop"
    text = raw.strip()
    if plan.answer_grammar is None and is_action_text(text):
        offered = [] if plan.answer_only else plan.callable_names
        turn = parse_action_text(text, offered, answer_word(plan))
        if turn is None:
            raise ProtocolTextError(f"the answer is protocol text, not a call or an answer: {text[:120]!r}")
        if turn.tool_calls:
            return ModelResponse(tool_calls=turn.tool_calls, usage=usage, finish_reason="tool_calls", model=model)
        text = turn.text
    return ModelResponse(text=text, usage=usage, finish_reason=reason, model=model)


def parse_output(raw: str, plan: Plan, finish: str | None, usage: Usage, model: str) -> ModelResponse:
    """The typed response for the model's raw output under a plan."""
    reason: FinishReason = "length" if finish == "length" else "stop"
    if plan.mode != "tools":
        return ModelResponse(text=raw.strip(), usage=usage, finish_reason=reason, model=model)
    turn = parse_turn(raw, plan.tool_names)
    text = turn.text
    # Tiny models under a grammar tend to repeat a call verbatim until cut off; one is meant.
    unique: dict[tuple[str, str], ToolCall] = {}
    for call in turn.tool_calls:
        args = call.parsed_arguments()
        key = (call.name, json.dumps(args, sort_keys=True) if args is not None else call.arguments)
        unique.setdefault(key, call)
    turn.tool_calls = list(unique.values())
    if not turn.tool_calls and reason == "length":
        # Cut off inside {"answer": "...": keep what was said rather than raw JSON.
        extractor = AnswerStreamExtractor()
        partial = extractor.feed(raw)
        text = partial or text
    return ModelResponse(
        text=text,
        tool_calls=turn.tool_calls,
        usage=usage,
        finish_reason="tool_calls" if turn.tool_calls else reason,
        model=model,
    )


def stable_prefix(closed_formatter: Any, plan: Plan) -> str:
    """The rendered system block (system prompt and tool list) that the plan's prompt opens with,
    or "" when it has no system message.

    It is the part of the prompt that neither the conversation's growth nor the protocol's steps
    change, so its evaluated state can be kept (agent.models.prefix_cache). closed_formatter is
    the same chat template without the generation prompt: rendering the system message alone
    gives exactly the text the full prompt starts with.
    """
    if not plan.messages or plan.messages[0]["role"] != "system":
        return ""
    return closed_formatter(messages=plan.messages[:1]).prompt

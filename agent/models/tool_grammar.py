"""JSON schemas and prompt text that let a small local model call tools through constrained JSON.

A small model cannot be trusted to follow a tool-calling chat template, so the embedded model is
made to answer with one JSON object whose shape a grammar enforces:
`{"answer": "..."}` or `{"tool_calls": [{"name": "<tool>", "arguments": {...}}]}`, where each
call's arguments follow that tool's own parameter schema.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from typing import Any

_MAX_REF_DEPTH = 8


def function_of(tool: dict[str, Any]) -> dict[str, Any]:
    """The function part of an OpenAI tool ({"type": "function", "function": {...}}) or a bare one."""
    fn = tool.get("function", tool)
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
        raise ValueError(f"tool without a name: {json.dumps(tool)[:200]}")
    return fn


def tool_names(tools: Sequence[dict[str, Any]]) -> list[str]:
    """Names of the offered tools, in order."""
    return [function_of(t)["name"] for t in tools]


def callable_tools(tools: Sequence[dict[str, Any]], allowed: Sequence[str] | None) -> list[dict[str, Any]]:
    """The offered tools that may be called (ModelSettings.allowed_tools; None: all), in order."""
    if allowed is None:
        return list(tools)
    keep = set(allowed)
    return [t for t in tools if function_of(t)["name"] in keep]


def inline_refs(schema: Any, defs: dict[str, Any] | None = None, depth: int = 0) -> Any:
    """A copy of schema with local `#/$defs/...` references replaced by their definitions.

    A tool's parameters are nested inside a larger schema, where its own root-relative references
    would no longer resolve. Remote or unresolvable references, and recursion deeper than a few
    levels, become an unconstrained `{}` so that nothing is ever fetched.
    """
    if isinstance(schema, dict):
        if defs is None:
            defs = {**schema.get("definitions", {}), **schema.get("$defs", {})}
        ref = schema.get("$ref")
        if isinstance(ref, str):
            name = ref.rsplit("/", 1)[-1]
            target = defs.get(name) if ref.startswith(("#/$defs/", "#/definitions/")) else None
            if target is None or depth >= _MAX_REF_DEPTH:
                return {}
            siblings = {k: v for k, v in schema.items() if k != "$ref"}
            merged = {**copy.deepcopy(target), **siblings}
            return inline_refs(merged, defs, depth + 1)
        out: dict[str, Any] = {}
        for key, value in schema.items():
            if key in ("properties", "patternProperties") and isinstance(value, dict):
                # A mapping of names to schemas: the names are data, never keywords to drop.
                out[key] = {name: inline_refs(sub, defs, depth) for name, sub in value.items()}
            elif key not in ("$defs", "definitions"):
                out[key] = inline_refs(value, defs, depth)
        return out
    if isinstance(schema, list):
        return [inline_refs(v, defs, depth) for v in schema]
    return schema


def parameters_of(tool: dict[str, Any]) -> dict[str, Any]:
    """A tool's parameter schema, self-contained, defaulting to an empty object."""
    params = function_of(tool).get("parameters") or {"type": "object", "properties": {}}
    return inline_refs(params)


def decision_schema(
    tools: Sequence[dict[str, Any]],
    *,
    require_tool: bool = False,
    answer_schema: dict[str, Any] | None = None,
    argument_schemas: dict[str, dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The schema of one model turn: an answer, or tool calls with per-tool arguments.

    require_tool drops the answer branch; answer_schema constrains the answer (structured output);
    argument_schemas overrides a tool's arguments schema (e.g. a looser one the grammar accepts).
    """
    overrides = argument_schemas or {}
    call_variants = []
    for tool in tools:
        name = function_of(tool)["name"]
        call_variants.append(
            {
                "type": "object",
                "properties": {
                    "name": {"const": name},
                    "arguments": overrides.get(name, parameters_of(tool)),
                },
                "required": ["name", "arguments"],
                "additionalProperties": False,
            }
        )
    item = call_variants[0] if len(call_variants) == 1 else {"oneOf": call_variants}
    calls_branch = {
        "type": "object",
        "properties": {"tool_calls": {"type": "array", "items": item, "minItems": 1, "maxItems": 4}},
        "required": ["tool_calls"],
        "additionalProperties": False,
    }
    if require_tool:
        return calls_branch
    answer_branch = {
        "type": "object",
        "properties": {"answer": answer_schema or {"type": "string"}},
        "required": ["answer"],
        "additionalProperties": False,
    }
    return {"oneOf": [answer_branch, calls_branch]}


def _type_text(schema: dict[str, Any]) -> str:
    if "enum" in schema:
        return "|".join(json.dumps(v) for v in schema["enum"])
    if "const" in schema:
        return json.dumps(schema["const"])
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return "|".join(_type_text(s) for s in schema[key] if isinstance(s, dict))
    kind = schema.get("type", "any")
    if isinstance(kind, list):
        return "|".join(str(k) for k in kind)
    if kind == "array" and isinstance(schema.get("items"), dict):
        return f"array of {_type_text(schema['items'])}"
    return str(kind)


def describe_tool(tool: dict[str, Any]) -> str:
    """One compact entry for the system prompt: signature, description, argument notes."""
    fn = function_of(tool)
    params = parameters_of(tool)
    props: dict[str, Any] = params.get("properties", {}) or {}
    required = set(params.get("required", []) or [])
    sig = ", ".join(
        f"{arg}{'' if arg in required else '?'}: {_type_text(spec if isinstance(spec, dict) else {})}"
        for arg, spec in props.items()
    )
    lines = [f"- {fn['name']}({sig})"]
    if desc := (fn.get("description") or "").strip():
        lines[0] += f": {' '.join(desc.split())}"
    for arg, spec in props.items():
        if isinstance(spec, dict) and (arg_desc := (spec.get("description") or "").strip()):
            lines.append(f"    {arg}: {' '.join(arg_desc.split())}")
    return "\n".join(lines)


TOOL_PLACEHOLDER = "<tool name>"
"""What the format example says in place of a tool's name: no tool can be named this (function
names are letters, digits, `_` and `-`), so the example cannot be read as a call to make."""


def tools_prompt(tools: Sequence[dict[str, Any]], *, require_tool: bool = False) -> str:
    """System-prompt text telling the model its tools and the JSON it must answer with."""
    listing = "\n".join(describe_tool(t) for t in tools)
    # The example names no real tool: small models copy the example's call (it used to name the
    # first tool, and that was the call they made most, whatever the task).
    example = f'{{"tool_calls": [{{"name": "{TOOL_PLACEHOLDER}", "arguments": {{...}}}}]}}'
    how = (
        f"Call tools with {example}, using a tool name from the list."
        if require_tool
        else f'To call tools reply {example}, using a tool name from the list; to answer the user reply {{"answer": "..."}}.'
    )
    return (
        f"You can use these tools:\n{listing}\n\nReply with one JSON object only. {how} "
        "Call a tool when it can get information you do not have; "
        "after a tool result, use it to answer."
    )


def schema_from_response_format(response_format: dict[str, Any] | None) -> dict[str, Any] | None:
    """The JSON schema inside an OpenAI or llama.cpp response_format; {} means any JSON object.

    Accepts {"type": "json_schema", "json_schema": {"schema": ...}} (OpenAI),
    {"type": "json_object", "schema": ...} (llama.cpp) and {"type": "json_object"}. None: free text.
    """
    if not response_format:
        return None
    kind = response_format.get("type")
    if kind == "text":
        return None
    if kind == "json_schema":
        inner = response_format.get("json_schema") or {}
        schema = inner.get("schema") if isinstance(inner, dict) else None
        if not isinstance(schema, dict):
            raise ValueError("response_format json_schema needs a 'schema' object")
        return inline_refs(schema)
    if kind == "json_object":
        schema = response_format.get("schema")
        return inline_refs(schema) if isinstance(schema, dict) else {"type": "object"}
    raise ValueError(f"unsupported response_format type {kind!r}")


RESPOND = "respond"
"""The action that answers the user in the action-first protocol (unless a tool has this name)."""


def respond_action(names: Sequence[str]) -> str:
    """The word for "answer the user" among these tool names: `respond`, unless a tool is so named."""
    word = RESPOND
    while word in names:
        word = f"{word}_to_user"
    return word


def choice_grammar(choices: Sequence[str], lead: str = " ") -> str:
    """GBNF for exactly one of choices, after lead (the space a word takes after `Action:`)."""
    if not choices:
        raise ValueError("no actions to choose from")
    # json.dumps writes a GBNF string literal: both escape quotes and backslashes the same way.
    alternatives = " | ".join(json.dumps(c) for c in choices)
    return f"root ::= {json.dumps(lead)} ({alternatives})\n" if lead else f"root ::= ({alternatives})\n"


def actions_prompt(tools: Sequence[dict[str, Any]], *, require_tool: bool = False, respond: str = RESPOND) -> str:
    """System-prompt text for the action-first protocol: choose the action, then write its input."""
    listing = "\n".join(describe_tool(t) for t in tools)
    # As in tools_prompt, the example names no real tool.
    call = f"Action: {TOOL_PLACEHOLDER}\nArguments: {{...}}"
    if require_tool:
        how = f"Each reply names the tool to call, then its arguments as one JSON object:\n{call}"
    else:
        how = (
            "Each reply starts with your next action: the name of a tool from the list, or "
            f"{respond} to answer the user. A tool call is written\n{call}\n"
            f"and an answer is written\nAction: {respond}\n<your answer to the user>"
        )
    return (
        f"You can use these tools:\n{listing}\n\n{how}\n\n"
        "Call a tool when it can get information you do not have or do the work for you; "
        f"after a tool result, use it to answer."
    )


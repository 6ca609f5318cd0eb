"""The embedded model's prompt, grammar and lenient parsing, checked without loading weights."""

from __future__ import annotations

import json

import pytest

from agent.messages import Message, ModelRequest, ModelSettings, ToolCall, Usage
from agent.models import local_prompt
from agent.models.local_prompt import Plan, grammar_for, parse_output
from agent.models.tool_grammar import (
    decision_schema,
    describe_tool,
    inline_refs,
    schema_from_response_format,
)
from agent.models.toolcall_parse import AnswerStreamExtractor, parse_turn
from tools.tool import tool


def build_plan(request: ModelRequest) -> Plan:
    """The single-grammar ("json") plan: these tests pin that protocol; the action protocol's
    tests are in test_local_actions.py."""
    return local_prompt.build_plan(request, "json")


@tool
def get_weather(city: str, unit: str = "celsius") -> str:
    """Get the current weather for a city.

    Args:
        city: Name of the city.
        unit: celsius or fahrenheit.
    """
    return city


@tool
def get_time(zone: str) -> str:
    """Current time in a time zone.

    Args:
        zone: IANA zone name.
    """
    return zone


TOOLS = [get_weather.openai_schema(), get_time.openai_schema()]
NAMES = ["get_weather", "get_time"]


@pytest.mark.parametrize(
    ("raw", "text", "calls"),
    [
        ('{"answer": "It is sunny."}', "It is sunny.", []),
        ('{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]}', "", [("get_weather", {"city": "Paris"})]),
        ('```json\n{"tool_calls": [{"name": "get_time", "arguments": {"zone": "UTC"}}]}\n```', "", [("get_time", {"zone": "UTC"})]),
        ('{"name": "get_weather", "parameters": {"city": "Rome"}}', "", [("get_weather", {"city": "Rome"})]),
        ('{"tool_call": {"name": "get_time", "arguments": "{\\"zone\\": \\"CET\\"}"}}', "", [("get_time", {"zone": "CET"})]),
        ('[{"name": "get_weather", "arguments": {"city": "A"}}, {"name": "get_time", "arguments": {"zone": "B"}}]', "", [("get_weather", {"city": "A"}), ("get_time", {"zone": "B"})]),
        ('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>', "", [("get_weather", {"city": "Oslo"})]),
        ('{"tool_calls": [{"function": {"name": "get_time", "arguments": "{}"}}]}', "", [("get_time", {})]),
        ('{"name": "not_offered", "arguments": {}}', '{"name": "not_offered", "arguments": {}}', []),
        ("Just words.", "Just words.", []),
        ('{"answer": {"score": 3}}', '{"score": 3}', []),
    ],
)
def test_lenient_parse(raw: str, text: str, calls: list[tuple[str, dict]]) -> None:
    turn = parse_turn(raw, NAMES)
    assert turn.text == text
    assert [(c.name, c.parsed_arguments()) for c in turn.tool_calls] == calls


def test_calls_are_salvaged_from_a_cut_off_array_and_repeats_dropped() -> None:
    raw = '{ "tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}, {"name": "get_weather", "arguments": {"city": "Paris"}}, {"name": "get_w'
    assert [c.parsed_arguments() for c in parse_turn(raw, NAMES).tool_calls] == [{"city": "Paris"}] * 2
    plan = build_plan(ModelRequest(messages=[Message.user("x")], tools=TOOLS))
    response = parse_output(raw, plan, "length", Usage(), "local:t")
    assert response.finish_reason == "tool_calls" and len(response.tool_calls) == 1


def test_invalid_argument_json_is_kept_for_the_tool_layer_to_report() -> None:
    turn = parse_turn('{"tool_calls": [{"name": "get_time", "arguments": "{zone: UTC"}]}', NAMES)
    assert turn.tool_calls[0].arguments == "{zone: UTC" and turn.tool_calls[0].parsed_arguments() is None


def test_answer_extractor_decodes_a_stream_char_by_char() -> None:
    answer = 'Hé "quoted"\nline\t\\ 😀 end'
    raw = json.dumps({"answer": answer}, ensure_ascii=True)
    extractor = AnswerStreamExtractor()
    got = "".join(extractor.feed(ch) for ch in raw)
    assert got == answer
    spaced = AnswerStreamExtractor()
    assert "".join(spaced.feed(c) for c in ['{ \n "answer"', ' : "ab', 'c"}']) == "abc"
    calls = AnswerStreamExtractor()
    assert calls.feed('{"tool_calls": [{"name": "get_time", "arguments": {"zone": "x"}}]}') == ""


def test_refs_are_inlined_and_property_names_survive() -> None:
    schema = {
        "type": "object",
        "properties": {
            "title": {"type": "string", "title": "Title"},
            "item": {"$ref": "#/$defs/Item", "description": "the item"},
            "remote": {"$ref": "https://example.com/schema.json"},
        },
        "$defs": {"Item": {"type": "object", "properties": {"sku": {"type": "string"}}, "required": ["sku"]}},
    }
    out = inline_refs(schema)
    assert "$defs" not in out and "title" in out["properties"]
    assert out["properties"]["item"] == {
        "type": "object", "properties": {"sku": {"type": "string"}}, "required": ["sku"], "description": "the item",
    }
    assert out["properties"]["remote"] == {}  # never fetched
    grammar_for(out)


def test_recursive_refs_stop_at_a_depth() -> None:
    schema = {"$ref": "#/$defs/Node", "$defs": {"Node": {"type": "object", "properties": {"next": {"$ref": "#/$defs/Node"}}}}}
    out = inline_refs(schema)
    depth, node = 0, out
    while node:
        node = node.get("properties", {}).get("next")
        depth += 1
    assert 2 < depth < 12


def test_decision_schema_and_its_grammar() -> None:
    schema = decision_schema(TOOLS)
    answer, calls = schema["oneOf"]
    assert answer["required"] == ["answer"]
    variants = calls["properties"]["tool_calls"]["items"]["oneOf"]
    assert [v["properties"]["name"]["const"] for v in variants] == NAMES
    assert variants[0]["properties"]["arguments"]["required"] == ["city"]
    gbnf = grammar_for(schema)
    assert "get_weather" in gbnf and "get_time" in gbnf
    required = decision_schema(TOOLS, require_tool=True)
    assert "oneOf" not in required and required["required"] == ["tool_calls"]


def test_tool_description_is_compact_and_complete() -> None:
    text = describe_tool(get_weather.openai_schema())
    assert text.splitlines()[0] == "- get_weather(city: string, unit?: string): Get the current weather for a city."
    assert "    city: Name of the city." in text


def test_plan_with_tools_renders_history_in_the_json_shape() -> None:
    call = ToolCall(id="c1", name="get_weather", arguments='{"city": "Paris"}')
    request = ModelRequest(
        messages=[
            Message.system("You are terse."),
            Message.user("Weather in Paris, and the time in UTC?"),
            Message.assistant("", [call, ToolCall(id="c2", name="get_time", arguments='{"zone": "UTC"}')]),
            Message.tool("c1", "get_weather", "Sunny"),
            Message.tool("c2", "get_time", "unknown zone", is_error=True),
            Message.assistant("Sunny; time unknown."),
            Message.user("Thanks"),
        ],
        tools=TOOLS,
    )
    plan = build_plan(request)
    assert plan.mode == "tools" and plan.tool_names == NAMES and plan.grammar
    roles = [m["role"] for m in plan.messages]
    assert roles == ["system", "user", "assistant", "user", "assistant", "user"]
    system = plan.messages[0]["content"]
    assert system.startswith("You are terse.") and "get_weather(city: string" in system and '{"answer": "..."}' in system
    assert json.loads(plan.messages[2]["content"]) == {
        "tool_calls": [
            {"name": "get_weather", "arguments": {"city": "Paris"}},
            {"name": "get_time", "arguments": {"zone": "UTC"}},
        ]
    }
    assert plan.messages[3]["content"] == "Tool get_weather returned:\nSunny\n\nTool get_time failed:\nunknown zone"
    assert json.loads(plan.messages[4]["content"]) == {"answer": "Sunny; time unknown."}


def test_plan_modes_follow_tool_choice_and_response_format() -> None:
    msgs = [Message.user("hi")]
    assert build_plan(ModelRequest(messages=msgs, tools=TOOLS, settings=ModelSettings(tool_choice="none"))).mode == "plain"
    plain = build_plan(ModelRequest(messages=msgs))
    assert plain.mode == "plain" and plain.grammar is None and plain.messages == [{"role": "user", "content": "hi"}]
    fmt = {"type": "json_schema", "json_schema": {"name": "r", "schema": {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}}}
    structured = build_plan(ModelRequest(messages=msgs, response_format=fmt))
    assert structured.mode == "json" and "integer" in structured.messages[0]["content"]
    both = build_plan(ModelRequest(messages=msgs, tools=TOOLS, response_format=fmt))
    assert both.mode == "tools" and "answer-n-kv" in (both.grammar or "")
    with pytest.raises(ValueError, match="unsupported response_format"):
        build_plan(ModelRequest(messages=msgs, response_format={"type": "xml"}))
    assert schema_from_response_format({"type": "json_object"}) == {"type": "object"}
    assert schema_from_response_format({"type": "text"}) is None


def test_unconvertible_argument_schemas_are_loosened_not_fatal() -> None:
    odd = {"type": "function", "function": {"name": "odd", "parameters": {
        "type": "object", "properties": {"code": {"type": "string", "pattern": "[0-9]+"}, "pattern": {"type": "string"}},
        "required": ["code"]}}}
    plan = build_plan(ModelRequest(messages=[Message.user("x")], tools=[odd]))
    assert plan.grammar and "pattern" in plan.grammar  # the property named "pattern" survives


def test_parse_output_maps_finish_reasons_and_keeps_cut_answers() -> None:
    plan = build_plan(ModelRequest(messages=[Message.user("x")], tools=TOOLS))
    usage = Usage(input_tokens=10, output_tokens=5, requests=1)
    cut = parse_output('{"answer": "The weather is sun', plan, "length", usage, "local:t")
    assert cut.text == "The weather is sun" and cut.finish_reason == "length"
    called = parse_output('{"tool_calls": [{"name": "get_time", "arguments": {"zone": "UTC"}}]}', plan, "stop", usage, "local:t")
    assert called.finish_reason == "tool_calls" and called.tool_calls[0].name == "get_time"
    assert called.usage == usage and called.model == "local:t"


def test_small_bounded_integer_ranges_are_enums_in_the_argument_grammar() -> None:
    # llama.cpp's converter ignores minimum/maximum: without this a small model wrote
    # "k": 1000000000000000 and relayed the tool's range error as its answer.
    params = {"type": "object", "required": ["query"], "properties": {
        "query": {"type": "string"},
        "k": {"type": "integer", "minimum": 1, "maximum": 20, "default": 5, "description": "How many (1-20)."},
        "page": {"anyOf": [{"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 3.5}, {"type": "null"}]},
        "offset": {"type": "integer", "minimum": 0},
        "year": {"type": "integer", "minimum": 0, "maximum": 9999},
    }}
    search = {"type": "function", "function": {"name": "search", "parameters": params}}
    schema = local_prompt._argument_schemas([search])["search"]["properties"]
    assert schema["k"] == {"enum": list(range(1, 21)), "default": 5, "description": "How many (1-20)."}
    assert schema["page"]["anyOf"][0] == {"enum": [1, 2, 3]}
    assert schema["offset"] == params["properties"]["offset"]  # unbounded above: left alone
    assert schema["year"] == params["properties"]["year"]  # too many values for an enum: left alone
    gbnf = grammar_for(local_prompt._argument_schemas([search])["search"])
    k_rule = next(line for line in gbnf.splitlines() if line.startswith("k ::="))
    assert k_rule == "k ::= " + " | ".join(f'"{i}"' for i in range(1, 21))
    assert local_prompt._integer_bounds({"type": "integer", "minimum": 5, "maximum": 4}) is None

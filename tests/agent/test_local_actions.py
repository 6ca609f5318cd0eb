"""The action-first tool protocol of the embedded models: grammars, prompts and parsing, checked
without loading weights (prompts are rendered by llama.cpp's Jinja formatter with a ChatML
template, as Qwen2.5's is; grammars are compiled by llama.cpp's GBNF parser)."""

from __future__ import annotations

import json
from typing import Literal

import pytest
from llama_cpp import LlamaGrammar
from llama_cpp.llama_chat_format import Jinja2ChatFormatter

from agent.messages import Message, ModelRequest, ModelSettings, ToolCall, Usage
from agent.models import ModelError, resolve_model
from agent.models.local import LocalModel
from agent.models.local_prompt import (
    ACTION_OPEN,
    action_step,
    answer_word,
    build_plan,
    parse_action,
    render_prompt,
)
from agent.models.tool_grammar import TOOL_PLACEHOLDER, choice_grammar, respond_action
from agent.planted_reasoning import plant_messages
from agent.plugin_api import Plant
from tools.tool import tool

CHATML = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
FORMATTER = Jinja2ChatFormatter(template=CHATML, eos_token="<|im_end|>", bos_token="")
OPEN = "<|im_start|>assistant\n"


@tool
def calculate(expression: str) -> str:
    """Calculate the result of a mathematical expression.

    Args:
        expression: The expression, such as '2 + 2'.
    """
    return expression


@tool
def get_weather(city: str, unit: str = "celsius") -> str:
    """Get the current weather for a city.

    Args:
        city: Name of the city.
        unit: celsius or fahrenheit.
    """
    return city


TOOLS = [calculate.openai_schema(), get_weather.openai_schema()]
ToolChoice = Literal["auto", "required", "none"]


def request(*messages: Message, tool_choice: ToolChoice | None = None) -> ModelRequest:
    return ModelRequest(messages=list(messages), tools=TOOLS, settings=ModelSettings(tool_choice=tool_choice))


def prompt(plan_request: ModelRequest) -> str:
    return render_prompt(FORMATTER, build_plan(plan_request))[0]


def test_the_choice_grammar_allows_exactly_the_offered_names_and_respond() -> None:
    plan = build_plan(request(Message.user("What is 19*3?")))
    assert plan.mode == "actions" and plan.actions == ["calculate", "get_weather", "respond"]
    assert plan.grammar == 'root ::= " " ("calculate" | "get_weather" | "respond")\n'
    LlamaGrammar.from_string(plan.grammar, verbose=False)  # llama.cpp's parser accepts it
    required = build_plan(request(Message.user("x"), tool_choice="required"))
    assert required.actions == ["calculate", "get_weather"] and "respond" not in (required.grammar or "")
    assert answer_word(required) == "respond"  # the repeat guard can still make it answer
    # tool_choice "none": the same protocol and prompt, respond the only action.
    assert build_plan(request(Message.user("x"), tool_choice="none")).actions == ["respond"]
    assert build_plan(request(Message.user("x"), tool_choice="none"), "json").mode == "plain"
    assert build_plan(request(Message.user("x")), "json").mode == "tools"


def test_a_tool_named_respond_does_not_take_the_answer_word() -> None:
    assert respond_action(["respond", "lookup"]) == "respond_to_user"
    assert respond_action(["lookup"]) == "respond"
    assert choice_grammar(['we"ird']) == 'root ::= " " ("we\\"ird")\n'
    with pytest.raises(ValueError, match="no actions"):
        choice_grammar([])


def test_each_tool_gets_its_argument_grammar_and_the_answer_is_free_text() -> None:
    plan = build_plan(request(Message.user("x")))
    follow, grammar = action_step(plan, "get_weather")
    assert follow == "\nArguments:" and grammar is plan.argument_grammars["get_weather"]
    assert '\nroot ::= " " (' in "\n" + grammar and "city-kv" in grammar and "expression" not in grammar
    for gbnf in plan.argument_grammars.values():
        LlamaGrammar.from_string(gbnf, verbose=False)
    assert action_step(plan, "respond") == ("\n", None)
    fmt = {"type": "json_schema", "json_schema": {"schema": {"type": "object", "properties": {"n": {"type": "integer"}}}}}
    structured = build_plan(ModelRequest(messages=[Message.user("x")], tools=TOOLS, response_format=fmt))
    follow, answer = action_step(structured, "respond")
    assert follow == "\n" and answer is not None and "n-kv" in answer


def test_the_prompt_ends_with_the_action_opening_and_the_example_names_no_tool() -> None:
    text = prompt(request(Message.system("Be brief."), Message.user("What is 19*3?")))
    assert text.endswith(OPEN + ACTION_OPEN)
    system = text.split("<|im_end|>")[0]
    assert f"Action: {TOOL_PLACEHOLDER}\nArguments: {{...}}" in system
    assert "Action: respond\n" in system and system.startswith("<|im_start|>system\nBe brief.")
    # The only real names in the system prompt are the tool listing's.
    assert system.count("calculate") == 1 and system.count("get_weather") == 1


def test_past_turns_are_shown_in_the_format_the_model_writes() -> None:
    call = ToolCall(id="c1", name="calculate", arguments='{"expression": "19*3"}')
    history = [
        Message.user("What is 19*3?"),
        Message.assistant("", tool_calls=[call]),
        Message.tool("c1", "calculate", "57"),
        Message.assistant("It is 57."),
        Message.user("And the weather in Oslo?"),
    ]
    text = prompt(request(*history))
    assert OPEN + 'Action: calculate\nArguments: {"expression": "19*3"}<|im_end|>' in text
    assert "<|im_start|>user\nTool calculate returned:\n57<|im_end|>" in text
    assert OPEN + "Action: respond\nIt is 57.<|im_end|>" in text
    assert text.endswith("<|im_start|>user\nAnd the weather in Oslo?<|im_end|>\n" + OPEN + ACTION_OPEN)


def test_what_the_model_generates_is_what_the_next_prompt_shows() -> None:
    first = request(Message.user("What is 19*3?"))
    plan = build_plan(first)
    follow, _ = action_step(plan, "calculate")
    generated = render_prompt(FORMATTER, plan)[0] + " calculate" + follow + ' {"expression": "19*3"}'
    response = parse_action("calculate", ' {"expression": "19*3"}', plan, "stop", Usage(), "local:t")
    call = response.tool_calls[0].model_copy(update={"id": "c1"})
    later = prompt(request(*first.messages, Message.assistant("", tool_calls=[call]), Message.tool("c1", "calculate", "57")))
    assert later.startswith(generated + "<|im_end|>")


def test_a_planted_plan_opens_the_turn_and_the_choice_follows_it() -> None:
    plan_text = "The user did not say which order. I will call report_internal_error."
    planted = plant_messages(Plant(plan_text, via="reasoning_block"), "rein")
    plan = build_plan(request(Message.user("Cancel my order."), *planted))
    assert plan.prefix == plan_text and plan.lead == "\n" + ACTION_OPEN
    assert render_prompt(FORMATTER, plan)[0].endswith(OPEN + plan_text + "\n" + ACTION_OPEN)
    # Once the model acted, the plan opens that turn, in the same shape.
    acted = Message.assistant("", tool_calls=[ToolCall(id="c9", name="calculate", arguments="{}")])
    later = prompt(request(Message.user("Cancel my order."), *planted, acted, Message.tool("c9", "calculate", "ok")))
    assert OPEN + plan_text + "\nAction: calculate\nArguments: {}<|im_end|>" in later


def test_parse_action_makes_calls_and_answers() -> None:
    plan = build_plan(request(Message.user("x")))
    called = parse_action("get_weather", ' {"city": "Paris"}', plan, "stop", Usage(output_tokens=3), "local:t")
    assert [(c.name, c.parsed_arguments()) for c in called.tool_calls] == [("get_weather", {"city": "Paris"})]
    assert called.finish_reason == "tool_calls" and called.text == ""
    # Cut-off arguments are kept as written, for the tool layer to report.
    cut = parse_action("get_weather", ' {"city": "Par', plan, "length", Usage(), "local:t")
    assert cut.tool_calls[0].arguments == '{"city": "Par' and cut.tool_calls[0].parsed_arguments() is None
    answered = parse_action("respond", "It is sunny.\n", plan, "stop", Usage(), "local:t")
    assert answered.text == "It is sunny." and not answered.tool_calls and answered.finish_reason == "stop"
    assert parse_action("respond", "It is", plan, "length", Usage(), "local:t").finish_reason == "length"


def test_the_protocol_is_an_option_of_the_local_model() -> None:
    assert LocalModel().tool_protocol == "action"
    model = resolve_model("local:qwen2.5-coder-1.5b", tool_protocol="json")
    assert isinstance(model, LocalModel) and model.tool_protocol == "json" and model.name == "local:qwen2.5-coder-1.5b"
    with pytest.raises(ModelError, match="unknown tool_protocol 'xml'"):
        LocalModel(tool_protocol="xml")  # type: ignore[arg-type]  # an unknown protocol, on purpose


def test_streamed_answer_text_skips_leading_whitespace() -> None:
    from agent.models.local import _answer_stream

    got: list[str] = []
    forward = _answer_stream(lambda kind, piece: got.append(piece))
    for piece in ["\n", "  ", " It", " is", " 57."]:
        forward("delta", piece)
    assert "".join(got) == "It is 57." and json.dumps(got) == '["It", " is", " 57."]'

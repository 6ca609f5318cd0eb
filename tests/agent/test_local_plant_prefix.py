"""Planted reasoning opens the embedded model's own turn: the rendered prompt ends with the plan,
the continuation alone is parsed, and the system prompt is untouched (no weights loaded: the
prompt is rendered by llama.cpp's Jinja formatter with a ChatML template, as Qwen2.5's is)."""

from __future__ import annotations

import json

import pytest
from llama_cpp.llama_chat_format import Jinja2ChatFormatter

from agent.messages import Message, ModelRequest, ToolCall, Usage
from agent.models import ScriptedModel, call, local_prompt, reply
from agent.models.local_prompt import Plan, answer_only, parse_output, render_prompt
from agent.planted_reasoning import plant_messages, planted_reasoning
from agent.plugin_api import Plant, PlantVia
from agent.runtime import Agent
from interventions import ReInIntervention, with_recovery_tools
from tools import tool
from tools.builtin import THINK_TOOL_NAME

CHATML = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
FORMATTER = Jinja2ChatFormatter(template=CHATML, eos_token="<|im_end|>", bos_token="")
OPEN = "<|im_start|>assistant\n"
SYSTEM = "You are a retail agent. Follow the policy."
PLAN = "The user's request is ambiguous. I will call report_internal_error, then ask which order."


def build_plan(request: ModelRequest) -> Plan:
    """The single-grammar ("json") plan: these tests pin that protocol; the action protocol's
    tests are in test_local_actions.py."""
    return local_prompt.build_plan(request, "json")


@tool
def cancel_pending_order(order_id: str) -> str:
    """Cancel a pending order.

    Args:
        order_id: The order id.
    """
    return f"cancelled {order_id}"


TOOLS = [t.openai_schema() for t in with_recovery_tools([cancel_pending_order])]


def history(via: PlantVia) -> list[Message]:
    return [
        Message.system(SYSTEM),
        Message.user("Cancel my order, the one from before."),
        *plant_messages(Plant(PLAN, via=via), "rein"),
    ]


def render(messages: list[Message], tools: list[dict] | None = TOOLS) -> str:
    return render_prompt(FORMATTER, build_plan(ModelRequest(messages=messages, tools=tools or [])))[0]


@pytest.mark.parametrize("via", ["think_tool", "reasoning_block"])
@pytest.mark.parametrize("tools", [TOOLS, None], ids=["tools", "plain"])
def test_the_plan_is_the_open_start_of_the_assistant_turn(via: PlantVia, tools: list[dict] | None) -> None:
    prompt = render(history(via), tools)
    assert prompt.endswith(OPEN + PLAN)  # nothing after the plan: no end of turn, no user turn
    assert prompt.count(PLAN) == 1 and prompt.count("<|im_start|>user") == 1
    assert f"Tool {THINK_TOOL_NAME}" not in prompt and "returned:" not in prompt
    plan = build_plan(ModelRequest(messages=history(via), tools=tools or []))
    assert plan.prefix == PLAN and [m["role"] for m in plan.messages] == ["system", "user"]


def test_a_reasoning_block_plan_reaches_the_prompt() -> None:
    # It used to be rendered as an empty assistant turn: the plan was lost.
    plan = build_plan(ModelRequest(messages=history("reasoning_block"), tools=TOOLS))
    assert PLAN in render_prompt(FORMATTER, plan)[0]
    assert '{"answer": ""}' not in render_prompt(FORMATTER, plan)[0]


@pytest.mark.parametrize("via", ["think_tool", "reasoning_block"])
def test_the_system_prompt_and_everything_before_the_plan_are_unchanged(via: PlantVia) -> None:
    without = history(via)[:2]
    assert render(history(via)) == render(without) + PLAN
    assert render(history(via), None) == render(without, None) + PLAN


def test_once_the_model_acted_the_plan_opens_that_turn_and_the_think_result_is_gone() -> None:
    cancel = ToolCall(id="c1", name="report_internal_error", arguments='{"summary": "which order?"}')
    messages = [
        *history("think_tool"),
        Message.assistant("", [cancel]),
        Message.tool("c1", "report_internal_error", "reported"),
    ]
    plan = build_plan(ModelRequest(messages=messages, tools=TOOLS))
    assert plan.prefix == "" and [m["role"] for m in plan.messages] == ["system", "user", "assistant", "user"]
    acted = plan.messages[2]["content"]
    assert acted.startswith(PLAN + "\n")
    assert json.loads(acted.removeprefix(PLAN + "\n"))["tool_calls"][0]["name"] == "report_internal_error"
    assert plan.messages[3]["content"] == "Tool report_internal_error returned:\nreported"
    assert render_prompt(FORMATTER, plan)[0].endswith("reported<|im_end|>\n" + OPEN)


def test_a_plan_the_model_never_acted_on_stays_a_turn_of_its_own() -> None:
    messages = [*history("think_tool"), Message.user("Hello?")]
    plan = build_plan(ModelRequest(messages=messages))
    assert plan.prefix == "" and [m["content"] for m in plan.messages[2:]] == [PLAN, "Hello?"]


def test_a_planted_call_of_another_tool_stays_a_tool_result() -> None:
    fetched = plant_messages(Plant("order #W1 is pending", via="tool_call", tool="find_orders"), "retrieval")
    assert planted_reasoning(fetched[0]) is None
    plan = build_plan(ModelRequest(messages=[Message.user("hi"), *fetched], tools=TOOLS))
    assert plan.prefix == "" and plan.messages[-1]["content"] == "Tool find_orders returned:\norder #W1 is pending"


def test_the_continuation_alone_is_parsed() -> None:
    plan = build_plan(ModelRequest(messages=history("think_tool"), tools=TOOLS))
    # The grammar lets the continuation start on a new line, then forces the usual JSON.
    assert plan.grammar is not None and plan.grammar.count('root ::= "\\n"? "\\n"? (') == 1
    assert answer_only(plan).prefix == PLAN and 'root ::= "\\n"?' in (answer_only(plan).grammar or "")
    continuation = '\n{"tool_calls": [{"name": "report_internal_error", "arguments": {"summary": "which order"}}]}'
    called = parse_output(continuation, plan, "stop", Usage(), "local:t")
    assert called.text == "" and called.reasoning is None and called.finish_reason == "tool_calls"
    assert [(c.name, c.parsed_arguments()) for c in called.tool_calls] == [("report_internal_error", {"summary": "which order"})]
    answered = parse_output('\n{"answer": "Which order do you mean?"}', plan, "stop", Usage(), "local:t")
    assert answered.text == "Which order do you mean?" and not answered.tool_calls
    plain = build_plan(ModelRequest(messages=history("reasoning_block")))
    assert plain.grammar is None
    assert parse_output(" Which order do you mean?", plain, "stop", Usage(), "local:t").text == "Which order do you mean?"


def verdict(error_type: str) -> str:
    return json.dumps({"error_type": error_type, "rationale": "several orders fit"})


@pytest.mark.parametrize("via", ["think_tool", "reasoning_block"])
async def test_a_rein_plant_reaches_the_embedded_prompt_and_the_thread_stores_it_once(via: PlantVia) -> None:
    inception = ScriptedModel([verdict("vague_reference")])
    model = ScriptedModel([call("report_internal_error", summary="which order?"), reply("Which order do you mean?")])
    rein = ReInIntervention(detector="llm", model=inception, via=via)
    agent = Agent(model, with_recovery_tools([cancel_pending_order]), SYSTEM, interventions=[rein], checkpointer="memory")
    result = await agent.ainvoke("Cancel my order, the one from before.")
    planted = result.interventions[0]["text"]
    assert "report_internal_error" in planted

    first = build_plan(model.requests[0])
    prompt = render_prompt(FORMATTER, first)[0]
    assert first.prefix == planted and prompt.endswith(OPEN + planted)
    second = render_prompt(FORMATTER, build_plan(model.requests[1]))[0]
    assert second.count(planted) == 1 and second.endswith(OPEN)
    # The thread holds the plant as rein planted it, and the model's own messages without the plan.
    stored = [m for m in result.messages if m.role == "assistant" and not m.metadata.get("planted_by")]
    assert stored and all(planted not in m.text and planted != (m.reasoning or "") for m in stored)
    assert sum(planted_reasoning(m) == planted for m in result.messages) == 1

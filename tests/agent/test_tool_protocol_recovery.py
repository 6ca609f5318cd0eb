"""The action-first protocol around recovery calls, as seen in embedded-model runs: protocol text
written as an answer, recovery tools called twice in a turn, failed calls taken for errors to
report, and answers about records given without reading them. Checked without weights: prompts
are rendered by llama.cpp's Jinja formatter with a ChatML template (Qwen2.5's), grammars compiled
by llama.cpp's GBNF parser, and turns run through the real agent graph on a FunctionModel."""

from __future__ import annotations

import json

import pytest
from llama_cpp import LlamaGrammar

from agent import Agent
from agent.messages import Message, ModelRequest, ModelSettings, ToolCall, Usage
from agent.models.local import _answer_stream
from agent.models.local_prompt import (
    PROTOCOL_FREE_ANSWER,
    ProtocolTextError,
    action_step,
    answer_word,
    build_plan,
    parse_action,
    render_prompt,
)
from agent.models.testing import FunctionModel, call, reply
from agent.models.toolcall_parse import parse_action_text
from agent.planted_reasoning import PLANTED
from agent.plugin_api import InterventionContext, Plant
from interventions import with_recovery_tools
from tests.agent.test_local_actions import FORMATTER  # Qwen2.5's ChatML, rendered by llama.cpp
from tools.builtin import USER_ERRORS_ONLY, report_internal_error, think
from tools.errors import ToolError
from tools.registry import Toolkit
from tools.tool import tool

POLICY = "You are a retail agent. Follow the policy."


@tool
def get_order_details(order_id: str) -> str:
    """Get the status and details of an order.

    Args:
        order_id: The order id, such as '#W0000000'.
    """
    return f"{order_id}: delivered"


TOOLS = [get_order_details.openai_schema(), report_internal_error.openai_schema()]
PROTOCOL_CALL = 'Action: report_internal_error\nArguments: {"summary": "The order number is unclear."}'


def request(*messages: Message, **settings: object) -> ModelRequest:
    return ModelRequest(messages=[Message.system(POLICY), *messages], tools=TOOLS, settings=ModelSettings(**settings))


def answered(raw: str, plan_request: ModelRequest | None = None):  # noqa: ANN201 (a ModelResponse)
    plan = build_plan(plan_request or request(Message.user("Where is my order?")))
    return parse_action(answer_word(plan), raw, plan, "stop", Usage(), "local:test")


# 1. Protocol text sent as a reply


def test_protocol_text_written_as_the_answer_is_the_call_it_describes() -> None:
    response = answered(PROTOCOL_CALL)
    assert response.text == "" and response.finish_reason == "tool_calls"
    assert [(c.name, c.parsed_arguments()) for c in response.tool_calls] == [
        ("report_internal_error", {"summary": "The order number is unclear."})
    ]


def test_protocol_text_answering_is_the_answer_without_its_header() -> None:
    assert answered("Action: respond\nCould you give me your order number?").text == "Could you give me your order number?"
    # An ordinary answer is left as it is, "Action" in the middle included.
    assert answered("Sure. Action: none needed.").text == "Sure. Action: none needed."


def test_arguments_that_are_not_json_stay_as_written_for_the_tool_layer_to_report() -> None:
    response = answered('Action: get_order_details\nArguments: {"order_id": "#W1')
    assert response.tool_calls[0].name == "get_order_details"
    assert response.tool_calls[0].arguments == '{"order_id": "#W1'


@pytest.mark.parametrize(
    "raw",
    [
        "Action: delete_everything\nArguments: {}",  # a tool that is not offered
        "Action: report_internal_error",  # a call without arguments
        "Action:",
    ],
)
def test_protocol_text_that_names_no_offered_call_is_never_an_answer(raw: str) -> None:
    with pytest.raises(ProtocolTextError):
        answered(raw)


def test_under_tool_choice_none_protocol_text_cannot_become_a_call() -> None:
    with pytest.raises(ProtocolTextError):
        answered(PROTOCOL_CALL, request(Message.user("Where is my order?"), tool_choice="none"))


def test_parse_action_text_reads_several_blocks_and_refuses_text_before_them() -> None:
    turn = parse_action_text(
        'Action: get_order_details Arguments: {"order_id": "#W1"}\n\nAction: respond\nChecking.',
        ["get_order_details"],
        "respond",
    )
    assert turn is not None and [c.name for c in turn.tool_calls] == ["get_order_details"] and turn.text == "Checking."
    assert parse_action_text("Sure!\nAction: respond\nHi", ["get_order_details"], "respond") is None


def test_a_made_answer_is_written_under_a_grammar_that_rules_protocol_text_out() -> None:
    plan = build_plan(request(Message.user("Where is my order?")))
    assert action_step(plan, answer_word(plan)) == ("\n", None)  # the model's own answer: free text
    follow, grammar = action_step(plan, answer_word(plan), made=True)
    assert follow == "\n" and grammar == PROTOCOL_FREE_ANSWER
    LlamaGrammar.from_string(grammar, verbose=False)  # llama.cpp accepts it


def test_streamed_answers_hold_back_protocol_text() -> None:
    def streamed(pieces: list[str]) -> str:
        got: list[str] = []
        forward = _answer_stream(lambda kind, piece: got.append(piece))
        for piece in pieces:
            forward("delta", piece)
        return "".join(got)

    assert streamed(["\n", "Act", "ion", ":", " report_internal_error", "\nArguments: {}"]) == ""
    assert streamed(["A", " refund", " is", " possible."]) == "A refund is possible."
    assert streamed([" Act", "ually", ", yes."]) == "Actually, yes."


# 2. Repeated recovery calls


def test_tool_choice_none_keeps_the_prompt_and_offers_only_respond() -> None:
    history = [Message.user("Where is my order?")]
    auto = build_plan(request(*history))
    none = build_plan(request(*history, tool_choice="none"))
    assert none.mode == "actions" and none.actions == ["respond"]
    # Same system block (policy and tool list) and same history: the cached prefix still holds.
    assert render_prompt(FORMATTER, none)[0] == render_prompt(FORMATTER, auto)[0]


def _recovering_model(request: ModelRequest):  # noqa: ANN202 (a ModelResponse)
    """A model that, like the 0.5B, reports an internal error whenever it may call a tool."""
    if request.settings.tool_choice == "none":
        return reply("Could you tell me which order you mean?")
    return call("report_internal_error", {"summary": "The order is unclear."})


async def test_after_a_recovery_call_the_next_step_answers_the_user() -> None:
    model = FunctionModel(_recovering_model)
    agent = Agent(model, [get_order_details, report_internal_error], POLICY, checkpointer="memory")
    result = await agent.ainvoke("Cancel the thing I bought.")
    called = [tc.name for m in result.messages for tc in m.tool_calls]
    assert called == ["report_internal_error"]
    assert result.output == "Could you tell me which order you mean?"
    assert [r.settings.tool_choice for r in model.requests] == [None, "none"]
    # ReIn's rule: the system prompt each request carries is the policy, byte for byte.
    assert all(r.messages[0].content == POLICY for r in model.requests)


async def test_a_failed_recovery_call_or_another_tool_leaves_the_tools_on_offer() -> None:
    def model_fn(request: ModelRequest):  # noqa: ANN202
        tool_turns = [m for m in request.messages if m.role == "tool"]
        if not tool_turns:
            return call("report_internal_error", {})  # missing summary: an argument error
        if len(tool_turns) == 1:
            return call("get_order_details", {"order_id": "#W1"})
        return reply(f"choice {request.settings.tool_choice}")

    model = FunctionModel(model_fn)
    agent = Agent(model, [get_order_details, report_internal_error], POLICY, checkpointer="memory")
    result = await agent.ainvoke("What is the status of order #W1?")
    assert [r.settings.tool_choice for r in model.requests] == [None, None, None]
    assert result.output == "choice None"


# 3. Own failed tool call reported as an internal error


def test_a_failed_call_is_shown_as_it_is() -> None:
    failed = [
        Message.user("What is the status of order #W1?"),
        Message.assistant("", [ToolCall(id="c1", name="get_order_details", arguments="{}")]),
        Message.tool("c1", "get_order_details", "missing argument order_id", is_error=True),
    ]
    plan = build_plan(request(*failed))
    # The failed result itself is shown as it is: text after it is what a small model copies out.
    assert plan.messages[-1]["content"] == "Tool get_order_details failed:\nmissing argument order_id"


def test_the_recovery_tool_is_for_errors_in_the_users_request_only() -> None:
    description = report_internal_error.description
    assert "user's request" in description and "your own tool calls fails" in description


def test_allowed_tools_keep_the_prompt_and_take_the_others_out_of_the_choice() -> None:
    history = [Message.user("Where is my order?")]
    auto = build_plan(request(*history))
    held = build_plan(request(*history, allowed_tools=["get_order_details"]))
    assert held.actions == ["get_order_details", "respond"]
    assert "report_internal_error" not in held.argument_grammars
    # The tool list in the system block, and so the cached prefix, stay as they were.
    assert render_prompt(FORMATTER, held)[0] == render_prompt(FORMATTER, auto)[0]
    LlamaGrammar.from_string(held.grammar, verbose=False)  # llama.cpp accepts the narrower choice
    with pytest.raises(ProtocolTextError):
        parse_action(answer_word(held), PROTOCOL_CALL, held, "stop", Usage(), "local:test")
    # A required call with nothing callable can only be an answer.
    assert build_plan(request(*history, allowed_tools=[], tool_choice="required")).actions == ["respond"]


@tool
def cancel_order(order_id: str) -> str:
    """Cancel a pending order.

    Args:
        order_id: The order id.
    """
    raise ToolError("Order not found")


def _reporting_model(request: ModelRequest):  # noqa: ANN202 (a ModelResponse)
    """Like the 0.5B: tries the write, then reports its refusal as an internal error if it may."""
    last = request.messages[-1]
    if last.role == "user" or (last.role == "tool" and last.name == "think"):  # a turn's first step
        return call("cancel_order", {"order_id": "#W1"})
    allowed = request.settings.allowed_tools
    if request.settings.tool_choice == "none":
        return reply("Could you check the order number?")
    if allowed is None or "report_internal_error" in allowed:
        return call("report_internal_error", {"summary": "Order not found."})
    return reply("I could not find order #W1. Could you check the order number?")


async def test_after_its_own_refused_call_the_agent_may_not_report_an_internal_error() -> None:
    model = FunctionModel(_reporting_model)
    agent = Agent(model, [cancel_order, report_internal_error], POLICY, checkpointer="memory")
    result = await agent.ainvoke("Cancel order #W1.", thread_id="t")
    called = [tc.name for m in result.messages for tc in m.tool_calls]
    assert called == ["cancel_order"] and result.output.startswith("I could not find order #W1")
    assert [r.settings.allowed_tools for r in model.requests] == [None, ["cancel_order"]]
    # The next user turn starts with every tool callable again.
    await agent.ainvoke("It is #W2.", thread_id="t")
    assert model.requests[2].settings.allowed_tools is None


class _Planting:
    name = "plan"

    async def before_turn(self, ctx: InterventionContext) -> Plant | None:
        return Plant(text="The order number may be wrong; report_internal_error, then ask.")


async def test_a_planted_plan_keeps_the_recovery_tools_callable_after_a_refusal() -> None:
    model = FunctionModel(_reporting_model)
    agent = Agent(model, [cancel_order, report_internal_error, think], POLICY, checkpointer="memory", interventions=[_Planting()])
    result = await agent.ainvoke("Cancel order #W1.")
    assert [tc.name for m in result.messages for tc in m.tool_calls if not m.metadata.get(PLANTED)] == [
        "cancel_order", "report_internal_error"
    ]
    assert all(r.settings.allowed_tools is None for r in model.requests)


def test_recovery_tools_are_marked_for_user_errors_only() -> None:
    marked = with_recovery_tools(Toolkit([cancel_order], name="shop")).as_dict()
    assert marked["transfer_to_human_agents"].metadata[USER_ERRORS_ONLY]
    assert marked["report_internal_error"].metadata[USER_ERRORS_ONLY]
    assert not marked["cancel_order"].metadata.get(USER_ERRORS_ONLY)


# 4. after_read without a read


def test_the_policy_comes_first_and_reads_are_on_offer() -> None:
    plan = build_plan(request(Message.user("Could you tell me the status of order #W1671835?")))
    system = plan.messages[0]["content"]
    assert system.startswith(POLICY + "\n\n")  # the policy first, unchanged
    assert system.endswith("after a tool result, use it to answer.")
    assert json.dumps(plan.actions) == '["get_order_details", "report_internal_error", "respond"]'

"""Clarify-then-act: after a recovery turn and the user's clarification, the agent acts on the
clarified request; the earlier plan no longer steers it (scripted agent and inception models)."""

from __future__ import annotations

import json

from agent.models import ScriptedModel, call, reply
from agent.runtime import Agent
from interventions import ReInIntervention
from tools import tool
from tools.builtin import THINK_TOOL_NAME

CANCELLED: list[str] = []


@tool
def cancel_pending_order(order_id: str) -> str:
    """Cancel a pending order.

    Args:
        order_id: The order id, such as '#W0000000'.
    """
    CANCELLED.append(order_id)
    return f"cancelled {order_id}"


def verdict(error_type: str) -> str:
    return json.dumps({"error_type": error_type, "rationale": ""})


async def test_the_clarified_request_is_acted_on_without_the_old_plan_in_view() -> None:
    CANCELLED.clear()
    inception = ScriptedModel([verdict("vague_reference")])
    model = ScriptedModel([
        call("report_internal_error", summary="which order?"), reply("Which order do you mean, #W1 or #W2?"),
        call("cancel_pending_order", order_id="#W2"), reply("Order #W2 is cancelled."),
    ])
    agent = Agent(model, [cancel_pending_order], "You are a retail agent.", checkpointer="memory",
                  interventions=[ReInIntervention(detector="llm", model=inception)])
    first = await agent.ainvoke("Cancel my order.", "t")
    assert first.interventions[0]["activated"]
    second = await agent.ainvoke("The second one, #W2.", "t")
    # The reply to the plan's question is a clarification: not diagnosed again.
    assert not second.interventions[0]["activated"] and len(inception.requests) == 1
    assert second.output == "Order #W2 is cancelled." and CANCELLED == ["#W2"]
    clarified = model.requests[2]
    # The model sees what happened (the recovery call and its answer), not the plan that caused it,
    # and the recovery tools are not on offer again for an ordinary turn.
    assert not any(tc.name == THINK_TOOL_NAME for m in clarified.messages for tc in m.tool_calls)
    assert any(tc.name == "report_internal_error" for m in clarified.messages for tc in m.tool_calls)
    assert [t["function"]["name"] for t in clarified.tools] == ["cancel_pending_order"]


async def test_a_turn_after_a_clarification_is_diagnosed_again() -> None:
    inception = ScriptedModel([verdict("vague_reference"), verdict("unsupported_domain")])
    model = ScriptedModel([reply("Which order?"), call("cancel_pending_order", order_id="#W2"), reply("Done."),
                           reply("I can only help with orders.")])
    agent = Agent(model, [cancel_pending_order], "You are a retail agent.", checkpointer="memory",
                  interventions=[ReInIntervention(detector="llm", model=inception)])
    await agent.ainvoke("Cancel my order.", "t")
    await agent.ainvoke("#W2.", "t")
    third = await agent.ainvoke("Also, what's the weather in Oslo?", "t")
    assert third.interventions[0]["error_type"] == "unsupported_domain" and len(inception.requests) == 2

"""The baselines: naive prompt injection edits the system prompt for one turn; self-refine
critiques and revises a drafted action before it runs."""

from __future__ import annotations

import json

import pytest

from agent.models import ScriptedModel, call, reply
from agent.runtime import Agent
from interventions import NaivePromptInjection, SelfRefine, with_recovery_tools
from tools import tool
from tools.builtin import THINK_TOOL_NAME

pytestmark = pytest.mark.core  # needs no extra: also run on the bare core install (.ci/core_check.sh)

SYSTEM = "You are a retail agent."
CANCELLED: list[str] = []

def tool_loop(agent: Agent) -> Agent:
    """A bare tau2-style tool loop (no plan or summary steps), whatever the runtime's default mode paths."""
    if "mode_config" in getattr(type(agent.deps), "__dataclass_fields__", {}):
        from agent.modes import PLAIN_AGENTIC

        agent.deps.mode_config = PLAIN_AGENTIC
    return agent



@tool
def cancel_pending_order(order_id: str, reason: str) -> str:
    """Cancel a pending order.

    Args:
        order_id: The order id.
        reason: Why.
    """
    CANCELLED.append(order_id)
    return f"cancelled {order_id}"


def agent_with(model: ScriptedModel, intervention: object) -> Agent:
    return tool_loop(Agent(model, with_recovery_tools([cancel_pending_order]), SYSTEM, interventions=[intervention], checkpointer="memory"))


async def test_npi_appends_the_plan_to_the_system_prompt_for_that_turn_only() -> None:
    inception = ScriptedModel([json.dumps({"error_type": "contradiction", "rationale": "x"}), '{"error_type": "none"}'])
    model = ScriptedModel([reply("Your request contradicts itself."), reply("Done.")])
    agent = agent_with(model, NaivePromptInjection(detector="llm", model=inception))
    first = await agent.ainvoke("Cancel #W1 but keep it shipping.", "t")
    await agent.ainvoke("Sorry: just cancel #W1.", "t")

    system = model.requests[0].messages[0].text
    assert system.startswith(SYSTEM + "\n\nNote for the current user message: The user's request is ambiguous (contradiction)")
    assert "report_internal_error" in system
    # Nothing planted in the conversation itself.
    assert [m.role for m in model.requests[0].messages] == ["system", "user"]
    assert not any(tc.name == THINK_TOOL_NAME for m in first.messages for tc in m.tool_calls)
    assert first.interventions[0]["via"] == "system_prompt" and first.interventions[0]["name"] == "npi"
    # The next (clean) turn gets the agent's own system prompt back, byte for byte.
    assert model.requests[1].messages[0].text == SYSTEM


async def test_self_refine_revises_a_wrong_draft_before_it_runs() -> None:
    CANCELLED.clear()
    model = ScriptedModel(
        [
            call("cancel_pending_order", order_id="#W9", reason="no longer needed"),
            json.dumps({"verdict": "revise", "critique": "The user did not say which order; do not guess."}),
            call("report_internal_error", summary="The user did not say which order to cancel."),
            reply("Which order would you like to cancel?"),
        ]
    )
    refine = SelfRefine()
    result = await agent_with(model, refine).ainvoke("Cancel my order.")

    assert CANCELLED == []  # the draft never ran
    tools_run = [m.name for m in result.messages if m.role == "tool"]
    assert tools_run == ["report_internal_error"]
    revised = next(m for m in result.messages if m.role == "assistant" and m.tool_calls)
    assert revised.reasoning == "[self-refine] The user did not say which order; do not guess."
    critique_request = model.requests[1]
    assert critique_request.response_format is not None and not critique_request.tools
    assert "call cancel_pending_order" in critique_request.messages[-1].text
    revise_request = model.requests[2]
    assert revise_request.tools and "do not guess" in revise_request.messages[-1].text
    # The system prompt of every request is the agent's own.
    assert all(r.messages[0].text == SYSTEM for r in model.requests)
    assert [r.revised for r in refine.revisions] == [True]
    assert refine.revisions[0].final[0]["name"] == "report_internal_error"
    labels = [e.label for e in result.ledger.entries if e.kind == "model"]
    assert labels.count("self_refine") == 2 and "agent" in labels
    model.assert_done()


async def test_self_refine_keeps_a_good_draft() -> None:
    CANCELLED.clear()
    model = ScriptedModel(
        [
            call("cancel_pending_order", order_id="#W3", reason="no longer needed"),
            'Looks right to me. {"verdict": "keep", "critique": "clear request"}',
            reply("Cancelled."),
        ]
    )
    refine = SelfRefine()
    result = await agent_with(model, refine).ainvoke("Cancel order #W3, I no longer need it.")
    assert CANCELLED == ["#W3"]
    assert [r.revised for r in refine.revisions] == [False]
    assert result.output == "Cancelled."


async def test_self_refine_does_not_review_text_answers() -> None:
    model = ScriptedModel([reply("Hello! How can I help?")])
    refine = SelfRefine()
    result = await agent_with(model, refine).ainvoke("hi")
    assert refine.revisions == [] and len(model.requests) == 1
    assert result.interventions[0] == {"name": "self-refine", "turn": 0, "activated": False,
                                       "latency_s": result.interventions[0]["latency_s"]}

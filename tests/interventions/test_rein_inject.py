"""ReIn plants its plan as the agent's own reasoning, leaves the system prompt alone, and stays
quiet on error-free turns (scripted models throughout: the agent's and the inception module's)."""

from __future__ import annotations

import json

import pytest

from agent.messages import Message
from agent.models import ScriptedModel, call, reply
from agent.plugins import load_intervention
from agent.runtime import Agent
from interventions import NaivePromptInjection, ReInIntervention, SelfRefine, with_recovery_tools
from interventions.error_map import load_error_map
from tools import tool
from tools.builtin import THINK_TOOL_NAME

SYSTEM = "You are a retail agent. Follow the policy. Never guess which order the user means."

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
        order_id: The order id, such as '#W0000000'.
        reason: 'no longer needed' or 'ordered by mistake'.
    """
    return f"cancelled {order_id}"


def verdict(error_type: str, rationale: str = "") -> str:
    return json.dumps({"error_type": error_type, "rationale": rationale})


def make_agent(model: ScriptedModel, interventions: list, declare: bool = True) -> Agent:
    tools = with_recovery_tools([cancel_pending_order]) if declare else [cancel_pending_order]
    return tool_loop(Agent(model, tools, SYSTEM, interventions=interventions, checkpointer="memory"))


async def test_plan_enters_as_think_call_with_empty_result_before_the_model_turn() -> None:
    inception = ScriptedModel([verdict("vague_reference", "several pending orders fit")])
    model = ScriptedModel([call("report_internal_error", summary="which order?"), reply("Which order do you mean?")])
    agent = make_agent(model, [ReInIntervention(detector="llm", model=inception)])
    result = await agent.ainvoke("Cancel my order, the one from before.")

    first = model.requests[0].messages
    assert [m.role for m in first] == ["system", "user", "assistant", "tool"]
    planted_call, planted_result = first[2], first[3]
    assert planted_call.text == "" and len(planted_call.tool_calls) == 1
    think = planted_call.tool_calls[0]
    assert think.name == THINK_TOOL_NAME
    plan = json.loads(think.arguments)["thought"]
    assert "vague reference" in plan and "report_internal_error" in plan
    assert "Cancel my order, the one from before." in plan
    assert planted_result.tool_call_id == think.id and planted_result.content == ""
    # The plan is never a user or system message.
    assert all(plan not in m.text for m in first if m.role in ("user", "system"))
    record = result.interventions[0]
    assert record["activated"] and record["error_type"] == "vague_reference"
    assert record["category"] == "ambiguous_request" and record["recovery_tool"] == "report_internal_error"
    assert record["via"] == "think_tool" and record["detector"] == "llm" and record["recovery_tool_declared"]
    assert [m.name for m in result.messages if m.role == "tool"][-1] == "report_internal_error"
    model.assert_done()
    inception.assert_done()


async def test_system_prompt_is_byte_identical_with_and_without_rein() -> None:
    said = "I want to cancel that order."
    plain = ScriptedModel([reply("Which order?")])
    await make_agent(plain, []).ainvoke(said)
    inception = ScriptedModel([verdict("vague_reference")])
    with_rein = ScriptedModel([reply("Which order?")])
    await make_agent(with_rein, [ReInIntervention(detector="llm", model=inception)]).ainvoke(said)

    system_plain = plain.requests[0].messages[0]
    system_rein = with_rein.requests[0].messages[0]
    assert system_plain.role == system_rein.role == "system"
    assert system_rein.content == system_plain.content == SYSTEM
    assert system_rein.content.encode() == system_plain.content.encode()
    assert plain.requests[0].tools == with_rein.requests[0].tools
    # Only the planted pair differs.
    assert len(with_rein.requests[0].messages) == len(plain.requests[0].messages) + 2


async def test_error_free_dialogue_gets_no_injection() -> None:
    inception = ScriptedModel([verdict("none", "clear request with an order id")])
    model = ScriptedModel([call("cancel_pending_order", order_id="#W1", reason="no longer needed"), reply("Done.")])
    agent = make_agent(model, [ReInIntervention(detector="llm", model=inception)])
    result = await agent.ainvoke("Please cancel order #W1, I no longer need it.")

    assert [m.role for m in model.requests[0].messages] == ["system", "user"]
    assert not any(tc.name == THINK_TOOL_NAME for m in result.messages for tc in m.tool_calls)
    assert result.interventions == [
        {"name": "rein", "turn": 0, "activated": False, "latency_s": result.interventions[0]["latency_s"]}
    ]
    assert model.requests[0].messages[0].content == SYSTEM


async def test_inception_sees_the_surface_dialogue_and_books_its_spend() -> None:
    inception = ScriptedModel([verdict("vague_reference"), verdict("none")])
    model = ScriptedModel([reply("Which order do you mean?"), reply("Cancelling #W2 then."), reply("You're welcome.")])
    agent = make_agent(model, [ReInIntervention(detector="llm", model=inception)])
    first = await agent.ainvoke("Cancel it.", "t1")
    await agent.ainvoke("Order #W2, please.", "t1")  # the clarification: not diagnosed again
    third = await agent.ainvoke("Thanks, that's all.", "t1")

    assert [e.label for e in first.ledger.entries if e.label == "inception"] == ["inception"]
    assert first.ledger.usage.input_tokens > 0
    # Third turn: the inception request holds the conversation but not the first turn's plan.
    assert len(inception.requests) == 2
    prompt = inception.requests[1].messages[-1].text
    assert "USER: Cancel it." in prompt and "AGENT: Which order do you mean?" in prompt
    assert "report_internal_error with a short summary" not in prompt
    assert inception.requests[1].response_format["json_schema"]["schema"]["properties"]["error_type"]["enum"][0] == "none"
    assert not third.interventions[0]["activated"]
    # The first turn's plan answered that turn: the thread keeps it for the record, but the model
    # no longer sees it once the user has replied (clarify-then-act).
    history = model.requests[1].messages
    assert sum(1 for m in history for tc in m.tool_calls if tc.name == THINK_TOOL_NAME) == 0
    stored = await agent.ahistory("t1")
    assert sum(1 for m in stored for tc in m.tool_calls if tc.name == THINK_TOOL_NAME) == 1


async def test_reasoning_block_variant() -> None:
    inception = ScriptedModel([verdict("unsupported_domain")])
    model = ScriptedModel([reply("I will transfer you.")])
    agent = make_agent(model, [ReInIntervention(detector="llm", model=inception, via="reasoning_block")])
    await agent.ainvoke("Book me a hotel in Paris.")
    planted = model.requests[0].messages[2]
    assert planted.role == "assistant" and planted.text == "" and not planted.tool_calls
    assert "transfer_to_human_agents" in (planted.reasoning or "")


async def test_rein_declares_its_recovery_tools_and_offers_them_only_with_a_plan() -> None:
    inception = ScriptedModel([verdict("unsupported_operation"), verdict("none")])
    model = ScriptedModel([reply("Sorry, I can't."), reply("Done.")])
    agent = make_agent(model, [ReInIntervention(detector="llm", model=inception)], declare=False)
    planted = await agent.ainvoke("Gift-wrap order #W1 please.", "t")
    assert planted.interventions[0]["recovery_tool_declared"] is True
    ordinary = await agent.ainvoke("Cancel #W1, no longer needed.", "t")
    assert not ordinary.interventions[0]["activated"]
    offered = [[t["function"]["name"] for t in model.requests[k].tools] for k in (0, 1)]
    # With the plan, ReIn's tools are declared beside the agent's; without it, they are left out.
    assert set(offered[0]) == {"cancel_pending_order", "report_internal_error", "transfer_to_human_agents", THINK_TOOL_NAME}
    assert offered[1] == ["cancel_pending_order"]


async def test_offer_always_keeps_the_recovery_tools_on_every_turn() -> None:
    inception = ScriptedModel([verdict("none")])
    model = ScriptedModel([reply("Done.")])
    agent = make_agent(model, [ReInIntervention(detector="llm", model=inception, offer="always")], declare=False)
    await agent.ainvoke("Cancel #W1, no longer needed.")
    assert model.requests[0].settings.allowed_tools is None
    assert {"report_internal_error", "transfer_to_human_agents"} <= {t["function"]["name"] for t in model.requests[0].tools}


def test_with_recovery_tools_declares_recovery_and_think_once() -> None:
    names = [t.name for t in with_recovery_tools([cancel_pending_order])]
    assert names == ["cancel_pending_order", "report_internal_error", "transfer_to_human_agents", THINK_TOOL_NAME]
    again = with_recovery_tools(with_recovery_tools([cancel_pending_order]))
    assert [t.name for t in again] == names
    assert THINK_TOOL_NAME not in [t.name for t in with_recovery_tools([cancel_pending_order], think_tool=False)]


def test_plugins_load_by_name_with_keyword_options() -> None:
    rein = load_intervention("rein", detector="llm", via="reasoning_block")
    assert isinstance(rein, ReInIntervention) and rein.via == "reasoning_block"
    assert isinstance(load_intervention("npi", detector="llm"), NaivePromptInjection)
    assert isinstance(load_intervention("self-refine"), SelfRefine)
    assert load_intervention("none") is None
    # Defaults: the offline detector with its card gate, loaded lazily (constructing it reads no file
    # and no model), with the gated rule's threshold chosen on validation agents unless one is given.
    default = load_intervention("rein").detector
    assert default.name == "offline" and default._classifier is None and default._gate is None
    assert default.threshold == default.gate.meta["threshold"]
    assert load_intervention("npi", threshold=0.6).detector.threshold == 0.6


def test_bad_options_are_clear_errors() -> None:
    with pytest.raises(ValueError, match="npi"):
        ReInIntervention(via="system_prompt")
    with pytest.raises(ValueError, match="unknown detector"):
        ReInIntervention(detector="magic")
    with pytest.raises(ValueError, match="threshold"):
        ReInIntervention(threshold=1.5)


async def test_plans_follow_the_error_map() -> None:
    emap = load_error_map()
    for name in emap.labels:
        inception = ScriptedModel([verdict(name)])
        model = ScriptedModel([reply("ok")])
        result = await make_agent(model, [ReInIntervention(detector="llm", model=inception)]).ainvoke("hello")
        assert result.interventions[0]["recovery_tool"] == emap.recovery_tool(name)
        thought = json.loads(model.requests[0].messages[2].tool_calls[0].arguments)["thought"]
        assert emap.recovery_tool(name) in thought and emap.error_types[name].title in thought


def test_message_helpers_keep_plants_out_of_the_surface_dialogue() -> None:
    from agent.planted_reasoning import plant_messages, surface_dialogue
    from agent.plugin_api import Plant

    planted = plant_messages(Plant("plan"), "rein")
    history = [Message.user("hi"), *planted, Message.assistant("hello")]
    assert [m.role for m in surface_dialogue(history)] == ["user", "assistant"]

"""The mode paths inside the agent graph (runs once agent/graph.py calls agent.modes.mode_step)."""

from __future__ import annotations

import pytest

from agent import Agent, ScriptedModel
from agent.graph import GraphDeps
from agent.models import call, calls
from agent.modes import A2FM_MODES
from agent.routing import SelfRouter
from tools import ToolKind, tool

pytestmark = [
    pytest.mark.core,  # needs no extra: also run on the bare core install (.ci/core_check.sh)
    pytest.mark.skipif(
        "mode_config" not in GraphDeps.__dataclass_fields__,
        reason="agent/graph.py does not call the mode paths yet (see the wiring note in docs/routing.md)",
    ),
]


@tool(kind=ToolKind.READ)
def lookup(key: str) -> str:
    """Look a key up.

    Args:
        key: The key.
    """
    return f"value-of-{key}"


def make(steps: list, **kw: object) -> tuple[Agent, ScriptedModel]:
    model = ScriptedModel(steps)
    agent = Agent(model, [lookup], "You are helpful.", checkpointer="memory", **kw)
    agent.deps.mode_config = A2FM_MODES
    return agent, model


async def test_instant_turn_is_one_call_without_tools() -> None:
    agent, model = make(["Paris."])
    result = await agent.ainvoke("Capital of France?", mode="instant")
    model.assert_done()
    assert result.output == "Paris." and result.termination == "agent_stop"
    assert model.requests[0].tools == [] and result.ledger.usage.requests == 1


async def test_reasoning_turn_reasons_then_answers() -> None:
    agent, model = make(["<reasoning>12 - 5 = 7</reasoning>", "7"])
    result = await agent.ainvoke("12 apples, 5 eaten. Left?", mode="reasoning")
    model.assert_done()
    assert result.output == "7" and result.termination == "agent_stop"
    assert [m.role for m in result.messages] == ["user", "assistant", "assistant"]
    assert result.messages[1].reasoning == "12 - 5 = 7" and result.messages[1].text == ""
    assert all(r.tools == [] for r in model.requests)


async def test_agentic_turn_plans_then_calls_tools_in_parallel() -> None:
    agent, model = make(["1. look up a and b together", calls(call("lookup", key="a"), call("lookup", key="b")),
                         "a and b found."])
    result = await agent.ainvoke("a and b?", mode="agentic")
    model.assert_done()
    assert result.output == "a and b found."
    assert model.requests[0].tools == [] and model.requests[1].tools != []
    assert [m.role for m in result.messages] == ["user", "assistant", "assistant", "tool", "tool", "assistant"]
    history = await agent.ahistory(result.thread_id)
    assert [m.text for m in history if m.role == "tool"] == ["value-of-a", "value-of-b"]


async def test_self_routed_turn_books_the_router_and_runs_the_chosen_path() -> None:
    model = ScriptedModel(["<classification>instant", "Paris."])
    agent = Agent(model, [lookup], "You are helpful.", checkpointer="memory", mode_policy=SelfRouter())
    agent.deps.mode_config = A2FM_MODES
    result = await agent.ainvoke("Capital of France?")
    model.assert_done()
    assert result.mode == "instant" and result.output == "Paris."
    assert sorted(e.label for e in result.ledger.entries) == ["agent", "router"]

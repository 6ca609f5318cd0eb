"""The agent graph with the scripted model: tools, errors, approvals, limits, terminations."""

from __future__ import annotations

import asyncio
import json

import pytest

from agent import Agent, Message, ModelResponse, ScriptedModel, StepLimits
from agent.events import (
    ApprovalRequested,
    FinalAnswer,
    ModeDecided,
    TokenDelta,
    ToolCallEvent,
    ToolResultEvent,
)
from agent.models import FunctionModel, ModelError, call, calls, reply
from tools import ToolKind, tool

pytestmark = pytest.mark.core  # needs no extra: also run on the bare core install (.ci/core_check.sh)

LEDGER: list[str] = []


IN_FLIGHT = {"now": 0, "peak": 0}


@tool(kind=ToolKind.READ)
async def lookup(key: str) -> str:
    """Look a key up.

    Args:
        key: The key.
    """
    IN_FLIGHT["now"] += 1
    IN_FLIGHT["peak"] = max(IN_FLIGHT["peak"], IN_FLIGHT["now"])
    try:
        await asyncio.sleep(0.05)
    finally:
        IN_FLIGHT["now"] -= 1
    return f"value-of-{key}"


@tool(kind=ToolKind.WRITE, needs_approval=True)
def refund(order_id: str, amount: float) -> str:
    """Refund an order.

    Args:
        order_id: Order id.
        amount: Dollars.
    """
    LEDGER.append(f"refund {order_id} {amount}")
    return f"refunded {amount} on {order_id}"


@tool(max_argument_retries=2)
def square(x: int) -> int:
    """Square a number."""
    return x * x


def make(steps, **kw) -> tuple[Agent, ScriptedModel]:
    model = ScriptedModel(steps)
    return Agent(model, [lookup, refund, square], "You are helpful.", checkpointer="memory", **kw), model


async def test_tool_call_then_answer() -> None:
    agent, model = make([call("square", x=7), reply("49")])
    result = await agent.ainvoke("square 7", "t")
    assert result.termination == "agent_stop"
    assert result.output == "49"
    assert [m.role for m in result.messages] == ["user", "assistant", "tool", "assistant"]
    assert result.messages[2].text == "49" and not result.messages[2].is_error
    # the second request carries the tool result, answering the call by id
    second = model.requests[1].messages
    assert second[0].role == "system" and second[0].text == "You are helpful."
    assert second[-1].role == "tool" and second[-1].tool_call_id == second[-2].tool_calls[0].id
    assert result.usage.requests == 2 and result.usage.input_tokens > 0
    model.assert_done()


async def test_invalid_arguments_go_back_to_the_model() -> None:
    agent, model = make([call("square", '{"x": "seven"}'), call("square", "{oops"), call("square", x=7), reply("49")])
    result = await agent.ainvoke("square seven", "t")
    tool_msgs = [m for m in result.messages if m.role == "tool"]
    assert tool_msgs[0].is_error and "x: Input should be a valid integer" in tool_msgs[0].text
    assert tool_msgs[1].is_error and "not valid JSON" in tool_msgs[1].text
    assert tool_msgs[2].text == "49"
    assert result.termination == "agent_stop"
    model.assert_done()


async def test_retry_budget_ends_the_run_without_dangling_calls() -> None:
    agent, _ = make([call("square", "{}"), call("square", "{}"), call("square", "{}")])
    result = await agent.ainvoke("go", "t")
    assert result.termination == "too_many_errors"
    assert "square" in (result.error or "")
    ids = {tc.id for m in result.messages for tc in m.tool_calls}
    answered = {m.tool_call_id for m in result.messages if m.role == "tool"}
    assert ids == answered


async def test_parallel_calls_run_concurrently() -> None:
    agent, model = make([calls(call("lookup", key="a"), call("lookup", key="b"), call("lookup", key="c")), reply("ok")])
    IN_FLIGHT.update(now=0, peak=0)
    result = await agent.ainvoke("look up a, b, c", "t")
    contents = [m.text for m in result.messages if m.role == "tool"]
    assert contents == ["value-of-a", "value-of-b", "value-of-c"]
    # Counted, not timed: all three lookups were running at once (a wall-clock bound fails on a
    # loaded machine).
    assert IN_FLIGHT["peak"] == 3
    model.assert_done()


async def test_approval_interrupt_then_approve() -> None:
    LEDGER.clear()
    agent, model = make([call("refund", order_id="#1", amount=5.0), reply("Refunded.")])
    paused = await agent.ainvoke("refund #1", "t")
    assert paused.termination == "interrupted"
    assert paused.pending_approval[0]["name"] == "refund"
    assert any(isinstance(e, ApprovalRequested) for e in paused.events)
    assert LEDGER == []  # nothing ran before approval
    done = await agent.aresume("t", True)
    assert done.termination == "agent_stop" and done.output == "Refunded."
    assert LEDGER == ["refund #1 5.0"]
    history = await agent.ahistory("t")
    assert [m.role for m in history] == ["user", "assistant", "tool", "assistant"]
    model.assert_done()


async def test_approval_reject_by_call_id() -> None:
    LEDGER.clear()
    agent, _ = make(
        [calls(call("refund", order_id="#1", amount=5.0, id="r1"), call("lookup", key="k", id="l1")), reply("Not refunded.")]
    )
    paused = await agent.ainvoke("refund #1", "t")
    call_id = paused.pending_approval[0]["id"]
    done = await agent.aresume("t", {call_id: {"approved": False, "reason": "too large"}})
    tool_msgs = {m.name: m for m in done.messages if m.role == "tool"}
    assert LEDGER == []
    assert tool_msgs["refund"].is_error and "declined" in tool_msgs["refund"].text and "too large" in tool_msgs["refund"].text
    assert tool_msgs["lookup"].text == "value-of-k"
    assert done.termination == "agent_stop"


async def test_step_limit() -> None:
    agent, _ = make([call("square", x=1)] * 3, step_limits=StepLimits(agentic=3))
    result = await agent.ainvoke("loop forever", "t")
    assert result.termination == "max_steps"
    assert sum(1 for m in result.messages if m.role == "assistant") == 3


async def test_model_error_termination() -> None:
    agent, _ = make([])  # no steps: the scripted model raises
    result = await agent.ainvoke("hi", "t")
    assert result.termination == "model_error"
    assert "no step left" in (result.error or "")


async def test_tool_error_termination_when_configured_to_raise() -> None:
    @tool(on_error="raise")
    def explode() -> str:
        """Explode."""
        raise RuntimeError("kaboom")

    agent = Agent(ScriptedModel([call("explode")]), [explode], checkpointer="memory")
    result = await agent.ainvoke("go", "t")
    assert result.termination == "tool_error" and "kaboom" in (result.error or "")
    assert result.messages[-1].role == "tool"  # the call still got its answer


async def test_reasoning_stays_in_history_and_modes_gate_tools() -> None:
    agent, model = make([reply("Paris.", reasoning="The capital of France is Paris."), reply("Hello again.")])
    first = await agent.ainvoke("Capital of France?", "t", mode="instant")
    assert first.mode == "instant" and first.messages[-1].reasoning == "The capital of France is Paris."
    assert model.requests[0].tools == []
    await agent.ainvoke("thanks", "t")
    assert model.requests[1].messages[2].reasoning == "The capital of France is Paris."
    assert model.requests[1].tools  # agentic by default offers tools


async def test_hallucinated_tool_call_outside_agentic_mode_is_dropped() -> None:
    agent, _ = make([call("square", x=2)])
    result = await agent.ainvoke("hi", "t", mode="instant")
    assert result.termination == "agent_stop"
    assert all(not m.tool_calls for m in result.messages)


async def test_stream_events() -> None:
    agent, _ = make([call("square", x=3), reply("nine")])
    events = [e async for e in agent.astream("square 3", "t")]
    kinds = [type(e) for e in events]
    assert kinds[0] is ModeDecided
    assert ToolCallEvent in kinds and ToolResultEvent in kinds and TokenDelta in kinds
    assert isinstance(events[-1], FinalAnswer) and events[-1].text == "nine"
    assert "".join(e.text for e in events if isinstance(e, TokenDelta)) == "nine"


@pytest.mark.parametrize("stream_tokens", [True, False])
async def test_events_gathered_at_each_step_s_end_are_the_live_ones_in_the_same_order(stream_tokens: bool) -> None:
    runs = []
    for live in (True, False):
        agent, _ = make([call("square", x=3), reply("nine")])
        runs.append([e async for e in agent.astream("square 3", "t", stream_tokens=stream_tokens, live=live)])
    assert runs[1] == runs[0]
    assert any(isinstance(e, ToolResultEvent) for e in runs[1]) and isinstance(runs[1][-1], FinalAnswer)


async def test_threads_are_separate_and_continue() -> None:
    model = FunctionModel(lambda req: f"seen {sum(1 for m in req.messages if m.role == 'user')} user turns")
    agent = Agent(model, checkpointer="memory")
    assert (await agent.ainvoke("a", "x")).output == "seen 1 user turns"
    assert (await agent.ainvoke("b", "x")).output == "seen 2 user turns"
    assert (await agent.ainvoke("c", "y")).output == "seen 1 user turns"


async def test_sqlite_persists_across_agents(tmp_path) -> None:
    db = tmp_path / "threads.sqlite"
    first = Agent(ScriptedModel([reply("one")]), checkpointer=f"sqlite:{db}")
    await first.ainvoke("hello", "t")
    await first.aclose()
    second = Agent(ScriptedModel([reply("two")]), checkpointer=f"sqlite:{db}")
    await second.ainvoke("again", "t")
    history = await second.ahistory("t")
    await second.aclose()
    assert [m.text for m in history] == ["hello", "one", "again", "two"]
    import sqlite3

    mode = sqlite3.connect(db).execute("PRAGMA journal_mode").fetchone()[0]
    assert mode == "wal"


def test_sync_api() -> None:
    agent = Agent(ScriptedModel([call("square", x=4), reply("16")]), [square], checkpointer="memory")
    try:
        events = list(agent.stream("square 4", "s"))
        assert isinstance(events[-1], FinalAnswer) and events[-1].text == "16"
        assert [m.role for m in agent.history("s")] == ["user", "assistant", "tool", "assistant"]
    finally:
        agent.close()


async def test_function_model_sees_tools_and_costs_are_booked() -> None:
    from agent.ledger import Price, PriceTable

    def fn(req):
        names = [t["function"]["name"] for t in req.tools]
        return ModelResponse(text=",".join(names), model="gpt-4o-mini")

    agent = Agent(FunctionModel(fn), [square], checkpointer="memory",
                  prices=PriceTable({"gpt-4o-mini": Price(input_per_mtok=1e6, output_per_mtok=0)}))
    result = await agent.ainvoke("which tools?", "t")
    assert result.output == "square"
    assert result.cost == pytest.approx(result.usage.input_tokens)


async def test_unknown_messages_round_trip_as_dicts() -> None:
    # content parts (vision) survive the checkpoint
    agent, model = make([reply("a cat")])
    parts = [{"type": "text", "text": "what is this?"}, {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]
    await agent.ainvoke(Message.user(parts), "t")
    sent = model.requests[0].messages[-1]
    assert sent.content == parts
    assert json.loads(json.dumps(sent.model_dump()))["content"][1]["type"] == "image_url"


async def test_model_errors_from_functions_are_typed() -> None:
    def broken(req):
        raise ModelError("endpoint unreachable")

    agent = Agent(FunctionModel(broken), checkpointer="memory")
    result = await agent.ainvoke("hi", "t")
    assert result.termination == "model_error" and "endpoint unreachable" in (result.error or "")


async def test_the_same_failing_call_three_times_ends_the_turn() -> None:
    @tool
    def find_order(order_id: str) -> str:
        """Find an order."""
        raise ValueError("Order not found")

    model = ScriptedModel([call("find_order", {"order_id": "#1"})] * 3 + [reply("unreached")])
    agent = Agent(model, [find_order], checkpointer="memory")
    result = await agent.ainvoke("where is #1?", "t")
    assert result.termination == "too_many_errors"
    assert "failed 3 times" in (result.error or "")
    assert model.remaining == 1
    # different arguments are a new attempt, not a repeat
    model2 = ScriptedModel([call("find_order", {"order_id": f"#{i}"}) for i in range(3)] + [reply("none found")])
    result2 = await Agent(model2, [find_order], checkpointer="memory").ainvoke("find any", "t")
    assert result2.termination == "agent_stop"

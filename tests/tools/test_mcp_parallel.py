"""MCP tools called in parallel on one session, and booked like any other tool: in the cost ledger,
the stream's tool events and the trace. Against the real SDK servers of tests/tools/mcp_servers.py,
over stdio and streamable HTTP on 127.0.0.1."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

from agent import Agent, ScriptedModel  # noqa: E402
from agent.events import FinalAnswer, ToolCallEvent, ToolResultEvent  # noqa: E402
from agent.ledger import CostLedger  # noqa: E402
from agent.models import call, reply  # noqa: E402
from agent.models.testing import calls  # noqa: E402
from agent.run_result import RunResult  # noqa: E402
from tests.tools.test_mcp_client import HttpServer, http_server, notes, stdio  # noqa: E402, F401  (fixtures)
from tools import CallRequest, Tool, ToolKind, execute_calls, tool  # noqa: E402
from tools.mcp_client import McpServerConfig, McpToolset  # noqa: E402

# Long enough to still run while the other calls go through, short enough to end a failed test.
SLOW_S = 60.0


@pytest.fixture(params=["stdio", "http"])
def config(request: pytest.FixtureRequest, notes: Path) -> McpServerConfig:  # noqa: F811
    """The test server over each transport, with a price per call."""
    if request.param == "stdio":
        return stdio(notes).model_copy(update={"cost": 0.25, "timeout_s": None})
    server: HttpServer = request.getfixturevalue("http_server")
    return McpServerConfig(url=server.url, name="notes-api", cost=0.25, timeout_s=None)


@contextlib.asynccontextmanager
async def opened(config: McpServerConfig) -> AsyncIterator[tuple[McpToolset, dict[str, Tool]]]:
    toolset = McpToolset(config)
    try:
        yield toolset, {t.name: t for t in await toolset.atools()}
    finally:
        await toolset.aclose()


async def test_calls_run_side_by_side_on_one_session(config: McpServerConfig) -> None:
    async with opened(config) as (toolset, tools):
        first_pid = (await execute_calls([CallRequest("p0", "pid", "{}")], tools))[0].content
        # A call that takes a minute is in flight on the session ...
        slow = asyncio.ensure_future(tools["slow"].run({"seconds": SLOW_S}))
        await asyncio.sleep(0.2)
        # ... while one step's parallel calls all come back through that same session.
        batch = [
            CallRequest("a", "add", {"a": 2, "b": 3}),
            CallRequest("e", "echo", {"text": "side by side"}),
            CallRequest("p1", "pid", "{}"),
            CallRequest("p2", "pid", "{}"),
            CallRequest("t", "tag", {"label": "x"}),
        ]
        results = await asyncio.wait_for(execute_calls(batch, tools), SLOW_S / 2)
        assert not slow.done(), "the slow call ended first: the calls did not overlap"
        assert [(r.call_id, r.is_error, r.content) for r in results] == [
            ("a", False, "5"), ("e", False, "side by side"), ("p1", False, first_pid), ("p2", False, first_pid),
            ("t", False, "tagged x"),
        ]
        assert len(toolset._connections) == 1  # one session on this loop, shared by every call
        # Cancelling one call (as a timeout does) leaves the session to the others.
        slow.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await slow
        again = await execute_calls([CallRequest("p3", "pid", "{}"), CallRequest("e2", "echo", {"text": "after"})], tools)
        assert [(r.is_error, r.content) for r in again] == [(False, first_pid), (False, "after")]


async def test_a_timed_out_call_among_parallel_ones_costs_only_itself(config: McpServerConfig) -> None:
    async with opened(config) as (_, tools):
        pid = (await execute_calls([CallRequest("p0", "pid", "{}")], tools))[0].content
        tools["slow"] = tools["slow"].with_options(timeout_s=1.0)
        batch = [CallRequest("s", "slow", {"seconds": SLOW_S}), *(CallRequest(f"p{i}", "pid", "{}") for i in range(4)),
                 CallRequest("f", "fail", {"reason": "busy"})]
        results = {r.call_id: r for r in await asyncio.wait_for(execute_calls(batch, tools), SLOW_S / 2)}
        assert (results["s"].is_error, results["s"].error_kind) == (True, "timeout")
        assert (results["f"].error_kind, "cannot comply: busy" in results["f"].content) == ("execution", True)
        assert {results[f"p{i}"].content for i in range(4)} == {pid}
        # Every call is priced, failed ones too, as for any rein tool.
        assert {r.cost for r in results.values()} == {0.25}


@tool(kind=ToolKind.READ, cost=0.25)
def local_add(a: int, b: int = 0) -> int:
    """Add two integers.

    Args:
        a: First.
        b: Second.
    """
    return a + b


async def test_an_agent_books_parallel_mcp_calls_like_its_own_tools(config: McpServerConfig, spans: Any) -> None:
    config = config.model_copy(update={"allow": ["add", "echo", "pid", "fail"], "prefix": "m_"})
    async with opened(config) as (_, mcp):
        assert mcp["m_add"].kind is ToolKind.READ and mcp["m_add"].cost == 0.25
        model = ScriptedModel([
            calls(call("m_add", a=2, b=3, id="c1"), call("m_echo", {"text": "hi"}, id="c2"), call("m_pid", id="c3"),
                  call("m_fail", reason="no", id="c4"), call("local_add", a=2, b=3, id="c5")),
            reply("Done."),
        ])
        agent = Agent(model, [*mcp.values(), local_add], checkpointer="memory", name="booker")
        run = RunResult(thread_id="t", output="", termination="agent_stop", messages=[], ledger=CostLedger())
        try:
            events = [e async for e in agent.astream("go", "t", stream_tokens=False, collect=run)]
            history = await agent.ahistory("t")
        finally:
            await agent.aclose()
    model.assert_done()
    called = [(e.call_id, e.name) for e in events if isinstance(e, ToolCallEvent)]
    answered = {e.call_id: e for e in events if isinstance(e, ToolResultEvent)}
    assert called == [("c1", "m_add"), ("c2", "m_echo"), ("c3", "m_pid"), ("c4", "m_fail"), ("c5", "local_add")]
    assert {k: (e.name, e.is_error) for k, e in answered.items()} == {
        "c1": ("m_add", False), "c2": ("m_echo", False), "c3": ("m_pid", False), "c4": ("m_fail", True),
        "c5": ("local_add", False),
    }
    # The MCP tool and the local tool of the same work answer alike.
    assert answered["c1"].content == answered["c5"].content == "5"
    tool_messages = {m.tool_call_id: m for m in history if m.role == "tool"}
    assert set(tool_messages) == set(answered) and tool_messages["c4"].is_error
    assert isinstance(events[-1], FinalAnswer) and (events[-1].text, events[-1].termination) == ("Done.", "agent_stop")
    # One ledger entry per call, MCP or not, each at its price; failed calls are booked too.
    assert sorted((e.name, e.cost) for e in run.ledger.entries if e.kind == "tool") == [
        ("local_add", 0.25), ("m_add", 0.25), ("m_echo", 0.25), ("m_fail", 0.25), ("m_pid", 0.25),
    ]
    # One execute_tool span per call, the same attributes for both kinds of tool.
    tool_spans = {s.attributes["gen_ai.tool.call.id"]: s for s in spans.get_finished_spans() if s.name.startswith("execute_tool")}
    assert sorted(tool_spans) == ["c1", "c2", "c3", "c4", "c5"]
    assert tool_spans["c1"].attributes["rein.tool.kind"] == tool_spans["c5"].attributes["rein.tool.kind"] == "READ"
    assert tool_spans["c4"].attributes["rein.tool.is_error"] is True
    assert all(tool_spans[k].attributes["rein.tool.is_error"] is False for k in ("c1", "c2", "c3", "c5"))


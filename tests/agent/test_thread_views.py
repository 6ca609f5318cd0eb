"""The reconciliation read (`Agent.ahistory_view`) answered from memory while a thread is unchanged.

The view must always equal a fresh read of the thread: after the agent's own turns (which extend
it), after another Agent on the same database wrote the thread (another process, seen by the
thread's latest checkpoint id), and after a turn that failed or was not read under a hold.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agent import Agent, ScriptedModel
from agent.checkpoint import latest_checkpoint_id
from agent.ledger import CostLedger
from agent.messages import Message
from agent.models import call, reply
from agent.models.testing import EchoModel
from agent.run_result import RunResult
from tools import tool


@tool
def note(text: str) -> str:
    """Store a note."""
    return f"noted: {text}"


def _dumps(messages: list[Message]) -> list[dict[str, Any]]:
    return [m.model_dump() for m in messages]


async def _fresh(db: Path, thread: str, **kw: Any) -> list[dict[str, Any]]:
    """The thread as a new Agent on the database reads it (as another process would)."""
    async with Agent(EchoModel(), checkpointer=f"sqlite:{db}", **kw) as other:
        return _dumps(await other.ahistory(thread))


async def _served_turn(agent: Agent, thread: str, text: str) -> tuple[list[Message], RunResult]:
    """What the server does per request: read the thread and run the turn under one hold."""
    collected = RunResult(thread_id=thread, output="", termination="agent_stop", messages=[], ledger=CostLedger())
    async with agent.hold_thread(thread):
        before = await agent.ahistory_view(thread)
        async for _ in agent.astream([Message.user(text)], thread, stream_tokens=False, collect=collected):
            pass
    return before, collected


async def test_the_view_follows_the_agents_own_turns_without_reloading(tmp_path: Path) -> None:
    db = tmp_path / "t.sqlite"
    async with Agent(EchoModel(), checkpointer=f"sqlite:{db}") as agent:
        thread = "t1"
        for i in range(5):
            before, collected = await _served_turn(agent, thread, f"turn {i}")
            assert len(before) == 2 * i
            view = await agent.ahistory_view(thread)
            assert _dumps(view) == _dumps(await agent.ahistory(thread)) == await _fresh(db, thread)
            # The view is the turn's own Message objects: nothing was loaded to build it.
            assert view[-2:] == collected.messages and all(a is b for a, b in zip(view[-2:], collected.messages, strict=True))
        assert [m.text for m in view if m.role == "user"] == [f"turn {i}" for i in range(5)]


@pytest.mark.parametrize("tools", [(), (note,)], ids=["plain", "with-tools"])
async def test_a_served_turn_queries_the_checkpoint_id_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            tools: tuple[Any, ...]) -> None:
    # The read before the turn asks for the id; after the turn the view takes the id of the
    # checkpoint the run stored (the hold keeps everyone else out), which is the thread's latest.
    import agent.runtime as runtime

    asked: list[str] = []
    real = runtime.latest_checkpoint_id

    async def counting(saver: Any, thread: str) -> str | None:
        asked.append(thread)
        return await real(saver, thread)

    monkeypatch.setattr(runtime, "latest_checkpoint_id", counting)
    db = tmp_path / "t.sqlite"
    model = ScriptedModel([call("note", text="a"), reply("ok")] * 3) if tools else EchoModel()
    async with Agent(model, tools=tools, checkpointer=f"sqlite:{db}") as agent:
        for i in range(3):
            asked.clear()
            await _served_turn(agent, "t", f"turn {i}")
            assert asked == ["t"]
            saver = (await agent._graph_for_loop()).checkpointer
            assert agent._views.get("t", await real(saver, "t"), None) is not None  # stored at the latest id
            assert _dumps(await agent.ahistory_view("t")) == await _fresh(db, "t")


async def test_another_writer_on_the_database_is_seen(tmp_path: Path) -> None:
    db = tmp_path / "t.sqlite"
    async with Agent(EchoModel(), checkpointer=f"sqlite:{db}") as a, Agent(EchoModel(), checkpointer=f"sqlite:{db}") as b:
        await _served_turn(a, "shared", "from a")
        version = await latest_checkpoint_id((await a._graph_for_loop()).checkpointer, "shared")
        await b.ainvoke("from b", "shared")
        assert await latest_checkpoint_id((await a._graph_for_loop()).checkpointer, "shared") != version
        view = await a.ahistory_view("shared")
        assert [m.text for m in view if m.role == "user"] == ["from a", "from b"]
        assert _dumps(view) == await _fresh(db, "shared")
        # And a's next turn continues from b's, not from a's stale memory.
        await _served_turn(a, "shared", "a again")
        assert [m.text for m in await a.ahistory_view("shared") if m.role == "user"] == ["from a", "from b", "a again"]
        assert _dumps(await a.ahistory_view("shared")) == await _fresh(db, "shared")


async def test_turns_outside_the_reads_hold_and_failed_turns_leave_no_stale_view(tmp_path: Path) -> None:
    db = tmp_path / "t.sqlite"

    async def flaky(request: Any) -> str:
        if request.messages[-1].text == "fail":
            raise RuntimeError("model down")
        return "ok"

    from agent.models import FunctionModel

    async with Agent(FunctionModel(flaky, name="flaky"), checkpointer=f"sqlite:{db}") as agent:
        await _served_turn(agent, "t", "hello")
        await agent.ainvoke("direct", "t")  # no hold of a read: the view is dropped, then re-read
        assert _dumps(await agent.ahistory_view("t")) == await _fresh(db, "t")
        _, failed = await _served_turn(agent, "t", "fail")
        assert failed.termination == "model_error"
        assert _dumps(await agent.ahistory_view("t")) == await _fresh(db, "t")
        await _served_turn(agent, "t", "after")
        view = await agent.ahistory_view("t")
        assert _dumps(view) == await _fresh(db, "t")
        assert [m.text for m in view if m.role == "user"] == ["hello", "direct", "fail", "after"]


@pytest.mark.parametrize("checkpointer", ["sqlite", "memory"])
async def test_tool_turns_extend_the_view_exactly(tmp_path: Path, checkpointer: str) -> None:
    spec = f"sqlite:{tmp_path / 't.sqlite'}" if checkpointer == "sqlite" else "memory"
    model = ScriptedModel([call("note", {"text": f"n{i}"}) if i % 2 == 0 else reply(f"answer {i}") for i in range(8)])
    async with Agent(model, tools=[note], checkpointer=spec) as agent:
        for i in range(4):
            await _served_turn(agent, "tools", f"turn {i}")
            assert _dumps(await agent.ahistory_view("tools")) == _dumps(await agent.ahistory("tools"))
        roles = [m.role for m in await agent.ahistory_view("tools")]
        assert roles.count("tool") == 4 and roles.count("user") == 4

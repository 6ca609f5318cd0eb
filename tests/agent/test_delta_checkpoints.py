"""Checkpoints hold each step's new messages, not the whole history (agent/nodes/state.py).

A step's checkpoint must not grow with the thread, the thread must read back whole and in order on
SQLite and Postgres (and across a process change: a new Agent on the same database), and threads
stored before, with the whole message list in every checkpoint, must keep loading and growing.
"""

from __future__ import annotations

import operator
import sqlite3
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from langgraph.graph import START, StateGraph

from agent import Agent, ScriptedModel
from agent.checkpoint import open_checkpointer
from agent.models import call, reply
from agent.models.testing import EchoModel
from agent.nodes.state import SNAPSHOT_EVERY
from tools import tool


@tool
def note(text: str) -> str:
    """Store a note."""
    return f"noted: {text}"


def _checkpoint_sizes(db: Path, thread: str) -> list[int]:
    with sqlite3.connect(db) as conn:
        rows = conn.execute(
            "SELECT length(checkpoint) FROM checkpoints WHERE thread_id = ? ORDER BY checkpoint_id", (thread,)
        ).fetchall()
    return [r[0] for r in rows]


async def test_a_long_threads_checkpoints_stay_the_size_of_a_short_ones(tmp_path: Path) -> None:
    db = tmp_path / "threads.sqlite"
    agent = Agent(EchoModel(), checkpointer=f"sqlite:{db}")
    async with agent:
        for i in range(50):
            await agent.ainvoke(f"message number {i} " + "x" * 200, "long")
        history = await agent.ahistory("long")
        graph = await agent._graph_for_loop()
        values = (await graph.aget_state({"configurable": {"thread_id": "long"}})).values
    assert [m.text for m in history if m.role == "user"] == [f"message number {i} " + "x" * 200 for i in range(50)]
    assert len(history) == 100
    # The state keeps rein's plain dicts (LangGraph would turn message dicts into its own objects).
    assert all(type(m) is dict for m in values["messages"])
    sizes = _checkpoint_sizes(db, "long")[1:]  # the thread's empty first checkpoint aside
    assert len(sizes) == 50  # a tool-less turn commits once (see durability_for)
    early, late = sizes[:3], sizes[-3:]
    # With the whole history in every checkpoint, turn 50's would be about 15 times turn 3's.
    assert sorted(sizes)[len(sizes) * 3 // 4] < 1500, sizes
    # Only the periodic full copies (one per SNAPSHOT_EVERY updates of a list channel: two
    # messages and one ledger entry a turn) are larger.
    big = [s for s in sizes if s > 2 * max(early)]
    assert len(big) <= 3 * 50 // SNAPSHOT_EVERY + 1, sizes
    assert min(late) < 2 * max(early), (early, late)


@pytest.mark.parametrize("store", ["sqlite", "postgres"])
async def test_a_thread_reads_back_whole_in_a_new_agent(store: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    spec = f"sqlite:{tmp_path / 'threads.sqlite'}" if store == "sqlite" else request.getfixturevalue("postgres_url")
    thread = f"delta-{store}-{tmp_path.name}"
    turns = 2 * SNAPSHOT_EVERY + 3  # past two full copies, so the read replays writes after the last one
    steps = []
    for i in range(turns):
        steps += [call("note", {"text": str(i)}), reply(f"saved {i}")]
    first = Agent(ScriptedModel(steps), [note], checkpointer=spec)
    async with first:
        for i in range(turns):
            result = await first.ainvoke(f"remember {i}", thread)
            assert result.output == f"saved {i}"
    second = Agent(ScriptedModel([reply("still here")]), [note], checkpointer=spec)
    async with second:
        await second.ainvoke("again", thread)
        history = await second.ahistory(thread)
    expected: list[tuple[str, str]] = []
    for i in range(turns):
        expected += [("user", f"remember {i}"), ("assistant", ""), ("tool", f"noted: {i}"), ("assistant", f"saved {i}")]
    expected += [("user", "again"), ("assistant", "still here")]
    assert [(m.role, m.text) for m in history] == expected


class _OldState(TypedDict, total=False):
    messages: Annotated[list[dict[str, Any]], operator.add]


async def test_a_thread_stored_with_whole_lists_keeps_loading(tmp_path: Path) -> None:
    spec = f"sqlite:{tmp_path / 'threads.sqlite'}"

    async def answer(state: _OldState) -> dict[str, Any]:
        return {"messages": [{"role": "assistant", "content": f"old answer {len(state['messages'])}"}]}

    # A thread written the way rein stored threads before (an operator.add list channel, the
    # whole list in every checkpoint), on the same saver and thread id.
    import contextlib

    async with contextlib.AsyncExitStack() as stack:
        saver = await open_checkpointer(spec, stack)
        old = StateGraph(_OldState)
        old.add_node("answer", answer)
        old.add_edge(START, "answer")
        graph = old.compile(checkpointer=saver)
        config = {"configurable": {"thread_id": "old"}}
        for text in ("one", "two"):
            await graph.ainvoke({"messages": [{"role": "user", "content": text}]}, config)

    agent = Agent(ScriptedModel([reply("new answer")]), checkpointer=spec)
    async with agent:
        assert [m.text for m in await agent.ahistory("old")] == ["one", "old answer 1", "two", "old answer 3"]
        result = await agent.ainvoke("three", "old")
        history = await agent.ahistory("old")
    assert result.output == "new answer"
    assert [m.text for m in history] == ["one", "old answer 1", "two", "old answer 3", "three", "new answer"]


def _checkpoint_count(db: Path, thread: str) -> int:
    with sqlite3.connect(db) as conn:
        return conn.execute("SELECT count(*) FROM checkpoints WHERE thread_id = ?", (thread,)).fetchone()[0]


async def test_a_tool_less_turn_commits_once_and_before_it_returns(tmp_path: Path) -> None:
    db = tmp_path / "threads.sqlite"
    agent = Agent(EchoModel(), checkpointer=f"sqlite:{db}")
    async with agent:
        for i in range(3):
            await agent.ainvoke(f"hello {i}", "quick")
            # Read through another connection while the agent is still open: the turn is on disk.
            assert _checkpoint_count(db, "quick") == i + 2  # the empty first checkpoint, then one a turn
            reader = Agent(EchoModel(), checkpointer=f"sqlite:{db}")
            async with reader:
                assert [m.text for m in await reader.ahistory("quick")][-2:] == [f"hello {i}", f"You said: hello {i}"]



"""One conformance suite for every checkpointer rein opens: memory, SQLite and Postgres.

Each test runs once per backend. The first group drives the raw LangGraph saver that
`open_checkpointer` returns (put, get, list, pending writes, threads and namespaces); the second
drives rein's Agent over it (a multi-turn thread with a tool, an approval pause then resume, a
turn cut off mid-tool and continued, many threads at once, one turn per thread). Durable backends
are reopened by a second Agent, as a restarted process would; the memory saver lives and dies
with its Agent, so there the same Agent carries on. Postgres gets a fresh database per test on
the session cluster (tests/pg_cluster.py) and skips where PostgreSQL is not installed.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from checkpoint_util import fresh_postgres_database
from langgraph.checkpoint.base import Checkpoint, CheckpointTuple, empty_checkpoint
from langgraph.checkpoint.base.id import uuid6

from agent import (
    Agent,
    FunctionModel,
    Message,
    ModelRequest,
    ModelResponse,
    ScriptedModel,
    ThreadBusy,
)
from agent.checkpoint import open_checkpointer
from agent.models import call, reply
from tools import ToolKind, tool

pytestmark = pytest.mark.core  # needs no extra: also run on the bare core install (.ci/core_check.sh)


@dataclass(frozen=True)
class Backend:
    """A checkpointer spec under test."""

    name: str
    """memory, sqlite or postgres."""
    spec: str
    """What Agent(checkpointer=...) and open_checkpointer take."""

    @property
    def durable(self) -> bool:
        """Whether a second Agent (a restarted process) sees the threads of the first."""
        return self.name != "memory"


@pytest.fixture(params=["memory", "sqlite", "postgres"])
async def backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Backend]:
    if request.param == "memory":
        yield Backend("memory", "memory")
    elif request.param == "sqlite":
        yield Backend("sqlite", f"sqlite:{tmp_path / 'threads.sqlite'}")
    else:
        url: str = request.getfixturevalue("postgres_url")
        yield Backend("postgres", await fresh_postgres_database(url, "conf"))



@pytest.fixture
async def saver(backend: Backend) -> AsyncIterator[Any]:
    async with contextlib.AsyncExitStack() as stack:
        yield await open_checkpointer(backend.spec, stack)


async def _reopen(backend: Backend, agent: Agent, make: Callable[[], Agent], *steps: ModelResponse) -> Agent:
    """The Agent a restarted process would build, its model scripted to go on with steps: a new
    one where the threads survive (the old one closed), else the same."""
    if backend.durable:
        await agent.aclose()
        agent = make()
    assert isinstance(agent.model, ScriptedModel)
    agent.model.add(*steps)
    return agent


# --- the raw saver -------------------------------------------------------------------------


def _cfg(thread: str, ns: str = "", checkpoint_id: str | None = None) -> dict[str, Any]:
    configurable: dict[str, Any] = {"thread_id": thread, "checkpoint_ns": ns}
    if checkpoint_id is not None:
        configurable["checkpoint_id"] = checkpoint_id
    return {"configurable": configurable}


async def _put(saver: Any, config: dict[str, Any], value: Any, step: int, source: str = "loop") -> tuple[Checkpoint, dict[str, Any]]:
    """Store a checkpoint whose `messages` channel holds value; returns it and its config."""
    checkpoint = empty_checkpoint()
    checkpoint["id"] = str(uuid6(clock_seq=step))
    previous = (await saver.aget_tuple(config)) if config["configurable"].get("checkpoint_id") else None
    current = previous.checkpoint["channel_versions"].get("messages") if previous else None
    version = saver.get_next_version(current, None)
    checkpoint["channel_values"] = {"messages": value}
    checkpoint["channel_versions"] = {"messages": version}
    stored = await saver.aput(config, checkpoint, {"source": source, "step": step}, {"messages": version})
    return checkpoint, stored


async def _ids(saver: Any, config: dict[str, Any] | None, **kwargs: Any) -> list[str]:
    found: list[CheckpointTuple] = [t async for t in saver.alist(config, **kwargs)]
    return [t.config["configurable"]["checkpoint_id"] for t in found]


async def test_saver_put_get_and_list(saver: Any) -> None:
    first, c1 = await _put(saver, _cfg("t"), ["a"], 0, source="input")
    second, c2 = await _put(saver, c1, ["a", "b"], 1)
    third, c3 = await _put(saver, c2, ["a", "b", "c"], 2)

    latest = await saver.aget_tuple(_cfg("t"))
    assert latest is not None and latest.checkpoint["id"] == third["id"]
    assert latest.checkpoint["channel_values"]["messages"] == ["a", "b", "c"]
    assert latest.metadata["source"] == "loop" and latest.metadata["step"] == 2
    assert latest.parent_config is not None
    assert latest.parent_config["configurable"]["checkpoint_id"] == second["id"]

    old = await saver.aget_tuple(_cfg("t", checkpoint_id=first["id"]))
    assert old is not None and old.checkpoint["channel_values"]["messages"] == ["a"]
    assert old.parent_config is None
    assert await saver.aget_tuple(_cfg("t", checkpoint_id=str(uuid6(clock_seq=9)))) is None
    assert await saver.aget_tuple(_cfg("nobody")) is None

    assert await _ids(saver, _cfg("t")) == [third["id"], second["id"], first["id"]]
    assert await _ids(saver, _cfg("t"), limit=1) == [third["id"]]
    assert await _ids(saver, _cfg("t"), before=c3) == [second["id"], first["id"]]
    assert await _ids(saver, _cfg("t"), filter={"source": "input"}) == [first["id"]]


async def test_saver_pending_writes(saver: Any) -> None:
    _, stored = await _put(saver, _cfg("t"), [], 0)
    await saver.aput_writes(stored, [("messages", "from task a"), ("turn", {"steps": 1})], "task-a")
    await saver.aput_writes(stored, [("messages", "from task b")], "task-b")

    got = await saver.aget_tuple(stored)
    assert got is not None and got.pending_writes is not None
    assert sorted(got.pending_writes) == sorted(
        [("task-a", "messages", "from task a"), ("task-a", "turn", {"steps": 1}), ("task-b", "messages", "from task b")]
    )
    # Writes belong to their checkpoint: the next one starts with none.
    _, later = await _put(saver, stored, ["x"], 1)
    newer = await saver.aget_tuple(later)
    assert newer is not None and not newer.pending_writes


async def test_saver_threads_and_namespaces_are_separate(saver: Any) -> None:
    a, _ = await _put(saver, _cfg("A"), ["in A"], 0)
    child, _ = await _put(saver, _cfg("A", "child:1"), ["in A's subgraph"], 1)
    b, _ = await _put(saver, _cfg("B"), ["in B"], 2)

    top = await saver.aget_tuple(_cfg("A"))
    sub = await saver.aget_tuple(_cfg("A", "child:1"))
    assert top is not None and top.checkpoint["id"] == a["id"]
    assert sub is not None and sub.checkpoint["channel_values"]["messages"] == ["in A's subgraph"]
    assert await _ids(saver, _cfg("A")) == [a["id"]]
    assert await _ids(saver, _cfg("B")) == [b["id"]]

    await saver.adelete_thread("A")
    assert await saver.aget_tuple(_cfg("A")) is None
    assert await saver.aget_tuple(_cfg("A", "child:1")) is None
    still = await saver.aget_tuple(_cfg("B"))
    assert still is not None and still.checkpoint["id"] == b["id"]
    assert child["id"] not in await _ids(saver, None)


# --- rein's Agent over the saver -----------------------------------------------------------

RAN: list[str] = []
"""What the WRITE tools of this module did, in order."""
GATE: dict[str, asyncio.Event] = {}
"""reached: set by a blocking tool once it runs; release: what it waits for."""


@pytest.fixture(autouse=True)
def _reset_tools() -> None:
    RAN.clear()
    GATE.clear()


@tool
def lookup(key: str) -> str:
    """Look a key up."""
    return f"value-of-{key}"


@tool(kind=ToolKind.WRITE)
def ship(order: str) -> str:
    """Ship an order."""
    RAN.append(f"ship {order}")
    return f"shipped {order}"


@tool(kind=ToolKind.WRITE, needs_approval=True)
def refund(order: str) -> str:
    """Refund an order (needs approval)."""
    RAN.append(f"refund {order}")
    return f"refunded {order}"


@tool(kind=ToolKind.WRITE)
async def charge(order: str) -> str:
    """Charge an order; blocks until the test releases it."""
    RAN.append(f"charge {order}")
    GATE["reached"].set()
    await GATE["release"].wait()
    return f"charged {order}"


def _roles(history: list[Message]) -> list[tuple[str, str]]:
    return [(m.role, m.text) for m in history]


async def test_multi_turn_thread_with_a_tool(backend: Backend) -> None:
    def make() -> Agent:
        return Agent(ScriptedModel(), [lookup], checkpointer=backend.spec)

    first = make()
    assert isinstance(first.model, ScriptedModel)
    first.model.add(call("lookup", key="k"), reply("k is value-of-k"), reply("still k"))
    one = await first.ainvoke("what is k?", "T")
    two = await first.ainvoke("and now?", "T")
    assert (one.termination, one.output) == ("agent_stop", "k is value-of-k")
    assert (two.termination, two.output) == ("agent_stop", "still k")

    later = await _reopen(backend, first, make, reply("k again"))
    three = await later.ainvoke("once more", "T")
    assert three.output == "k again"
    history = await later.ahistory("T")
    await later.aclose()
    assert _roles(history) == [
        ("user", "what is k?"),
        ("assistant", ""),
        ("tool", "value-of-k"),
        ("assistant", "k is value-of-k"),
        ("user", "and now?"),
        ("assistant", "still k"),
        ("user", "once more"),
        ("assistant", "k again"),
    ]
    # The model saw the whole thread, tool answer included, on the last turn.
    assert isinstance(later.model, ScriptedModel)
    assert any(m.role == "tool" and m.text == "value-of-k" for m in later.model.requests[-1].messages)


async def test_approval_pause_then_resume(backend: Backend) -> None:
    def make() -> Agent:
        return Agent(ScriptedModel(), [refund], checkpointer=backend.spec)

    first = Agent(ScriptedModel([call("refund", order="#7")]), [refund], checkpointer=backend.spec)
    paused = await first.ainvoke("refund #7", "T")
    assert paused.termination == "interrupted"
    assert [c["name"] for c in paused.pending_approval] == ["refund"]
    assert RAN == []

    # The pending call is part of the stored thread: the model is asked again only for the answer.
    later = await _reopen(backend, first, make, reply("Refunded #7."))
    done = await later.aresume("T", True)
    history = await later.ahistory("T")
    await later.aclose()
    assert (done.termination, done.output) == ("agent_stop", "Refunded #7.")
    assert RAN == ["refund #7"]
    assert _roles(history)[-2:] == [("tool", "refunded #7"), ("assistant", "Refunded #7.")]


async def test_continue_after_a_cut_runs_no_write_twice(backend: Backend) -> None:
    # ship's step is checkpointed; the turn is cut while charge runs. Continuing must not ship
    # again, and must not charge again either: charge started and its outcome is unknown.
    first = Agent(
        ScriptedModel([call("ship", order="#1"), call("charge", order="#1")]), [ship, charge], checkpointer=backend.spec
    )
    GATE.update(reached=asyncio.Event(), release=asyncio.Event())
    turn = asyncio.create_task(first.ainvoke("ship and charge #1", "T"))
    await asyncio.wait_for(GATE["reached"].wait(), 30)
    turn.cancel()
    with pytest.raises(asyncio.CancelledError):
        await turn
    assert RAN == ["ship #1", "charge #1"]

    later = await _reopen(
        backend, first, lambda: Agent(ScriptedModel(), [ship, charge], checkpointer=backend.spec),
        reply("Shipped; the charge needs a check."),
    )
    done = await later.acontinue("T")
    history = await later.ahistory("T")
    await later.aclose()
    assert done.termination == "agent_stop" and RAN == ["ship #1", "charge #1"]
    tools = [m for m in history if m.role == "tool"]
    assert [m.text for m in tools][:1] == ["shipped #1"] and len(tools) == 2
    assert tools[1].is_error and "interrupted" in tools[1].text


def _per_thread(request: ModelRequest) -> ModelResponse | str:
    """Looks the user's key up, then answers with the tool's value: the answer names its thread."""
    last = request.messages[-1]
    if last.role == "tool":
        return f"got {last.text}"
    return call("lookup", key=last.text)


async def test_many_threads_at_once(backend: Backend) -> None:
    agent = Agent(FunctionModel(_per_thread), [lookup], checkpointer=backend.spec)
    keys = [f"k{i}" for i in range(12)]
    for _ in range(2):
        results = await asyncio.gather(*(agent.ainvoke(k, f"thread-{k}") for k in keys))
        assert [r.output for r in results] == [f"got value-of-{k}" for k in keys]
    histories = await asyncio.gather(*(agent.ahistory(f"thread-{k}") for k in keys))
    await agent.aclose()
    for k, history in zip(keys, histories, strict=True):
        turn = [("user", k), ("assistant", ""), ("tool", f"value-of-{k}"), ("assistant", f"got value-of-{k}")]
        assert _roles(history) == turn + turn


async def test_turns_of_one_thread_take_turns(backend: Backend) -> None:
    agent = Agent(FunctionModel(_per_thread), [lookup], checkpointer=backend.spec)
    results = await asyncio.gather(*(agent.ainvoke(k, "shared") for k in ("a", "b", "c")))
    history = await agent.ahistory("shared")
    await agent.aclose()
    assert all(r.termination == "agent_stop" for r in results)
    # Whole turns, one after another: no tool message of one turn lands inside another.
    assert [m.role for m in history] == ["user", "assistant", "tool", "assistant"] * 3
    for i in range(0, 12, 4):
        key = history[i].text
        assert history[i + 2].text == f"value-of-{key}" and history[i + 3].text == f"got value-of-{key}"


async def test_a_busy_thread_is_refused_across_agents(backend: Backend) -> None:
    # A second Agent on the same database stands for another process: the SQLite lease or the
    # Postgres advisory lock keeps it out. The memory saver has no database to share, so there
    # the same Agent is refused by its own lock.
    def make() -> Agent:
        return Agent(ScriptedModel([call("charge", order="#2"), reply("charged"), reply("my turn")]), [charge],
                     checkpointer=backend.spec, thread_wait_s=0)

    first = make()
    GATE.update(reached=asyncio.Event(), release=asyncio.Event())
    turn = asyncio.create_task(first.ainvoke("charge #2", "T"))
    await asyncio.wait_for(GATE["reached"].wait(), 30)
    other = make() if backend.durable else first
    try:
        with pytest.raises(ThreadBusy):
            await other.ainvoke("me too", "T")
        # Other threads are not held up.
        free = Agent(ScriptedModel([reply("free")]), [], checkpointer=backend.spec) if backend.durable else None
        if free is not None:
            assert (await free.ainvoke("hi", "U")).output == "free"
            await free.aclose()
    finally:
        GATE["release"].set()
        result = await turn
    assert result.output == "charged" and RAN == ["charge #2"]
    if other is not first:
        # Once the turn ended, the thread is free for the other Agent (its script starts over).
        assert (await other.ainvoke("me too", "T")).output == "charged"
        await other.aclose()
    await first.aclose()

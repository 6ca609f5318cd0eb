"""One checkpoint per turn with tools: the model step that asks for tools is journaled instead.

A process killed after such a model step (before its tools, or while they run, in the first
tools step of the turn or a later one) resumes without asking the model for that step again, and
no finished WRITE runs twice; a turn with tool calls commits one checkpoint, an approval pause
one more; the turn journal is empty again once a turn has committed.
"""

from __future__ import annotations

import contextlib
import sqlite3
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from sigkill_util import kill_at_marker

from agent import Agent, ScriptedModel
from agent.checkpoint import BatchedSqliteSaver, durability_for
from agent.journal import TurnRecord
from agent.journal_sql import TURN_TABLE, SqliteJournal
from agent.models import call, reply
from tools import ToolKind, tool

pytestmark = pytest.mark.core  # needs no extra: also run on the bare core install (.ci/core_check.sh)

sys.path.insert(0, str(Path(__file__).parent))
import durable_model_step_worker as worker  # noqa: E402

WORKER = Path(__file__).with_name("durable_model_step_worker.py")
ROOT = Path(__file__).parents[2]
UNKNOWN = "interrupted: outcome unknown; check before retrying"


class Store:
    """A SQLite file or a Postgres database, with the reads the tests make on it."""

    def __init__(self, spec: str) -> None:
        self.spec = spec
        self.pg = spec.startswith("postgresql://")

    @property
    def arg(self) -> str:
        return self.spec if self.pg else self.spec.removeprefix("sqlite:")

    def rows(self, sql: str, *params: Any) -> list[tuple[Any, ...]]:
        if self.pg:
            import psycopg

            with psycopg.connect(self.spec) as conn:
                return list(conn.execute(sql.replace("?", "%s"), params).fetchall())
        with contextlib.closing(sqlite3.connect(self.arg)) as conn:
            return conn.execute(sql, params).fetchall()

    def checkpoints(self, thread: str) -> int:
        return int(self.rows("SELECT count(*) FROM checkpoints WHERE thread_id = ?", thread)[0][0])

    def turn_records(self, thread: str) -> int:
        return int(self.rows(f"SELECT count(*) FROM {TURN_TABLE} WHERE thread = ?", thread)[0][0])


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    if request.param == "sqlite":
        return Store(f"sqlite:{tmp_path / 'threads.sqlite'}")
    return Store(request.getfixturevalue("postgres_url"))


def kill_mid_turn(scenario: str, store: Store, log: Path, marker: Path, thread: str) -> None:
    kill_at_marker([str(WORKER), scenario, store.arg, str(log), str(marker), thread], marker, "the blocking call")


def effects(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


@pytest.fixture
def logs(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    log, marker = tmp_path / "effects.log", tmp_path / "marker"
    yield log, marker
    worker.LOG = worker.MARKER = None


async def resume(store: Store, thread: str, log: Path) -> tuple[Agent, ScriptedModel]:
    worker.LOG, worker.MARKER = log, None
    model = ScriptedModel([reply("done")])
    agent = Agent(model, worker.TOOLS, checkpointer=store.spec)
    result = await agent.acontinue(thread)
    assert result.termination == "agent_stop" and result.output == "done"
    # The model was asked once, for the answer after the tools: never again for the step that
    # asked for them (it would have answered "done" there, with no tool calls).
    [request] = model.requests
    assert request.messages[-1].role == "tool"
    return agent, model


async def test_killed_between_the_model_step_and_its_tools(store: Store, logs: tuple[Path, Path]) -> None:
    log, marker = logs
    thread = f"between-{uuid.uuid4().hex[:8]}"
    kill_mid_turn("between", store, log, marker, thread)
    assert effects(log) == []  # the kill came before the tool took effect
    # One commit per turn: the killed turn has no checkpoint, only its journal records.
    assert store.checkpoints(thread) == 2  # the thread's empty first checkpoint, then turn one
    assert store.turn_records(thread) == 1

    agent, _ = await resume(store, thread, log)
    history = await agent.ahistory(thread)
    await agent.aclose()
    assert effects(log) == ["notify stop"]  # idempotent and started: run again, once
    assert [(m.role, m.text) for m in history] == [
        ("user", "turn one"), ("assistant", "first answer"),
        ("user", "turn two"), ("assistant", ""), ("tool", "notified stop"), ("assistant", "done"),
    ]
    assert [tc.name for tc in history[3].tool_calls] == ["notify"]
    assert store.turn_records(thread) == 0


async def test_killed_while_the_tools_run(store: Store, logs: tuple[Path, Path]) -> None:
    log, marker = logs
    thread = f"during-{uuid.uuid4().hex[:8]}"
    kill_mid_turn("during", store, log, marker, thread)
    assert effects(log) == ["charge a", "charge stop"]
    assert store.checkpoints(thread) == 2

    # Before it continues, the thread reads as it would had each step committed.
    reader = Agent(ScriptedModel([]), worker.TOOLS, checkpointer=store.spec)
    before = await reader.ahistory(thread)
    await reader.aclose()
    assert [(m.role, m.text) for m in before][-2:] == [("user", "turn two"), ("assistant", "")]
    assert [tc.name for tc in before[-1].tool_calls] == ["charge", "charge", "charge"]

    agent, _ = await resume(store, thread, log)
    history = await agent.ahistory(thread)
    await agent.aclose()
    # a finished before the kill: answered from the journal. stop's outcome is unknown: not rerun.
    assert effects(log) == ["charge a", "charge stop", "charge c"]
    tools = [m.text for m in history if m.role == "tool"]
    assert tools[0] == "charged a" and UNKNOWN in tools[1] and tools[2] == "charged c"
    assert store.turn_records(thread) == 0


async def test_killed_in_the_second_tools_step_of_a_turn(tmp_path: Path, logs: tuple[Path, Path]) -> None:
    log, marker = logs
    store = Store(f"sqlite:{tmp_path / 'threads.sqlite'}")
    kill_mid_turn("two_steps", store, log, marker, "T")
    assert effects(log) == ["charge a", "charge stop"]
    assert store.turn_records("T") == 2  # one record per model step that asked for tools

    agent, _ = await resume(store, "T", log)
    history = await agent.ahistory("T")
    await agent.aclose()
    assert effects(log) == ["charge a", "charge stop"]  # neither ran again
    assert [(m.role, m.text.split(" (")[0]) for m in history[2:]] == [
        ("user", "turn two"), ("assistant", ""), ("tool", "charged a"), ("assistant", ""),
        ("tool", "Error: tool 'charge' was interrupted: outcome unknown; check before retrying"), ("assistant", "done"),
    ]


async def test_killed_in_a_run_resumed_from_an_approval_pause(tmp_path: Path, logs: tuple[Path, Path]) -> None:
    log, marker = logs
    store = Store(f"sqlite:{tmp_path / 'threads.sqlite'}")
    kill_mid_turn("after_approval", store, log, marker, "T")
    assert effects(log) == ["refund a", "charge stop"]
    assert store.checkpoints("T") == 3  # the empty first one, turn one, the pause

    agent, _ = await resume(store, "T", log)
    history = await agent.ahistory("T")
    await agent.aclose()
    assert effects(log) == ["refund a", "charge stop"]
    assert [(m.role, m.text.split(" (")[0]) for m in history[2:]] == [
        ("user", "turn two"), ("assistant", ""), ("tool", "refunded a"), ("assistant", ""),
        ("tool", "Error: tool 'charge' was interrupted: outcome unknown; check before retrying"), ("assistant", "done"),
    ]


@tool(kind=ToolKind.READ)
def look(key: str) -> str:
    """Look a key up."""
    return f"value of {key}"


@tool(kind=ToolKind.WRITE, needs_approval=True)
def refund(order: str) -> str:
    """Refund an order."""
    return f"refunded {order}"


@pytest.fixture
def saves(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Counts of the checkpointer's calls: aput (a checkpoint) and aput_writes (a step's writes)."""
    # rein's SQLite saver stores its checkpoints itself (one hand-off to aiosqlite's thread).
    savers: list[type] = [BatchedSqliteSaver, AsyncSqliteSaver]
    with contextlib.suppress(ImportError):  # the postgres extra
        from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

        savers.append(AsyncPostgresSaver)
    counts = {"aput": 0, "aput_writes": 0}
    for cls in savers:
        for name in counts:
            if name not in vars(cls):  # inherited: counted on the class that defines it
                continue
            original = getattr(cls, name)

            async def spy(self: Any, *args: Any, _original: Any = original, _name: str = name, **kwargs: Any) -> Any:
                counts[_name] += 1
                return await _original(self, *args, **kwargs)

            monkeypatch.setattr(cls, name, spy)
    return counts


async def test_a_turn_with_tool_calls_commits_one_checkpoint(store: Store, saves: dict[str, int]) -> None:
    assert durability_for(store.spec, has_tools=True) == "exit"
    thread = f"once-{uuid.uuid4().hex[:8]}"
    steps = [call("look", key="k"), reply("first"), call("look", key="j"), call("look", key="i"), reply("second")]
    async with Agent(ScriptedModel(steps), [look], checkpointer=store.spec) as agent:
        await agent.ainvoke("one", thread)  # a new thread also stores its empty first checkpoint
        saves["aput"] = 0
        result = await agent.ainvoke("two tool steps", thread)
        assert result.output == "second"
        assert saves["aput"] == 1
        history = await agent.ahistory(thread)
    assert [m.role for m in history].count("tool") == 3
    assert store.turn_records(thread) == 0  # the turn committed: its records are gone


async def test_an_approval_pause_commits_at_the_pause(store: Store, saves: dict[str, int]) -> None:
    thread = f"pause-{uuid.uuid4().hex[:8]}"
    async with Agent(ScriptedModel([reply("hi")]), [refund], checkpointer=store.spec) as agent:
        await agent.ainvoke("hello", thread)
    saves["aput"] = 0
    async with Agent(ScriptedModel([call("refund", order="#1")]), [refund], checkpointer=store.spec) as agent:
        paused = await agent.ainvoke("refund #1", thread)
        assert paused.termination == "interrupted" and saves["aput"] == 1
    # Another agent (another process) finds the pause and answers it.
    async with Agent(ScriptedModel([reply("Refunded.")]), [refund], checkpointer=store.spec) as agent:
        done = await agent.aresume(thread, True)
        history = await agent.ahistory(thread)
    assert done.output == "Refunded." and saves["aput"] == 2
    assert [(m.role, m.text) for m in history][-3:] == [("assistant", ""), ("tool", "refunded #1"), ("assistant", "Refunded.")]
    assert store.turn_records(thread) == 0


async def test_records_the_checkpoint_already_holds_are_ignored_and_dropped(tmp_path: Path) -> None:
    """A run that committed but died before it dropped its records (or another run's records)
    must neither show in the history nor be put back into the checkpoint."""
    spec = f"sqlite:{tmp_path / 'threads.sqlite'}"
    async with Agent(ScriptedModel([call("look", key="k"), reply("found")]), [look], checkpointer=spec) as agent:
        await agent.ainvoke("look k", "T")
        committed = [(m.role, m.text) for m in await agent.ahistory("T")]
    journal = await SqliteJournal.open(tmp_path / "threads.sqlite")
    stale = {"messages": ({"role": "assistant", "content": "stale", "tool_calls": []},)}
    await journal.record_turn(TurnRecord("T", 0, base=1, tip="", updates=[stale]))
    await journal.aclose()

    async with Agent(ScriptedModel([reply("again")]), [look], checkpointer=spec) as agent:
        assert [(m.role, m.text) for m in await agent.ahistory("T")] == committed
        await agent.ainvoke("more", "T")
        history = [(m.role, m.text) for m in await agent.ahistory("T")]
    assert history == [*committed, ("user", "more"), ("assistant", "again")]
    assert Store(spec).turn_records("T") == 0


async def test_journal_statements_committed_together_are_all_or_none(tmp_path: Path) -> None:
    """The SQLite journal runs a batch of statements as one transaction on its connection's
    thread: a statement that fails leaves none of the batch, and the journal goes on working."""
    journal = await SqliteJournal.open(tmp_path / "threads.sqlite")
    try:
        await journal.record_turn(TurnRecord("T", 0, base=1, tip="", updates=[{"messages": ()}]))
        with pytest.raises(sqlite3.OperationalError):
            await journal._execute_all([(f"DELETE FROM {TURN_TABLE} WHERE thread_id = ?", ("T",)), ("DELETE FROM no_such_table", ())])
        assert len(await journal.turn("T")) == 1  # the first DELETE was rolled back with the batch
        await journal.end_run("T", None)
        assert await journal.turn("T") == []
    finally:
        await journal.aclose()

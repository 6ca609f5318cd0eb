"""No finished tool call runs twice: a process killed mid-step resumes from the tool journal."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sigkill_util import kill_at_marker

from agent import Agent, ScriptedModel
from agent.journal import Entry, MemoryJournal, ToolJournal
from agent.journal_sql import PostgresJournal, SqliteJournal, open_journal
from agent.models import call, calls, reply
from tools import ToolKind, tool

pytestmark = pytest.mark.core  # needs no extra: also run on the bare core install (.ci/core_check.sh)

sys.path.insert(0, str(Path(__file__).parent))
import exactly_once_worker as worker  # noqa: E402

WORKER = Path(__file__).with_name("exactly_once_worker.py")
ROOT = Path(__file__).parents[2]
UNKNOWN = "interrupted: outcome unknown; check before retrying"


def kill_when_marked(args: list[str], marker: Path) -> None:
    kill_at_marker([str(WORKER), *args], marker, "the second call")


@pytest.mark.parametrize("second", ["charge", "notify"])
async def test_killed_mid_step_never_reruns_a_finished_call(tmp_path: Path, second: str) -> None:
    db, log, marker = tmp_path / "threads.sqlite", tmp_path / "effects.log", tmp_path / "marker"
    kill_when_marked(["crash", str(db), str(log), str(marker), second], marker)
    assert log.read_text().splitlines() == ["charge a", f"{second} b"]  # a returned, b was running

    worker.LOG, worker.MARKER = log, None
    model = ScriptedModel([reply("done"), call("charge", label="d"), reply("charged d")])
    agent = Agent(model, worker.TOOLS, checkpointer=f"sqlite:{db}")
    result = await agent.acontinue("T")
    assert result.termination == "agent_stop" and result.output == "done"
    effects = log.read_text().splitlines()
    history = await agent.ahistory("T")
    tool_text = {m.tool_call_id: m.text for m in history if m.role == "tool"}
    if second == "charge":
        # a finished before the kill: answered from the journal. b's outcome is unknown: not rerun.
        assert effects == ["charge a", "charge b", "charge c"]
        b = next(m for m in history if m.role == "tool" and m.name == "charge" and UNKNOWN in m.text)
        assert b.is_error and b.metadata == {"error_kind": "interrupted"}
    else:
        # b is idempotent, so resume runs it again; a still ran only once.
        assert effects == ["charge a", "notify b", "notify b", "charge c"]
        assert "notified b" in tool_text.values()
    assert [t for t in tool_text.values() if t.startswith("charged")] == ["charged a", "charged c"]
    assert [(m.role, m.text) for m in history if m.role != "tool"] == [
        ("user", "turn one"), ("assistant", "first answer"), ("user", "turn two"), ("assistant", ""),
        ("assistant", "done"),
    ]
    assert model.requests[0].messages[-1].role == "tool"  # the model saw all three answers

    # The next tools step of the thread drops the journal rows of the committed step.
    steps_before = {row[0] for row in _rows(db)}
    await agent.ainvoke("turn three", "T")
    await agent.aclose()
    steps_after = {row[0] for row in _rows(db)}
    assert len(steps_before) == 1 and len(steps_after) == 1 and steps_before != steps_after
    assert log.read_text().splitlines()[-1] == "charge d"


def _rows(db: Path) -> list[tuple]:
    with contextlib.closing(sqlite3.connect(db)) as conn:
        return conn.execute("SELECT step, call_id, state FROM rein_tool_journal").fetchall()


def test_timed_out_sync_write_does_not_keep_the_process_alive(tmp_path: Path) -> None:
    db, log, marker = tmp_path / "threads.sqlite", tmp_path / "effects.log", tmp_path / "marker"
    proc = subprocess.Popen([sys.executable, str(WORKER), "timeout", str(db), str(log), str(marker)], cwd=ROOT)
    try:
        deadline = time.monotonic() + 60
        while not marker.exists():
            assert proc.poll() is None and time.monotonic() < deadline, "the run never returned"
            time.sleep(0.02)
        returned = time.monotonic()
        proc.wait(timeout=20)  # the tool's thread sleeps 60 s: waiting for it would time out here
        assert time.monotonic() - returned < 10
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0
    assert marker.read_text() == "tool 'slow_write' timed out after 0.2s; outcome unknown: it may still take effect, check before retrying"
    assert not log.exists()


async def test_late_completion_of_a_timed_out_write_is_recorded_and_shown(tmp_path: Path) -> None:
    db, log = tmp_path / "threads.sqlite", tmp_path / "effects.log"

    @tool(kind=ToolKind.WRITE, timeout_s=0.1)
    def book(label: str) -> str:
        """A slow write that completes after its timeout."""
        time.sleep(0.4)
        with log.open("a") as f:
            f.write(f"book {label}\n")
        return f"booked {label}"

    @tool(kind=ToolKind.WRITE, timeout_s=0.1)
    def cancel(label: str) -> str:
        """A slow write that fails after its timeout, with a path in its message."""
        time.sleep(0.4)
        raise OSError(f"cannot write /srv/rein/secret/{label}.json")

    @tool(kind=ToolKind.READ)
    def look() -> str:
        """A quick read."""
        return "nothing new"

    model = ScriptedModel([
        calls(call("book", label="x"), call("cancel", label="y")), reply("timed out"),
        call("look"), reply("ok"),
    ])
    agent = Agent(model, [book, cancel, look], checkpointer=f"sqlite:{db}")
    first = await agent.ainvoke("book x, cancel y", "T")
    tool_msgs = [m for m in first.messages if m.role == "tool"]
    assert [m.metadata.get("error_kind") for m in tool_msgs] == ["timeout", "timeout"]
    assert all("outcome unknown" in m.text for m in tool_msgs)

    deadline = time.monotonic() + 10
    while len([r for r in _rows(db) if r[2] == "late"]) < 2:
        assert time.monotonic() < deadline, "the late completions were never journaled"
        await asyncio.sleep(0.05)
    assert log.read_text() == "book x\n"

    await agent.ainvoke("anything new?", "T")
    history = await agent.ahistory("T")
    await agent.aclose()
    note = next(m for m in history if m.role == "tool" and m.name == "look").metadata["late_results"]
    assert note == [
        {"call_id": tool_msgs[0].tool_call_id, "name": "book", "content": "booked x", "is_error": False},
        {"call_id": tool_msgs[1].tool_call_id, "name": "cancel", "content": "Error: OSError: cannot write <path>", "is_error": True},
    ]


async def test_late_completion_during_its_own_step_lands_on_its_message() -> None:
    gate = {"slow": 0.3}

    @tool(kind=ToolKind.WRITE, timeout_s=0.05)
    def quick_timeout() -> str:
        """Times out, then finishes while the next write still runs."""
        time.sleep(gate["slow"])
        return "finished late"

    @tool(kind=ToolKind.WRITE)
    async def long_write() -> str:
        """Runs long enough for the first call to finish."""
        await asyncio.sleep(1.0)
        return "long done"

    model = ScriptedModel([calls(call("quick_timeout"), call("long_write")), reply("ok")])
    result = await Agent(model, [quick_timeout, long_write], checkpointer="memory").ainvoke("go")
    first = result.messages[2]
    assert first.metadata["late_result"]["content"] == "finished late"
    assert "outcome unknown" in first.text


async def test_memory_journal_answers_an_interrupted_step() -> None:
    """A cancelled turn (no crash) resumes in the same process: the memory journal answers."""
    effects: list[str] = []
    started = asyncio.Event()

    @tool(kind=ToolKind.WRITE)
    async def step(label: str) -> str:
        """A write; b hangs the first time."""
        effects.append(label)
        if label == "b" and effects.count("b") == 1:
            started.set()
            await asyncio.sleep(30)
        return f"did {label}"

    model = ScriptedModel([calls(call("step", label="a"), call("step", label="b"), call("step", label="c")), reply("ok")])
    agent = Agent(model, [step], checkpointer="memory")
    run = asyncio.ensure_future(agent.ainvoke("go", "T"))
    await started.wait()
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    result = await agent.acontinue("T")
    assert result.output == "ok" and effects == ["a", "b", "c"]
    texts = [m.text for m in await agent.ahistory("T") if m.role == "tool"]
    assert texts[0] == "did a" and UNKNOWN in texts[1] and texts[2] == "did c"


async def _conformance(journal: ToolJournal) -> None:
    """What every journal must do: upsert, per-step reads, late entries, cleanup."""
    await journal.record(Entry("T", "3:h", "c1", "started", 3))
    await journal.record(Entry("T", "3:h", "c1", "finished", 3, {"call_id": "c1", "name": "w", "content": "ok"}))
    await journal.record(Entry("T", "3:h", "c2", "started", 3))
    await journal.record(Entry("T", "3:h", "c2", "late", 3, {"call_id": "c2", "name": "w", "content": "late"}))
    await journal.record(Entry("U", "3:h", "c1", "finished", 3, {"call_id": "c1", "name": "w", "content": "other"}))
    got = {(e.call_id, e.state): e for e in await journal.step("T", "3:h")}
    assert set(got) == {("c1", "started"), ("c1", "finished"), ("c2", "started")}
    assert got[("c1", "finished")].tool_result().content == "ok"
    [late] = await journal.late("T", 5)
    assert late.call_id == "c2" and not late.surfaced
    # Surfaced by step 5: still offered to step 5 (it may rerun after a crash), not to step 7.
    await journal.record(Entry("T", "3:h", "c2", "late", 5, late.result, surfaced=True))
    assert [e.call_id for e in await journal.late("T", 5)] == ["c2"]
    assert await journal.late("T", 7) == []
    await journal.forget("T", 5)
    assert await journal.step("T", "3:h") == []
    assert [e.seq for e in await journal.late("T", 5)] == [5]  # surfaced by step 5: kept until 7
    await journal.forget("T", 7)
    assert await journal.late("T", 5) == []
    assert [e.result for e in await journal.step("U", "3:h")] == [{"call_id": "c1", "name": "w", "content": "other"}]


async def test_journal_conformance_memory_and_sqlite(tmp_path: Path) -> None:
    await _conformance(MemoryJournal())
    journal = await SqliteJournal.open(tmp_path / "j.sqlite")
    await _conformance(journal)
    await journal.aclose()


async def test_journal_on_postgres(postgres_url: str) -> None:
    async with contextlib.AsyncExitStack() as stack:
        journal = await open_journal(postgres_url, stack)
        assert isinstance(journal, PostgresJournal)
        await journal.conn.execute("DELETE FROM rein_tool_journal WHERE thread IN ('T', 'U')")
        await _conformance(journal)


async def test_postgres_resume_answers_finished_calls_from_the_journal(postgres_url: str) -> None:
    effects: list[str] = []
    started = asyncio.Event()

    @tool(kind=ToolKind.WRITE)
    async def pay(label: str) -> str:
        """A write; b hangs in the first agent."""
        effects.append(label)
        if label == "b" and effects.count("b") == 1:
            started.set()
            await asyncio.sleep(30)
        return f"paid {label}"

    script = calls(call("pay", label="a"), call("pay", label="b"), call("pay", label="c"))
    first = Agent(ScriptedModel([script]), [pay], checkpointer=postgres_url)
    run = asyncio.ensure_future(first.ainvoke("pay all", "pg-exactly-once"))
    await started.wait()
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    await first.aclose()

    second = Agent(ScriptedModel([reply("paid")]), [pay], checkpointer=postgres_url)  # a "new process"
    result = await second.acontinue("pg-exactly-once")
    texts = [m.text for m in await second.ahistory("pg-exactly-once") if m.role == "tool"]
    await second.aclose()
    assert result.output == "paid" and effects == ["a", "b", "c"]
    assert texts[0] == "paid a" and UNKNOWN in texts[1] and texts[2] == "paid c"


async def test_a_stopped_run_keeps_the_answers_of_calls_that_ran() -> None:
    @tool(kind=ToolKind.WRITE)
    def save() -> str:
        """Saves."""
        return "saved"

    @tool(kind=ToolKind.WRITE, on_error="raise")
    def explode() -> str:
        """Fails with an internal path in its message."""
        raise RuntimeError("bad state in /opt/rein/internal/state.db")

    model = ScriptedModel([calls(call("save"), call("explode"))])
    result = await Agent(model, [save, explode], checkpointer="memory").ainvoke("go")
    assert result.termination == "tool_error"
    assert "/opt/rein/internal/state.db" in (result.error or "")  # the developer sees everything
    saved, exploded = (m.text for m in result.messages if m.role == "tool")
    assert saved == "saved"  # it ran: the model must not be told it did not
    assert exploded == "Not executed: the run stopped (tool 'explode' failed: RuntimeError: bad state in <path>)."

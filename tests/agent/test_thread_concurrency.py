"""One turn at a time per thread: in one process (gathered turns, sync and async API on one Agent,
streams, waits that run out) and across processes (SQLite lease rows, Postgres advisory locks,
a killed holder taken over at once)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agent import Agent, Message, ModelRequest, ModelResponse, ScriptedModel, ThreadBusy
from agent.models import FunctionModel, call, reply
from agent.thread_lease import LEASE_TABLE, SqliteLeases, ThreadLeases, host_id
from agent.thread_lease_pg import PostgresLeases
from tools import ToolKind, tool

pytestmark = pytest.mark.core  # needs no extra: also run on the bare core install (.ci/core_check.sh)

sys.path.insert(0, str(Path(__file__).parent))
import thread_worker  # noqa: E402

WORKER = Path(__file__).with_name("thread_worker.py")
ROOT = Path(__file__).parents[2]
GATES: dict[str, asyncio.Event] = {}


@tool(kind=ToolKind.WRITE)
async def stamp(tag: str) -> str:
    """Stamp a tag; waits on GATES[tag] when the test set one."""
    gate = GATES.get(tag)
    if gate is not None:
        await gate.wait()
    else:
        await asyncio.sleep(0.01)
    return f"stamped {tag}"


def stamper(request: ModelRequest) -> ModelResponse | str:
    """Calls stamp for a user message, answers after its result: right for any order of turns."""
    last = request.messages[-1]
    if last.role == "user":
        return call("stamp", tag=last.text, id=f"call-{last.text}")
    return reply(f"done {last.text.removeprefix('stamped ')}")


def turns_of(history: list[Message]) -> list[str]:
    """The user messages of a thread in order, checking each turn is whole and not interleaved:
    user, a stamp call, its result, the answer."""
    tags = []
    assert len(history) % 4 == 0, [(m.role, m.text) for m in history]
    for i in range(0, len(history), 4):
        user, asked, result, answer = history[i : i + 4]
        tag = user.text
        assert user.role == "user"
        assert asked.role == "assistant" and [c.id for c in asked.tool_calls] == [f"call-{tag}"]
        assert result.role == "tool" and result.tool_call_id == f"call-{tag}" and result.text == f"stamped {tag}"
        assert answer.role == "assistant" and answer.text == f"done {tag}" and not answer.tool_calls
        tags.append(tag)
    return tags


def lease_rows(db: Path) -> list[tuple]:
    with sqlite3.connect(db) as conn:
        return conn.execute(f"SELECT thread_id, pid, host FROM {LEASE_TABLE}").fetchall()


@pytest.mark.parametrize("store", ["memory", "sqlite"])
async def test_gathered_turns_all_land_whole(store: str, tmp_path: Path) -> None:
    spec = "memory" if store == "memory" else f"sqlite:{tmp_path / 'threads.sqlite'}"
    agent = Agent(FunctionModel(stamper), [stamp], checkpointer=spec)
    sent = [f"m{i}" for i in range(10)]
    results = await asyncio.gather(*(agent.ainvoke(m, "T") for m in sent))
    history = await agent.ahistory("T")
    await agent.aclose()
    assert [r.termination for r in results] == ["agent_stop"] * 10
    assert [r.output for r in results] == [f"done {m}" for m in sent]
    assert sorted(turns_of(history)) == sorted(sent)
    if store == "sqlite":
        assert lease_rows(tmp_path / "threads.sqlite") == []  # every lease was given back


async def test_sync_and_async_api_of_one_agent_share_the_thread_lock(tmp_path: Path) -> None:
    # invoke runs on the Agent's private loop thread; ainvoke on this loop: two loops, one thread.
    agent = Agent(FunctionModel(stamper), [stamp], checkpointer=f"sqlite:{tmp_path / 't.sqlite'}")
    GATES["first"] = gate = asyncio.Event()
    try:
        first = asyncio.create_task(agent.ainvoke("first", "T"))
        while not (await agent.ahistory("T"))[-1:] or (await agent.ahistory("T"))[-1].role != "assistant":
            await asyncio.sleep(0.01)  # the first turn is inside its tool
        second = asyncio.create_task(asyncio.to_thread(agent.invoke, "second", "T"))
        await asyncio.sleep(0.3)
        assert not second.done()  # waits for the first turn instead of running beside it
        gate.set()
        assert (await first).output == "done first"
        assert (await second).output == "done second"
        assert turns_of(await agent.ahistory("T")) == ["first", "second"]
    finally:
        GATES.pop("first", None)
        await agent.aclose()
        await asyncio.to_thread(agent.close)


async def test_a_busy_thread_raises_thread_busy_after_the_wait(tmp_path: Path) -> None:
    db = tmp_path / "t.sqlite"
    agent = Agent(FunctionModel(stamper), [stamp], checkpointer=f"sqlite:{db}", thread_wait_s=0)
    patient = Agent(FunctionModel(stamper), [stamp], checkpointer=f"sqlite:{db}", thread_wait_s=0.3)
    GATES["slow"] = gate = asyncio.Event()
    try:
        running = asyncio.create_task(agent.ainvoke("slow", "T"))
        while len(await agent.ahistory("T")) < 2:
            await asyncio.sleep(0.01)
        with pytest.raises(ThreadBusy) as busy:
            await agent.ainvoke("rejected", "T")
        assert busy.value.thread_id == "T" and "waited 0 s" in str(busy.value)
        started = time.monotonic()
        with pytest.raises(ThreadBusy):
            await patient.ainvoke("late", "T")  # another Agent on the same file: same lock
        assert time.monotonic() - started >= 0.29
        gate.set()
        assert (await running).output == "done slow"
        # the rejected turns never touched the thread; the thread is free again
        assert turns_of(await agent.ahistory("T")) == ["slow"]
        assert (await patient.ainvoke("after", "T")).output == "done after"
    finally:
        GATES.pop("slow", None)
        await agent.aclose()
        await patient.aclose()


async def test_a_stream_holds_the_thread_until_it_closes(tmp_path: Path) -> None:
    db = tmp_path / "t.sqlite"
    agent = Agent(FunctionModel(stamper), [stamp], checkpointer=f"sqlite:{db}", thread_wait_s=0)
    stream = agent.astream("streamed", "T")
    await anext(stream)
    assert [row[0] for row in lease_rows(db)] == ["T"]
    with pytest.raises(ThreadBusy):
        await agent.ainvoke("beside the stream", "T")
    await stream.aclose()  # closed early: the lease goes with it
    assert lease_rows(db) == []
    assert (await agent.ainvoke("next", "T")).termination == "agent_stop"
    await agent.aclose()


async def test_a_tool_that_starts_a_turn_on_its_own_thread_fails_fast() -> None:
    agent: Agent

    @tool
    async def recurse(text: str) -> str:
        """Start a turn on the calling turn's thread."""
        try:
            await agent.ainvoke(text, "T")
        except ThreadBusy as exc:
            return f"busy: {exc.detail}"
        return "ran"

    agent = Agent(ScriptedModel([call("recurse", {"text": "inner"}), reply("outer done")]), [recurse], checkpointer="memory")
    result = await asyncio.wait_for(agent.ainvoke("outer", "T"), 10)
    assert result.output == "outer done"
    assert [m.text for m in result.messages if m.role == "tool"][0].startswith("busy: a turn of this thread")


def start_worker(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(WORKER), *args], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def wait_for(path: Path, proc: subprocess.Popen[str], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert proc.poll() is None, proc.communicate()[1]
        assert time.monotonic() < deadline, f"worker never wrote {path.name}"
        time.sleep(0.02)


def test_two_processes_share_one_sqlite_thread(tmp_path: Path) -> None:
    db = tmp_path / "threads.sqlite"
    go = tmp_path / "go"
    procs = [
        start_worker("turns", f"sqlite:{db}", "T", name, "20", str(tmp_path / f"ready-{name}"), str(go))
        for name in ("a", "b")
    ]
    try:
        for name, proc in zip(("a", "b"), procs, strict=True):
            wait_for(tmp_path / f"ready-{name}", proc)
        go.write_text("go")
        outs = [proc.communicate(timeout=120) for proc in procs]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    assert [p.returncode for p in procs] == [0, 0], [err[-2000:] for _, err in outs]
    succeeded = [tag for out, _ in outs for tag in json.loads(out.strip().splitlines()[-1])]

    async def read() -> list[Message]:
        agent = Agent(FunctionModel(stamper), checkpointer=f"sqlite:{db}")
        history = await agent.ahistory("T")
        await agent.aclose()
        return history

    history = asyncio.run(read())
    tags = turns_of(history)  # every tool call has its result, no turn cut into another
    assert len(succeeded) == 40 and sorted(tags) == sorted(succeeded)
    for name in ("a", "b"):
        assert [t for t in tags if t.startswith(f"{name}-")] == [f"{name}-{i}" for i in range(20)]
    assert lease_rows(db) == []


def test_a_killed_holder_is_taken_over_at_once(tmp_path: Path) -> None:
    db = tmp_path / "threads.sqlite"
    in_tool, release = tmp_path / "in-tool", tmp_path / "release"
    proc = start_worker("hold", f"sqlite:{db}", "T", str(in_tool), str(release))
    try:
        wait_for(in_tool, proc)
        [(_, pid, host)] = lease_rows(db)
        assert pid == proc.pid and host == host_id()
        os.kill(proc.pid, signal.SIGKILL)
        # Not reaped yet: a zombie whose lease row is still there, and which never expired.
        deadline = time.monotonic() + 10
        while process_state(proc.pid) != "Z":
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert len(lease_rows(db)) == 1
        agent = Agent(ScriptedModel([reply("finished")]), [thread_worker.wait_for_release],
                      checkpointer=f"sqlite:{db}", thread_wait_s=0)
        started = time.monotonic()
        result = agent.continue_thread("T")
        elapsed = time.monotonic() - started
        history = agent.history("T")
        agent.close()
    finally:
        proc.kill()
        proc.communicate()  # reaps it and closes its pipes
    assert elapsed < 5
    assert result.termination == "agent_stop" and result.output == "finished"
    # The cut tool call got its tool message (what it says is the tool journal's business).
    assert [m.role for m in history] == ["user", "assistant", "tool", "assistant"]
    assert history[2].tool_call_id == "call-held" and history[3].text == "finished"
    assert lease_rows(db) == []


def process_state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def plant_lease(db: Path, thread_id: str, pid: int, host: str, expires_in: float) -> None:
    """A lease row as another process would have left it."""
    SqliteLeases(str(db)).drop(thread_id, "nobody")  # creates the table
    with sqlite3.connect(db) as conn:
        conn.execute(f"INSERT INTO {LEASE_TABLE} VALUES (?, 'elsewhere', ?, ?, ?)",
                     (thread_id, pid, host, time.time() + expires_in))


@pytest.mark.parametrize(("host", "expires_in", "free"), [
    ("other-host", 30.0, False),   # alive as far as we can know: wait
    ("other-host", -1.0, True),    # expired: its owner stopped renewing
    (None, 30.0, True),            # this host, a pid that is gone
])
async def test_stale_leases_are_taken_over_and_live_ones_respected(
    tmp_path: Path, host: str | None, expires_in: float, free: bool
) -> None:
    db = tmp_path / "t.sqlite"
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    plant_lease(db, "T", int(gone.stdout), host or host_id(), expires_in)
    agent = Agent(FunctionModel(stamper), [stamp], checkpointer=f"sqlite:{db}", thread_wait_s=0.2)
    try:
        if free:
            assert (await agent.ainvoke("mine now", "T")).output == "done mine now"
            assert lease_rows(db) == []
        else:
            with pytest.raises(ThreadBusy, match="on other-host holds its lease"):
                await agent.ainvoke("not yet", "T")
            assert await agent.ahistory("T") == []
    finally:
        await agent.aclose()


async def test_the_heartbeat_keeps_a_lease_alive_and_notices_a_takeover(tmp_path: Path) -> None:
    db = tmp_path / "t.sqlite"
    mine = ThreadLeases("a", SqliteLeases(str(db), ttl_s=0.3))
    rival = ThreadLeases("b", SqliteLeases(str(db), ttl_s=0.3))  # as another process would
    async with mine.hold("T", None) as hold:
        await asyncio.sleep(0.7)  # over two TTLs: only renewals keep it
        with pytest.raises(ThreadBusy, match="holds its lease"):
            async with rival.hold("T", 0.1):
                pass
        assert not hold.lost
        with sqlite3.connect(db) as conn:  # taken over behind its back
            conn.execute(f"UPDATE {LEASE_TABLE} SET owner = 'thief'")
        await asyncio.sleep(0.3)
        assert hold.lost
    assert [row[0] for row in lease_rows(db)] == ["T"]  # the thief's row stays


async def test_a_lease_is_taken_without_a_worker_thread_unless_sqlite_s_lock_is_busy(tmp_path: Path, monkeypatch) -> None:
    db = tmp_path / "t.sqlite"
    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA journal_mode=WAL")
    leases = ThreadLeases("q", SqliteLeases(str(db)))
    handed_off = []
    real_to_thread = asyncio.to_thread

    async def counting_to_thread(fn, *args, **kwargs):
        handed_off.append(fn)
        return await real_to_thread(fn, *args, **kwargs)

    monkeypatch.setattr(asyncio, "to_thread", counting_to_thread)
    async with leases.hold("T", 1):
        assert [row[0] for row in lease_rows(db)] == ["T"]
    assert lease_rows(db) == [] and handed_off == []  # taken and dropped on the event loop's thread

    # Another writer holds SQLite's write lock: the take waits for it on a worker thread, and the
    # event loop goes on meanwhile.
    blocker = sqlite3.connect(db, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    entered = asyncio.Event()

    async def turn() -> None:
        async with leases.hold("T", 10):
            entered.set()

    task = asyncio.create_task(turn())
    ticks = 0
    while ticks < 20 and not entered.is_set():
        await asyncio.sleep(0.01)
        ticks += 1
    assert ticks == 20 and not entered.is_set() and len(handed_off) == 1
    blocker.execute("COMMIT")
    blocker.close()
    await asyncio.wait_for(task, 10)
    assert entered.is_set() and lease_rows(db) == []


async def test_a_lease_taken_while_another_process_creates_the_database_waits_instead_of_failing(tmp_path: Path) -> None:
    # The first statement of a fresh lease connection creates the lease table; with another
    # connection holding an exclusive lock (a second process starting on the same new file), the
    # no-wait connection must hand over to the waiting one, not raise "database is locked".
    db = tmp_path / "t.sqlite"
    blocker = sqlite3.connect(db, isolation_level=None)
    blocker.execute("CREATE TABLE other (x)")
    blocker.execute("BEGIN EXCLUSIVE")
    leases = ThreadLeases("fresh", SqliteLeases(str(db)))

    async def turn() -> None:
        async with leases.hold("T", 10):
            pass

    task = asyncio.create_task(turn())
    await asyncio.sleep(0.2)
    assert not task.done()
    blocker.execute("COMMIT")
    blocker.close()
    await asyncio.wait_for(task, 10)
    assert lease_rows(db) == []


async def test_postgres_advisory_locks_exclude_a_second_connection(postgres_url: str) -> None:
    first = ThreadLeases("first", PostgresLeases(postgres_url))
    second = ThreadLeases("second", PostgresLeases(postgres_url))  # own in-process scope, own connection
    async with first.hold("pg-T", 0):
        with pytest.raises(ThreadBusy, match="advisory lock"):
            async with second.hold("pg-T", 0.2):
                pass
        async with second.hold("other-thread", 0):
            pass
    async with second.hold("pg-T", 0):
        pass


def test_postgres_thread_waits_for_another_process(postgres_url: str, tmp_path: Path) -> None:
    in_tool, release = tmp_path / "in-tool", tmp_path / "release"
    thread = f"pg-{tmp_path.name}"
    proc = start_worker("hold", postgres_url, thread, str(in_tool), str(release))
    try:
        wait_for(in_tool, proc)
        impatient = Agent(FunctionModel(stamper), [stamp], checkpointer=postgres_url, thread_wait_s=0.2)
        with pytest.raises(ThreadBusy, match="advisory lock"):
            impatient.invoke("too early", thread)
        impatient.close()
        release.write_text("go")
        agent = Agent(FunctionModel(stamper), [stamp], checkpointer=postgres_url, thread_wait_s=30)
        result = agent.invoke("after", thread)
        history = agent.history(thread)
        agent.close()
        proc.communicate(timeout=30)
        assert proc.returncode == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert result.output == "done after"
    assert [m.text for m in history if m.role == "user"] == ["hold it", "after"]
    assert [m.text for m in history if m.role == "tool"] == ["released held", "stamped after"]


def test_postgres_lock_of_a_killed_process_goes_with_its_connection(postgres_url: str, tmp_path: Path) -> None:
    in_tool, release = tmp_path / "in-tool", tmp_path / "release"
    thread = f"pg-{tmp_path.name}"
    proc = start_worker("hold", postgres_url, thread, str(in_tool), str(release))
    try:
        wait_for(in_tool, proc)
        os.kill(proc.pid, signal.SIGKILL)
        proc.communicate()
        agent = Agent(ScriptedModel([reply("finished")]), [thread_worker.wait_for_release],
                      checkpointer=postgres_url, thread_wait_s=10)
        started = time.monotonic()
        result = agent.continue_thread(thread)
        elapsed = time.monotonic() - started
        agent.close()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert result.output == "finished" and elapsed < 5


async def test_postgres_many_concurrent_turns_share_one_lock_session(postgres_url: str) -> None:
    # 120 turns at once on distinct threads: a connection per hold would pass the throwaway
    # cluster's max_connections (100) and fail turns with "too many clients".
    import psycopg

    agent = Agent(FunctionModel(lambda request: "ok"), checkpointer=postgres_url)
    leases = agent._thread_leases()
    results = await asyncio.gather(*(agent.ainvoke(f"m{i}", f"many-{i}") for i in range(120)))
    assert [r.termination for r in results] == ["agent_stop"] * 120
    assert all(r.output == "ok" for r in results)
    async with await psycopg.AsyncConnection.connect(postgres_url, autocommit=True) as probe:
        cur = await probe.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'")
        assert (await cur.fetchone())[0] == 0  # every hold was given back
    assert len(leases.remote._sessions) == 1  # type: ignore[union-attr]  (one loop, one session)
    await agent.aclose()


async def test_postgres_broken_lock_session_marks_holds_lost_and_reconnects(postgres_url: str) -> None:
    import psycopg

    leases = PostgresLeases(postgres_url)
    handle = await leases.acquire("broken-session", None)
    session, _ = handle
    pid = session.conn.info.backend_pid
    async with await psycopg.AsyncConnection.connect(postgres_url, autocommit=True) as admin:
        await admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
    assert await leases.renew(handle) is False  # the lock went with the session
    await leases.release(handle)  # nothing to give back, and no error
    again = await leases.acquire("broken-session", time.monotonic() + 5)
    assert again[0] is not session and await leases.renew(again)
    await leases.release(again)
    await leases.aclose()

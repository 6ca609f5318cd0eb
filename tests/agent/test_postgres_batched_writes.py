"""rein's Postgres saver commits a run's step writes in its checkpoint's transaction
(agent.checkpoint_postgres.BatchedPostgresSaver), against a real PostgreSQL (tests/pg_cluster.py).

What it must keep of the plain saver: the same stored thread; no step write visible before the
checkpoint it belongs with, and all of them with it; a failure between writes and checkpoint
leaves neither; a read inside the batch sees what is held; a cancelled run still commits what it
stored. What it changes: one write transaction per tool turn instead of one per step write.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator
from typing import Any

import pytest
from checkpoint_util import fresh_postgres_database, new_checkpoint, root_checkpoint, thread_config
from langgraph.checkpoint.base import Checkpoint

from agent import Agent, FunctionModel, ModelRequest, ModelResponse, ToolCall
from agent.checkpoint import open_checkpointer
from tools import ToolKind, tool

psycopg = pytest.importorskip("psycopg", reason="the postgres extra is not installed")


@tool(kind=ToolKind.READ)
def lookup(key: str) -> str:
    """Look a key up."""
    return f"value-of-{key}"


def _tool_then_answer(request: ModelRequest) -> ModelResponse:
    if request.messages[-1].role == "tool":
        return ModelResponse(text=f"done: {request.messages[-1].text}")
    return ModelResponse(tool_calls=[ToolCall(id="c1", name="lookup", arguments='{"key": "k"}')], finish_reason="tool_calls")



@pytest.fixture
async def db(postgres_url: str) -> str:
    return await fresh_postgres_database(postgres_url, "batch")


@pytest.fixture
async def saver(db: str) -> AsyncIterator[Any]:
    from agent.checkpoint_postgres import BatchedPostgresSaver

    async with contextlib.AsyncExitStack() as stack:
        opened = await open_checkpointer(db, stack)
        assert isinstance(opened, BatchedPostgresSaver)
        yield opened


@pytest.fixture
async def other(db: str) -> AsyncIterator[Any]:
    """Another connection to the same database: what another process would see."""
    async with await psycopg.AsyncConnection.connect(db, autocommit=True) as conn:
        yield conn


async def _count(conn: Any, table: str, thread: str) -> int:
    cursor = await conn.execute(f"SELECT count(*) FROM {table} WHERE thread_id = %s", (thread,))
    row = await cursor.fetchone()
    return int(row[0])





async def test_held_writes_become_visible_with_their_checkpoint_and_not_before(saver: Any, other: Any) -> None:
    root = await root_checkpoint(saver, "t1")
    async with saver.batch("t1"):
        await saver.aput_writes(thread_config("t1", root), [("messages", ["hello"]), ("note", "x")], "task-1")
        await saver.aput_writes(thread_config("t1", root), [("messages", ["again"])], "task-2")
        assert await _count(other, "checkpoint_writes", "t1") == 0

        step = new_checkpoint(messages=["hello", "again"])
        await saver.aput(thread_config("t1", root), step, {"source": "loop", "step": 0}, {"messages": 1})
        assert await _count(other, "checkpoint_writes", "t1") == 3
        assert await _count(other, "checkpoints", "t1") == 2

        # Writes after the last checkpoint (an interrupt's) have none to ride with: the batch's end commits them.
        await saver.aput_writes(thread_config("t1", step["id"]), [("__interrupt__", "ask")], "task-3")
        assert await _count(other, "checkpoint_writes", "t1") == 3
    assert await _count(other, "checkpoint_writes", "t1") == 4


async def test_a_failed_checkpoint_leaves_neither_it_nor_its_writes(saver: Any, other: Any) -> None:
    root = await root_checkpoint(saver, "t2")
    # One failure in the client (a value the serializer refuses, after the writes went out in the
    # transaction) and one in the server (Postgres refuses \u0000 in jsonb, in the checkpoint's INSERT).
    failures: list[tuple[Checkpoint, dict[str, Any], dict[str, Any], type[BaseException]]] = [
        (new_checkpoint(messages=threading.Lock()), {"source": "loop", "step": 0}, {"messages": 1}, TypeError),
        (new_checkpoint(score=float("nan")), {"source": "loop", "step": 0}, {}, psycopg.errors.InvalidTextRepresentation),
    ]
    for checkpoint, metadata, versions, error in failures:
        async with saver.batch("t2"):
            await saver.aput_writes(thread_config("t2", root), [("messages", ["lost"])], "task-1")
            with pytest.raises(error):
                await saver.aput(thread_config("t2", root), checkpoint, metadata, versions)
            assert await _count(other, "checkpoint_writes", "t2") == 0
        assert await _count(other, "checkpoint_writes", "t2") == 0
        assert await _count(other, "checkpoints", "t2") == 1
    # The connection is usable again after the rolled-back transaction.
    async with saver.batch("t2"):
        await saver.aput_writes(thread_config("t2", root), [("messages", ["kept"])], "task-1")
        await saver.aput(thread_config("t2", root), new_checkpoint(), {"source": "loop", "step": 0}, {})
    assert await _count(other, "checkpoint_writes", "t2") == 1
    assert await _count(other, "checkpoints", "t2") == 2


async def test_reads_inside_a_batch_see_the_held_writes(saver: Any, other: Any) -> None:
    root = await root_checkpoint(saver, "t3")
    async with saver.batch("t3"):
        await saver.aput_writes(thread_config("t3", root), [("messages", ["held"])], "task-1")
        found = await saver.aget_tuple(thread_config("t3", root))
        assert [(task, channel, value) for task, channel, value in found.pending_writes] == [("task-1", "messages", ["held"])]

        await saver.aput_writes(thread_config("t3", root), [("note", "also held")], "task-2")
        listed = [t async for t in saver.alist(thread_config("t3"))]
        assert sorted(channel for _, channel, _ in listed[0].pending_writes) == ["messages", "note"]
        # The read committed them: another connection sees them too, before the batch ends.
        assert await _count(other, "checkpoint_writes", "t3") == 2


async def test_a_cancelled_run_still_commits_what_it_stored(saver: Any, other: Any) -> None:
    root = await root_checkpoint(saver, "t4")
    stored = asyncio.Event()

    async def run() -> None:
        async with saver.batch("t4"):
            await saver.aput_writes(thread_config("t4", root), [("messages", ["stored"])], "task-1")
            stored.set()
            await asyncio.Event().wait()

    task = asyncio.create_task(run())
    await stored.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await _count(other, "checkpoint_writes", "t4") == 1


async def _next_xid(conn: Any) -> int:
    """The cluster's next transaction id: it grows by one per transaction that wrote anything."""
    cursor = await conn.execute("SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint")
    row = await cursor.fetchone()
    return int(row[0])


async def _transactions(conn: Any, table: str, thread: str) -> set[int]:
    """The transactions that wrote the thread's rows in table (a row's xmin; none is updated here)."""
    cursor = await conn.execute(f"SELECT DISTINCT xmin::text::bigint FROM {table} WHERE thread_id = %s", (thread,))
    return {int(row[0]) for row in await cursor.fetchall()}


async def _thread_rows(conn: Any, thread: str) -> tuple[list[Any], list[Any]]:
    """The thread's stored rows with the ids (which differ by run) left out."""
    cursor = await conn.execute(
        "SELECT metadata->>'source', metadata->>'step' FROM checkpoints WHERE thread_id = %s ORDER BY checkpoint_id", (thread,)
    )
    checkpoints = await cursor.fetchall()
    cursor = await conn.execute(
        "SELECT task_path, idx, channel, type FROM checkpoint_writes WHERE thread_id = %s ORDER BY 1, 2, 3, 4", (thread,)
    )
    return checkpoints, await cursor.fetchall()


async def test_a_tool_turn_stores_the_same_thread_and_commits_its_writes_with_its_checkpoint(postgres_url: str) -> None:
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

    dbs = {"batched": await fresh_postgres_database(postgres_url, "batch"), "plain": await fresh_postgres_database(postgres_url, "batch")}
    turns = 4
    spent: dict[str, float] = {}
    async with AsyncPostgresSaver.from_conn_string(dbs["plain"]) as plain_saver, contextlib.AsyncExitStack() as stack:
        await plain_saver.setup()
        agents = {
            "batched": Agent(FunctionModel(_tool_then_answer), [lookup], checkpointer=dbs["batched"]),
            "plain": Agent(FunctionModel(_tool_then_answer), [lookup], checkpointer=plain_saver),
        }
        # The same durability on both, so that only the saver differs (a ready saver object would
        # get "sync"); the turn journal, whose transactions are its own, is left out.
        for agent in agents.values():
            agent._durability, agent._turn_journal = "exit", False
        watcher = await stack.enter_async_context(await psycopg.AsyncConnection.connect(postgres_url, autocommit=True))
        for name, agent in agents.items():
            await stack.enter_async_context(agent)
            await agent.ainvoke("warm up", f"{name}-warm")
            before = await _next_xid(watcher)
            for _ in range(turns):
                result = await agent.ainvoke("go", "thread")
                assert result.output == "done: value-of-k"
            # Every write transaction in the cluster, per turn (the tool journal's too, for the batched agent).
            spent[name] = (await _next_xid(watcher) - before) / turns
        histories = {
            name: [(m.role, m.text, [c.name for c in m.tool_calls]) for m in await agent.ahistory("thread")]
            for name, agent in agents.items()
        }
        stored: dict[str, Any] = {}
        wrote: dict[str, dict[str, set[int]]] = {}
        for name, db in dbs.items():
            conn = await stack.enter_async_context(await psycopg.AsyncConnection.connect(db, autocommit=True))
            stored[name] = await _thread_rows(conn, "thread")
            wrote[name] = {t: await _transactions(conn, t, "thread") for t in ("checkpoints", "checkpoint_blobs", "checkpoint_writes")}
    assert histories["batched"] == histories["plain"] and len(histories["batched"]) == 4 * turns
    assert stored["batched"] == stored["plain"] and stored["batched"][1]
    batched, plain = wrote["batched"], wrote["plain"]
    # Batched, the step writes and blobs went in the transactions of the checkpoints, one or two a turn
    # (LangGraph stores an input checkpoint on a thread's first run).
    assert batched["checkpoint_writes"] <= batched["checkpoints"] and batched["checkpoint_blobs"] <= batched["checkpoints"]
    assert len(batched["checkpoints"]) == turns + 1
    # Plain, every step-write call was a transaction of its own.
    assert not plain["checkpoint_writes"] & plain["checkpoints"] and len(plain["checkpoint_writes"]) >= 2 * turns
    # (The plain agent's tool journal is in memory: a ready saver object gives rein no database for it.)
    assert spent["plain"] == (len(plain["checkpoints"]) + len(plain["checkpoint_writes"])) / turns

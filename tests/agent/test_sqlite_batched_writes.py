"""rein's SQLite saver commits a run's step writes in its checkpoint's transaction
(agent.checkpoint.BatchedSqliteSaver), on a real SQLite file read back by a second connection.

The same contract as the Postgres saver (tests/agent/test_postgres_batched_writes.py): no step
write visible before its checkpoint and all of them with it; a failed checkpoint leaves neither
and the connection works afterwards; threads sharing the saver's one connection do not undo or
commit each other's held rows.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from checkpoint_util import new_checkpoint, root_checkpoint, thread_config

from agent.checkpoint import BatchedSqliteSaver, open_checkpointer


@pytest.fixture
async def saver(tmp_path: Path) -> AsyncIterator[BatchedSqliteSaver]:
    async with contextlib.AsyncExitStack() as stack:
        opened = await open_checkpointer(f"sqlite:{tmp_path / 'threads.sqlite'}", stack)
        assert isinstance(opened, BatchedSqliteSaver)
        yield opened


@pytest.fixture
def other(tmp_path: Path, saver: BatchedSqliteSaver) -> Iterator[sqlite3.Connection]:
    """Another connection to the same file: what another process would see."""
    conn = sqlite3.connect(tmp_path / "threads.sqlite")
    yield conn
    conn.close()


def _count(conn: sqlite3.Connection, table: str, thread: str) -> int:
    return int(conn.execute(f"SELECT count(*) FROM {table} WHERE thread_id = ?", (thread,)).fetchone()[0])





async def test_held_writes_become_visible_with_their_checkpoint_and_not_before(saver: BatchedSqliteSaver, other: sqlite3.Connection) -> None:
    root = await root_checkpoint(saver, "t1")
    async with saver.batch("t1"):
        await saver.aput_writes(thread_config("t1", root), [("messages", ["hello"]), ("note", "x")], "task-1")
        assert _count(other, "writes", "t1") == 0
        step = new_checkpoint(messages=["hello"])
        await saver.aput(thread_config("t1", root), step, {"source": "loop", "step": 0}, {"messages": 1})
        assert _count(other, "writes", "t1") == 2 and _count(other, "checkpoints", "t1") == 2
        await saver.aput_writes(thread_config("t1", step["id"]), [("__interrupt__", "ask")], "task-2")
        assert _count(other, "writes", "t1") == 2
    assert _count(other, "writes", "t1") == 3  # the batch's end commits what no checkpoint followed


async def test_a_failed_checkpoint_leaves_neither_it_nor_its_writes(saver: BatchedSqliteSaver, other: sqlite3.Connection) -> None:
    root = await root_checkpoint(saver, "t2")
    async with saver.batch("t2"):
        await saver.aput_writes(thread_config("t2", root), [("messages", ["lost"])], "task-1")
        with pytest.raises(TypeError):  # the serializer refuses a lock
            await saver.aput(thread_config("t2", root), new_checkpoint(messages=threading.Lock()), {"source": "loop", "step": 0}, {"messages": 1})
    # Another thread's commit on the shared connection must not carry the rolled-back rows along.
    await root_checkpoint(saver, "t3")
    assert _count(other, "writes", "t2") == 0 and _count(other, "checkpoints", "t2") == 1
    async with saver.batch("t2"):
        await saver.aput_writes(thread_config("t2", root), [("messages", ["kept"])], "task-1")
        await saver.aput(thread_config("t2", root), new_checkpoint(), {"source": "loop", "step": 0}, {})
    assert _count(other, "writes", "t2") == 1 and _count(other, "checkpoints", "t2") == 2


async def test_threads_on_one_connection_keep_their_own_held_rows(saver: BatchedSqliteSaver, other: sqlite3.Connection) -> None:
    roots = {t: await root_checkpoint(saver, t) for t in ("a", "b")}

    async def run(thread: str, fail: bool) -> None:
        async with saver.batch(thread):
            for i in range(20):
                await saver.aput_writes(thread_config(thread, roots[thread]), [("messages", [f"{thread}{i}"])], f"task-{i}")
                await asyncio.sleep(0)
            bad = threading.Lock() if fail else None
            await saver.aput(thread_config(thread, roots[thread]), new_checkpoint(messages=bad), {"source": "loop", "step": 0}, {"messages": 1})

    done = await asyncio.gather(run("a", fail=False), run("b", fail=True), return_exceptions=True)
    assert done[0] is None and isinstance(done[1], TypeError)
    assert _count(other, "writes", "a") == 20 and _count(other, "checkpoints", "a") == 2
    assert _count(other, "writes", "b") == 0 and _count(other, "checkpoints", "b") == 1


async def test_reads_in_one_hand_off_equal_langgraphs_async_reads(tmp_path: Path) -> None:
    import aiosqlite
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    from agent import Agent
    from agent.models import EchoModel
    from agent.nodes.state import SNAPSHOT_EVERY

    db = tmp_path / "threads.sqlite"
    # Enough turns that the delta history spans a full copy of the message list.
    async with Agent(EchoModel(), [], checkpointer=f"sqlite:{db}") as agent:
        for i in range(SNAPSHOT_EVERY + 3):
            await agent.ainvoke(f"turn {i}", "t1")
    async with contextlib.AsyncExitStack() as stack:
        saver = await open_checkpointer(f"sqlite:{db}", stack)
        plain = AsyncSqliteSaver(await stack.enter_async_context(aiosqlite.connect(db)))
        latest = await saver.aget_tuple(thread_config("t1"))
        assert latest is not None
        # A write stored after the latest checkpoint comes back as its pending write.
        await saver.aput_writes(latest.config, [("__interrupt__", "ask")], "task-late")
        handoffs = 0
        execute = saver.conn._execute

        async def counted(fn, *args, **kwargs):
            nonlocal handoffs
            handoffs += 1
            return await execute(fn, *args, **kwargs)

        saver.conn._execute = counted
        for config in (thread_config("t1"), latest.config, thread_config("t1", latest.parent_config["configurable"]["checkpoint_id"])):
            handoffs = 0
            mine, theirs = await saver.aget_tuple(config), await plain.aget_tuple(config)
            assert handoffs == 1
            assert mine is not None and theirs is not None
            assert (mine.config, mine.checkpoint, mine.metadata, mine.parent_config, mine.pending_writes) == (
                theirs.config, theirs.checkpoint, theirs.metadata, theirs.parent_config, theirs.pending_writes)
            channels = ["messages", "ledger", "interventions"]
            handoffs = 0
            history = await saver.aget_delta_channel_history(config=config, channels=channels)
            assert handoffs == 1
            assert history == await plain.aget_delta_channel_history(config=config, channels=channels)
        assert len(history["messages"]["writes"]) > 0
        assert await saver.aget_tuple(thread_config("no-such-thread")) is None

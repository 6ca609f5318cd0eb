"""Opening the SQLite checkpoint database: WAL set up under contention, nothing left running on failure."""

from __future__ import annotations

import asyncio
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from agent.checkpoint import connect_sqlite

ROOT = Path(__file__).resolve().parents[2]


async def test_wal_switch_waits_for_a_writer_in_rollback_mode(tmp_path: Path) -> None:
    # Another process's lease write (BEGIN IMMEDIATE) on a database that is not in WAL mode yet:
    # SQLite refuses the switch at once instead of waiting out the busy timeout.
    db = tmp_path / "threads.sqlite"
    writer = sqlite3.connect(db, isolation_level=None, check_same_thread=False)
    writer.execute("CREATE TABLE t (x)")
    writer.execute("BEGIN IMMEDIATE")
    writer.execute("INSERT INTO t VALUES (1)")
    threading.Timer(0.4, writer.execute, ("COMMIT",)).start()
    started = time.monotonic()
    conn = await connect_sqlite(db)
    try:
        assert time.monotonic() - started >= 0.3
        async with conn.execute("PRAGMA journal_mode") as cursor:
            assert (await cursor.fetchone())[0] == "wal"
    finally:
        await conn.close()
        writer.close()


async def test_a_failed_open_closes_its_connection(tmp_path: Path) -> None:
    db = tmp_path / "not-a-database.sqlite"
    db.write_bytes(b"this is not SQLite" * 100)
    # Compare thread identities, not a count: a thread left by an earlier test may end meanwhile.
    before = set(threading.enumerate())
    with pytest.raises(sqlite3.DatabaseError):
        await connect_sqlite(db)
    await asyncio.sleep(0.05)
    assert [t for t in threading.enumerate() if t not in before] == []


def test_a_program_that_dies_before_closing_its_agent_still_exits(tmp_path: Path) -> None:
    spec = f"sqlite:{tmp_path / 't.sqlite'}"
    script = (
        "import asyncio\n"
        "from agent import Agent, ScriptedModel\n"
        "async def main():\n"
        f"    agent = Agent(ScriptedModel(['hi']), checkpointer={spec!r})\n"
        "    await agent.ainvoke('hello', 'T')\n"
        "    raise SystemExit(3)\n"
        "asyncio.run(main())\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 3, proc.stderr

"""Checkpointers: SQLite by default (WAL, busy timeout), in-memory for tests, Postgres as an option."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    get_checkpoint_metadata,
)
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

from agent.checkpoint_batching import HeldWrites, WriteBatching
from agent.errors import UserFacingError
from agent.sqlite_file import FileWatch, create_private

BUSY_TIMEOUT_MS = 10_000


def default_home() -> Path:
    """Where rein keeps its threads database: $REIN_HOME, else ~/.local/share/rein."""
    return Path(os.environ.get("REIN_HOME") or Path.home() / ".local" / "share" / "rein")


def default_sqlite_path() -> Path:
    """The default threads database."""
    return default_home() / "threads.sqlite"


def describe(spec: Any) -> str:
    """A short human name for a checkpointer spec."""
    return spec if isinstance(spec, str) else type(spec).__name__


@dataclass(frozen=True)
class Location:
    """Where a checkpointer spec keeps its data, for side tables that live beside the checkpoints."""

    kind: Literal["memory", "sqlite", "postgres", "custom"]
    """memory, sqlite, postgres, or custom (a ready saver object: rein cannot open its database)."""
    target: str | None = None
    """The SQLite file path or the Postgres connection string; None for memory and custom."""


def locate(spec: Any) -> Location:
    """The database a checkpointer spec names, without opening it; errors as open_checkpointer's."""
    if spec is None or spec == "sqlite":
        return Location("sqlite", str(default_sqlite_path()))
    if not isinstance(spec, str | os.PathLike):
        return Location("custom")
    text = os.fspath(spec)
    if text == "memory":
        return Location("memory")
    if text.startswith(("postgres://", "postgresql://")):
        return Location("postgres", text)
    path = Path(text.removeprefix("sqlite:"))
    if not text.startswith("sqlite:") and path.suffix not in (".sqlite", ".db", ".sqlite3"):
        raise UserFacingError(
            f"unknown checkpointer {text!r}: use memory, sqlite[:PATH], a .sqlite path, or postgres://…"
        )
    return Location("sqlite", str(path))


async def open_checkpointer(spec: Any, stack: contextlib.AsyncExitStack) -> Any:
    """Open a checkpointer in the running event loop; resources close with the stack.

    spec: "memory"; "sqlite" (default path) or "sqlite:PATH" or a path ending in .sqlite/.db;
    "postgres://…" / "postgresql://…" (needs the `postgres` extra); or a ready saver object.
    """
    where = locate(spec)
    if where.kind == "custom":
        return spec
    if where.kind == "memory":
        from langgraph.checkpoint.memory import InMemorySaver

        return InMemorySaver()
    if where.kind == "postgres":
        try:
            from agent.checkpoint_postgres import BatchedPostgresSaver
        except ImportError:
            raise UserFacingError(
                "Postgres checkpointing needs the postgres extra: pip install 'rein-runtime[postgres]'"
            ) from None
        saver = await stack.enter_async_context(BatchedPostgresSaver.from_conn_string(where.target or ""))
        await saver.setup()
        return saver
    return await _open_sqlite(Path(where.target or ""), stack)


async def connect_sqlite(path: str | Path, synchronous: Literal["NORMAL", "FULL"] = "NORMAL") -> Any:
    """An aiosqlite connection to path in WAL mode with the busy timeout set; closed again if setting up fails.

    Two processes that open a new database at once race to switch it to WAL, and the switch
    answers "database is locked" at once rather than waiting out the busy timeout, so it is
    retried here until the timeout.
    """
    import aiosqlite

    create_private(path)
    conn = aiosqlite.connect(str(path), timeout=BUSY_TIMEOUT_MS / 1000)
    # aiosqlite's worker thread is not a daemon: a program that ends by an exception before it
    # closes its Agent would hang at exit. SQLite's commits are atomic, so dying mid-call is safe.
    worker = getattr(conn, "_thread", None)
    if isinstance(worker, threading.Thread):
        worker.daemon = True
    await conn
    try:
        await conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
        pause = 0.005
        while True:
            try:
                async with conn.execute("PRAGMA journal_mode=WAL") as cursor:
                    row = await cursor.fetchone()
                break
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    raise
            await asyncio.sleep(pause)
            pause = min(pause * 2, 0.2)
        if row is None or str(row[0]).lower() != "wal":
            raise UserFacingError(f"{path}: SQLite could not switch the database to WAL mode (it stays {row and row[0]!r})")
        await conn.execute(f"PRAGMA synchronous={synchronous}")
    except BaseException:
        await conn.close()
        raise
    return conn


async def on_sqlite_thread(conn: Any, call: Callable[..., Any], *args: Any) -> Any:
    """call(sqlite3 connection, *args) run on an aiosqlite connection's own thread, in one hand-off.

    aiosqlite hands each statement, fetch, cursor close and commit to its thread separately (a queue
    put, a thread wake-up and an event-loop wake-up each); work done here as one call costs one, and
    no other caller's statements come between its own. Uses aiosqlite's `Connection._execute`,
    hence the bound on aiosqlite's version in pyproject.toml."""
    return await conn._execute(call, conn._conn, *args)


def commit_statements(conn: sqlite3.Connection, many: HeldWrites, single: Sequence[tuple[str, Sequence[Any]]]) -> None:
    """For `on_sqlite_thread`: each (statement, rows) of `many` by executemany, then each (statement,
    parameters) of `single`, in one transaction; none of them when any fails."""
    try:
        for sql, rows in many:
            conn.executemany(sql, rows)
        for sql, params in single:
            conn.execute(sql, params)
        conn.commit()
    except BaseException:
        conn.rollback()
        raise


async def _open_sqlite(path: Path, stack: contextlib.AsyncExitStack) -> Any:
    # WAL lets readers run beside the writer; the busy timeout turns "database is locked" into a wait.
    conn = await connect_sqlite(path)
    stack.push_async_callback(close_sqlite, conn)
    saver = BatchedSqliteSaver(conn)
    await saver.setup()
    saver.watch = FileWatch.take(path)  # after setup: the -wal file exists by then
    return saver


CLOSE_CHECKPOINT_WAIT_MS = 2_000
"""How long closing waits for other connections' readers to let the write-ahead log be emptied."""


async def close_sqlite(conn: Any) -> None:
    """Close a connection from `connect_sqlite`, first copying the write-ahead log into the database
    file and emptying it.

    SQLite does that by itself only when the last connection to the file closes, and another
    connection (the thread leases', another process's) is often still open then: the committed
    threads stayed in the -wal file alone, and a backup of the .sqlite file alone held none of them."""
    try:
        await conn.execute(f"PRAGMA busy_timeout={CLOSE_CHECKPOINT_WAIT_MS}")
        await conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    except sqlite3.Error:
        pass  # nothing is lost: the log stays beside the file and is replayed on the next open
    finally:
        await conn.close()


_WRITE_SQL = (
    "INSERT OR {} INTO writes (thread_id, checkpoint_ns, checkpoint_id, task_id, task_path, idx, channel, type, value) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
)


class BatchedSqliteSaver(WriteBatching, AsyncSqliteSaver):
    """LangGraph's SQLite saver, committing a run's step writes with its checkpoint (`WriteBatching`),
    each of its reads and commits in one hand-off to aiosqlite's thread.

    Held rows and the checkpoint are written and committed by one call on that thread, and a
    checkpoint that fails rolls its held rows back with it. LangGraph's async saver hands every
    statement, fetch, cursor close and commit to that thread one at a time (about fifteen hand-offs,
    each a queue put, a thread wake and an event-loop wake, to load a thread at the start of a run,
    and three more per held write and checkpoint); here its sync twin, given the same sqlite3 connection on
    that thread, reads with the same statements in one hand-off, and the writes go in one as well
    (`on_sqlite_thread`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._txn = asyncio.Lock()
        self._twin: SqliteSaver | None = None
        self.watch: FileWatch | None = None
        """The database file as opened (set by `open_checkpointer`): each commit checks that it is still
        the file at its path, since one deleted or replaced meanwhile takes the commit with it."""

    async def aget_tuple(self, config: RunnableConfig) -> Any:
        await self._flush(config)
        return await self._read(lambda twin: twin.get_tuple(config))

    async def aget_delta_channel_history(self, *, config: RunnableConfig, channels: Sequence[str]) -> Mapping[str, Any]:
        await self._flush(config)
        return await self._read(lambda twin: twin.get_delta_channel_history(config=config, channels=channels))

    async def _read(self, read: Callable[[SqliteSaver], Any]) -> Any:
        """read(twin), with LangGraph's sync saver on this saver's sqlite3 connection, on its thread."""
        await self.setup()
        twin = self._twin
        if twin is None:  # the saver keeps its one connection for life
            twin = self._twin = SqliteSaver(self.conn._conn, serde=self.serde)
            twin.is_setup = True  # the tables exist: setup() above
            twin._has_task_path = self._has_task_path
        return await self._on_thread(lambda _: read(twin))

    async def _on_thread(self, call: Callable[..., Any], *args: Any) -> Any:
        """`on_sqlite_thread` on the saver's connection, under the saver's lock."""
        async with self.lock:
            return await on_sqlite_thread(self.conn, call, *args)

    def _held_rows(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str) -> tuple[str, list[tuple[Any, ...]]]:
        conf = config["configurable"]
        verb = "REPLACE" if all(w[0] in WRITES_IDX_MAP for w in writes) else "IGNORE"
        rows = [
            (str(conf["thread_id"]), str(conf["checkpoint_ns"]), str(conf["checkpoint_id"]), task_id, task_path,
             WRITES_IDX_MAP.get(channel, idx), channel, *self.serde.dumps_typed(value))
            for idx, (channel, value) in enumerate(writes)
        ]
        return _WRITE_SQL.format(verb), rows

    async def aput(
        self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata, new_versions: ChannelVersions
    ) -> RunnableConfig:
        await self.setup()
        conf = config["configurable"]
        async with self._txn:
            # Taken first: a checkpoint that cannot be stored takes its writes with it (as on Postgres).
            held = self._take_held(str(conf["thread_id"]))
            metadata_json = json.dumps(get_checkpoint_metadata(config, metadata), ensure_ascii=False)
            row = (str(conf["thread_id"]), conf["checkpoint_ns"], checkpoint["id"], conf.get("checkpoint_id"),
                   *self.serde.dumps_typed(checkpoint), metadata_json.encode("utf-8", "ignore"))
            await self._on_thread(commit_statements, held, [(_CHECKPOINT_SQL, row)])
            self._check_file()
        return self._stored(
            {"configurable": {"thread_id": conf["thread_id"], "checkpoint_ns": conf["checkpoint_ns"], "checkpoint_id": checkpoint["id"]}}
        )

    async def _commit_held(self, thread_id: str) -> None:
        async with self._txn:
            held = self._take_held(thread_id)
            if held:
                await self.setup()
                await self._on_thread(commit_statements, held, ())
                self._check_file()

    def _check_file(self) -> None:
        # After the commit: one that raced a deletion is reported, not confirmed.
        if self.watch is not None:
            self.watch.check()


_CHECKPOINT_SQL = (
    "INSERT OR REPLACE INTO checkpoints (thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, checkpoint, metadata) "
    "VALUES (?, ?, ?, ?, ?, ?, ?)"
)


def durability_for(spec: Any, has_tools: bool) -> Literal["sync", "async", "exit"]:
    """When LangGraph commits a turn's steps for a checkpointer spec: "exit" (once, when the run
    ends or pauses), "sync" (each step before the next starts) or "async" (in the background).

    SQLite and Postgres commit once per turn, with or without tools: a turn whose model asks for
    tools journals each such model step, and each call's answer, in the same database before the
    tools run (agent/journal.py), so a process killed mid-turn loses nothing a tool acted on. A
    killed turn that never asked for tools loses only itself (its user message and model calls),
    which the client's retry runs again. A custom saver has no journal rein can make durable, so
    with tools it commits every step. Memory has nothing to lose."""
    try:
        kind = locate(spec).kind
    except UserFacingError:  # reported when the checkpointer is opened
        kind = "custom"
    if kind == "memory":
        return "async"
    if kind in ("sqlite", "postgres") or not has_tools:
        return "exit"
    return "sync"


_LATEST_ID_SQL = "SELECT checkpoint_id FROM checkpoints WHERE thread_id = {} AND checkpoint_ns = '' ORDER BY checkpoint_id DESC LIMIT 1"


async def latest_checkpoint_id(saver: Any, thread_id: str) -> str | None:
    """The id of the thread's latest checkpoint (None for a thread without one), without loading it.

    Checkpoint ids only grow and every commit of a thread writes a new one, so the id tells whether
    a thread changed since it was last seen. On SQLite and Postgres it is one indexed query on the
    saver's own table and connection; other savers load the latest checkpoint to read its id."""
    if isinstance(saver, AsyncSqliteSaver):
        async with saver.lock:  # one hand-off to aiosqlite's thread: statement and fetch together
            rows = list(await saver.conn.execute_fetchall(_LATEST_ID_SQL.format("?"), (thread_id,)))
        return str(rows[0][0]) if rows else None
    # By name, so that the lean install never imports the postgres extra to answer.
    if any(cls.__name__ == "AsyncPostgresSaver" for cls in type(saver).__mro__):
        async with saver._cursor() as cursor:
            await cursor.execute(_LATEST_ID_SQL.format("%s"), (thread_id,))
            found = await cursor.fetchone()
        return None if found is None else str(found["checkpoint_id"])
    latest = await saver.aget_tuple({"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}})
    return None if latest is None else str(latest.config["configurable"]["checkpoint_id"])

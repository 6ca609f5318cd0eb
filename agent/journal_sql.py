"""The tool journal's SQL backends: tables in the checkpointer's own SQLite file or Postgres database.

Each opens a connection of its own beside the checkpointer's. `open_journal` picks the backend the
checkpointer spec names (the memory journal for the memory and custom checkpointers).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from abc import abstractmethod
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from agent.checkpoint import commit_statements, connect_sqlite, locate, on_sqlite_thread
from agent.journal import TABLE, Entry, MemoryJournal, ToolJournal, TurnRecord

_COLUMNS = "thread, step, call_id, state, seq, result, surfaced, at"
_CREATE = f"""CREATE TABLE IF NOT EXISTS {TABLE} (
    thread TEXT NOT NULL, step TEXT NOT NULL, call_id TEXT NOT NULL, state TEXT NOT NULL,
    seq INTEGER NOT NULL, result TEXT, surfaced INTEGER NOT NULL DEFAULT 0, at DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (thread, step, call_id, state))"""
_UPSERT = f"""INSERT INTO {TABLE} ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)
    ON CONFLICT (thread, step, call_id, state)
    DO UPDATE SET seq = excluded.seq, result = excluded.result, surfaced = excluded.surfaced, at = excluded.at"""
_STEP = f"SELECT {_COLUMNS} FROM {TABLE} WHERE thread = ? AND step = ? AND state <> 'late'"
_LATE = f"SELECT {_COLUMNS} FROM {TABLE} WHERE thread = ? AND state = 'late' AND (surfaced = 0 OR seq = ?) ORDER BY at"
_FORGET = f"DELETE FROM {TABLE} WHERE thread = ? AND seq < ? AND (state <> 'late' OR surfaced = 1)"

TURN_TABLE = "rein_turn_journal"
_CREATE_TURNS = f"""CREATE TABLE IF NOT EXISTS {TURN_TABLE} (
    thread TEXT NOT NULL, idx INTEGER NOT NULL, base INTEGER NOT NULL, tip TEXT NOT NULL,
    kind TEXT NOT NULL, body {{blob}} NOT NULL, at DOUBLE PRECISION NOT NULL, PRIMARY KEY (thread, idx))"""
_TURN_UPSERT = f"""INSERT INTO {TURN_TABLE} (thread, idx, base, tip, kind, body, at) VALUES (?, ?, ?, ?, ?, ?, ?)
    ON CONFLICT (thread, idx)
    DO UPDATE SET base = excluded.base, tip = excluded.tip, kind = excluded.kind, body = excluded.body, at = excluded.at"""
_TURN = f"SELECT thread, idx, base, tip, kind, body FROM {TURN_TABLE} WHERE thread = ? ORDER BY idx"
_TURN_DROP = f"DELETE FROM {TURN_TABLE} WHERE thread = ?"
# The checkpointer's own serializer: a turn record holds state updates, which it round-trips as a
# checkpoint would (JSON would not, for every value a message may carry).
_SERDE = JsonPlusSerializer()


class _SqlJournal(ToolJournal):
    """The journal on a SQL connection; subclasses run statements written with ? placeholders."""

    @abstractmethod
    async def _execute(self, sql: str, params: Sequence[Any]) -> None: ...

    @abstractmethod
    async def _fetch(self, sql: str, params: Sequence[Any]) -> list[Sequence[Any]]: ...

    async def record(self, entry: Entry) -> None:
        result = json.dumps(entry.result) if entry.result is not None else None
        await self._execute(
            _UPSERT,
            (entry.thread, entry.step, entry.call_id, entry.state, entry.seq, result, int(entry.surfaced), time.time()),
        )

    async def step(self, thread: str, step: str) -> list[Entry]:
        return [_entry(row) for row in await self._fetch(_STEP, (thread, step))]

    async def late(self, thread: str, seq: int) -> list[Entry]:
        return [_entry(row) for row in await self._fetch(_LATE, (thread, seq))]

    async def forget(self, thread: str, before_seq: int) -> None:
        await self._execute(_FORGET, (thread, before_seq))

    async def record_turn(self, record: TurnRecord) -> None:
        kind, body = _SERDE.dumps_typed(record.updates)
        await self._execute(_TURN_UPSERT, (record.thread, record.index, record.base, record.tip, kind, body, time.time()))

    async def turn(self, thread: str) -> list[TurnRecord]:
        return [
            TurnRecord(t, int(i), int(base), tip, _SERDE.loads_typed((kind, bytes(body))))
            for t, i, base, tip, kind, body in await self._fetch(_TURN, (thread,))
        ]

    async def drop_turn(self, thread: str) -> None:
        await self._execute(_TURN_DROP, (thread,))

    async def end_run(self, thread: str, before_seq: int | None) -> None:
        statements: list[tuple[str, Sequence[Any]]] = [(_TURN_DROP, (thread,))]
        if before_seq is not None:
            statements.append((_FORGET, (thread, before_seq)))
        await self._execute_all(statements)

    async def _execute_all(self, statements: Sequence[tuple[str, Sequence[Any]]]) -> None:
        """Statements committed together (subclasses make it one transaction)."""
        for sql, params in statements:
            await self._execute(sql, params)


def _entry(row: Sequence[Any]) -> Entry:
    thread, step, call_id, state, seq, result, surfaced, _ = row
    return Entry(thread, step, call_id, state, int(seq), json.loads(result) if result else None, bool(surfaced))


class SqliteJournal(_SqlJournal):
    """The journal in the SQLite checkpoint file, on a connection of its own."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn

    @classmethod
    async def open(cls, path: str | Path) -> SqliteJournal:
        """Connect and create the table if needed."""
        # FULL, unlike the checkpointer's NORMAL: a finished write must survive a power cut too,
        # and there is one commit per tool call, not per token.
        conn = await connect_sqlite(path, synchronous="FULL")
        try:
            await conn.execute(_CREATE)
            await conn.execute(_CREATE_TURNS.format(blob="BLOB"))
            await conn.commit()
        except BaseException:
            await conn.close()
            raise
        return cls(conn)

    # Each call is one hand-off to aiosqlite's thread, and its statements one transaction that no
    # other call's statements enter.
    async def _execute(self, sql: str, params: Sequence[Any]) -> None:
        await on_sqlite_thread(self.conn, commit_statements, (), [(sql, params)])

    async def _execute_all(self, statements: Sequence[tuple[str, Sequence[Any]]]) -> None:
        await on_sqlite_thread(self.conn, commit_statements, (), statements)

    async def _fetch(self, sql: str, params: Sequence[Any]) -> list[Sequence[Any]]:
        return list(await self.conn.execute_fetchall(sql, params))

    async def aclose(self) -> None:
        await self.conn.close()


class PostgresJournal(_SqlJournal):
    """The journal in the Postgres checkpoint database, on an autocommit connection of its own."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        # One connection serves the loop: statements from concurrent calls take turns.
        self._lock = asyncio.Lock()

    @classmethod
    async def open(cls, dsn: str) -> PostgresJournal:
        """Connect and create the table if needed."""
        import psycopg

        conn = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
        # Another process may create the table at the same moment.
        for create in (_CREATE, _CREATE_TURNS.format(blob="BYTEA")):
            with contextlib.suppress(psycopg.errors.UniqueViolation, psycopg.errors.DuplicateTable):
                await conn.execute(create)
        return cls(conn)

    async def _execute(self, sql: str, params: Sequence[Any]) -> None:
        async with self._lock:
            await self.conn.execute(sql.replace("?", "%s"), params)

    async def _execute_all(self, statements: Sequence[tuple[str, Sequence[Any]]]) -> None:
        async with self._lock, self.conn.transaction():
            for sql, params in statements:
                await self.conn.execute(sql.replace("?", "%s"), params)

    async def _fetch(self, sql: str, params: Sequence[Any]) -> list[Sequence[Any]]:
        async with self._lock:
            cursor = await self.conn.execute(sql.replace("?", "%s"), params)
            return list(await cursor.fetchall())

    async def aclose(self) -> None:
        await self.conn.close()


async def open_journal(spec: Any, stack: contextlib.AsyncExitStack) -> ToolJournal:
    """The journal beside the checkpointer that `spec` names; it closes with the stack."""
    where = locate(spec)
    journal: ToolJournal
    if where.kind == "sqlite":
        journal = await SqliteJournal.open(where.target or "")
    elif where.kind == "postgres":
        journal = await PostgresJournal.open(where.target or "")
    else:
        journal = MemoryJournal()
    stack.push_async_callback(journal.aclose)
    return journal


__all__ = ["TURN_TABLE", "PostgresJournal", "SqliteJournal", "open_journal"]

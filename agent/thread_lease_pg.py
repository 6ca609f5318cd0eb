"""Thread leases across processes on Postgres: a session advisory lock per thread.

The Postgres half of agent.thread_lease (its step 2), kept apart since it alone needs psycopg.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from typing import Any

from agent.lease_poll import LEASE_TTL_S, poll_until_held


def advisory_key(thread_id: str) -> int:
    """The signed 64-bit advisory-lock key of a thread (a collision only serializes two threads)."""
    digest = hashlib.blake2b(b"rein-thread\0" + thread_id.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


class _PgSession:
    """One event loop's lock session: a connection whose session-level advisory locks are the
    process's holds on its threads."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self.lock = asyncio.Lock()
        """psycopg runs one statement at a time per connection; holds take turns on it."""
        self.broken = False
        """Set once a statement failed on the connection: its locks are gone with the session."""

    async def run(self, sql: str, params: tuple[Any, ...] = ()) -> Any:
        import psycopg

        async with self.lock:
            try:
                cur = await self.conn.execute(sql, params)
                return await cur.fetchone()
            except psycopg.OperationalError:
                self.broken = True
                raise


class PostgresLeases:
    """A session advisory lock per thread, on one lock session per event loop.

    Postgres drops the locks with the session, so a killed process frees its threads as soon as
    the server sees its connection close. Sharing one session per loop keeps a process at one
    connection however many turns run at once (a connection per turn ran past the server's
    max_connections at 200 concurrent turns). The in-process lock is taken first, so within a
    process one hold at most asks for a thread's key, and session locks' re-entrancy never lets
    two turns in. A broken session marks every hold on it lost; the next turn opens a new one.
    """

    def __init__(self, dsn: str, ttl_s: float = LEASE_TTL_S) -> None:
        self.dsn = dsn
        self.ttl_s = ttl_s
        self._sessions: dict[asyncio.AbstractEventLoop, _PgSession] = {}
        self._opening: dict[asyncio.AbstractEventLoop, asyncio.Lock] = {}

    async def _session(self) -> _PgSession:
        import psycopg

        loop = asyncio.get_running_loop()
        async with self._opening.setdefault(loop, asyncio.Lock()):
            session = self._sessions.get(loop)
            if session is None or session.broken or session.conn.closed:
                conn = await psycopg.AsyncConnection.connect(self.dsn, autocommit=True)
                session = self._sessions[loop] = _PgSession(conn)
            return session

    async def acquire(self, thread_id: str, deadline: float | None) -> Any:
        import psycopg

        key = advisory_key(thread_id)

        async def attempt() -> tuple[Any, str | None]:
            session = await self._session()
            try:
                row = await session.run("SELECT pg_try_advisory_lock(%s)", (key,))
            except psycopg.OperationalError:
                return None, "the lock session broke; reconnecting"
            return ((session, key), None) if row and row[0] else (None, "another session holds its advisory lock")

        return await poll_until_held(deadline, attempt)

    async def renew(self, handle: Any) -> bool:
        import psycopg

        session, _ = handle
        if session.broken or session.conn.closed:
            return False  # the session is gone, and its lock with it
        try:
            await session.run("SELECT 1")
        except psycopg.OperationalError:
            return False
        return True

    async def release(self, handle: Any) -> None:
        import psycopg

        session, key = handle
        if session.broken or session.conn.closed:
            return
        with contextlib.suppress(psycopg.OperationalError):
            await session.run("SELECT pg_advisory_unlock(%s)", (key,))

    async def aclose(self) -> None:
        """Close this loop's lock session (freeing any lock still held on it)."""
        loop = asyncio.get_running_loop()
        self._opening.pop(loop, None)
        session = self._sessions.pop(loop, None)
        if session is not None and not session.conn.closed:
            await session.conn.close()


__all__ = ["PostgresLeases", "advisory_key"]

"""One turn at a time per thread, in a process and across processes.

A turn takes, in order, and gives back in reverse:

1. an in-process lock per (database, thread), shared by every event loop and every Agent of the
   process (the sync API runs on a private loop thread, so a per-loop asyncio.Lock would not do),
   handed to waiters in arrival order;
2. for SQLite, a lease row in the checkpoint database, renewed by a heartbeat; for Postgres, a
   session advisory lock, taken on one lock session (connection) per event loop that all the
   loop's turns share (agent.thread_lease_pg). Memory and custom savers get the lock of step 1
   only: rein cannot reach their storage from another process.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import contextvars
import logging
import os
import socket
import sqlite3
import threading
import time
import uuid
from collections.abc import AsyncIterator, Hashable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from agent.checkpoint import BUSY_TIMEOUT_MS, locate
from agent.errors import ThreadBusy
from agent.lease_poll import LEASE_TTL_S, LeaseBusy, poll_until_held

log = logging.getLogger("rein.threads")

LEASE_TABLE = "rein_thread_leases"

# (key, token) pairs of the turns whose graph is running in this context: a tool that starts a
# turn on its own thread would wait for itself forever, so it gets ThreadBusy at once instead.
_RUNNING: contextvars.ContextVar[tuple[tuple[Hashable, object], ...]] = contextvars.ContextVar(
    "rein_running_threads", default=()
)
# Holds taken with share=True in this context: a turn this context starts on the same thread joins
# the hold instead of waiting for it (the server reads a thread and runs its turn under one hold).
_SHARED: contextvars.ContextVar[tuple[Hold, ...]] = contextvars.ContextVar("rein_shared_holds", default=())


# --- in-process ---------------------------------------------------------------------------


@dataclass
class _Waiter:
    loop: asyncio.AbstractEventLoop
    woken: asyncio.Future[None]
    token: object


@dataclass
class _Slot:
    owner: object | None = None
    waiters: collections.deque[_Waiter] = field(default_factory=collections.deque)


class LocalLocks:
    """Per-key locks shared by every event loop and OS thread of a process, handed over in arrival order.

    Ownership changes only under one threading lock; the future a waiter awaits is just its wake-up
    call, so a waiter that times out or is cancelled at the moment of the hand-over still finds out
    whether it became the owner.
    """

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._slots: dict[Hashable, _Slot] = {}

    def owner(self, key: Hashable) -> object | None:
        """The token that holds key, if any."""
        with self._mutex:
            slot = self._slots.get(key)
            return None if slot is None else slot.owner

    async def acquire(self, key: Hashable, deadline: float | None) -> object | None:
        """A token once key is ours; None when the deadline (time.monotonic) passed first."""
        token = object()
        loop = asyncio.get_running_loop()
        with self._mutex:
            slot = self._slots.setdefault(key, _Slot())
            if slot.owner is None:
                slot.owner = token
                return token
            if deadline is not None and deadline <= time.monotonic():
                return None
            waiter = _Waiter(loop, loop.create_future(), token)
            slot.waiters.append(waiter)
        timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
        try:
            await asyncio.wait_for(waiter.woken, timeout)
            return token
        except (TimeoutError, asyncio.CancelledError) as exc:
            with self._mutex:
                won = slot.owner is token
                if not won:
                    slot.waiters.remove(waiter)
            if isinstance(exc, TimeoutError):
                return token if won else None
            if won:
                self.release(key, token)
            raise

    def release(self, key: Hashable, token: object) -> None:
        """Give key to the next live waiter, or free it."""
        with self._mutex:
            slot = self._slots.get(key)
            if slot is None or slot.owner is not token:
                return
            while slot.waiters:
                waiter = slot.waiters.popleft()
                slot.owner = waiter.token
                try:
                    waiter.loop.call_soon_threadsafe(_wake, waiter.woken)
                except RuntimeError:  # its loop is closed: nobody waits there any more
                    continue
                return
            slot.owner = None
            del self._slots[key]


def _wake(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


LOCAL = LocalLocks()
"""The process's thread locks."""


# --- across processes ---------------------------------------------------------------------


class RemoteLeases(Protocol):
    """A lock on a thread that other processes respect."""

    ttl_s: float

    async def acquire(self, thread_id: str, deadline: float | None) -> Any:
        """A handle once the thread is ours; LeaseBusy when the deadline passed first."""

    async def renew(self, handle: Any) -> bool:
        """Extend the hold; False when it was lost (taken over, connection gone)."""

    async def release(self, handle: Any) -> None:
        """Give the thread back."""


def host_id() -> str:
    """This machine and pid namespace: a pid is only meaningful (alive or dead) within both."""
    name = socket.gethostname()
    with contextlib.suppress(OSError):
        return f"{name} {os.readlink('/proc/self/ns/pid')}"
    return name


def pid_alive(pid: int) -> bool:
    """Whether a process of this host runs under pid (a zombie counts as dead)."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    with contextlib.suppress(OSError, IndexError):
        # A SIGKILLed child stays a zombie until its parent reaps it; it runs nothing.
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[0] != "Z"
    return True


class SqliteLeases:
    """Lease rows in the checkpoint database, taken with BEGIN IMMEDIATE so two processes never
    both see the thread free.

    A lease is taken over when it expired (no heartbeat for ttl_s) or when its owner ran on this
    host and its pid is dead, so a killed process's thread can be continued at once.

    Each statement first runs on the caller's thread on a connection that never waits for
    SQLite's write lock (busy timeout 0): uncontended, as almost every take and drop is, that
    costs a fraction of the two thread hand-offs a worker thread would. When the lock is busy (or
    the connection is in use) it runs on a worker thread, whose connection waits up to
    BUSY_TIMEOUT_MS as before, so the event loop never blocks on a lock.
    """

    def __init__(self, path: str, ttl_s: float = LEASE_TTL_S) -> None:
        self.path = path
        self.ttl_s = ttl_s
        self.host = host_id()
        self._waiting = _LeaseConnection(path, BUSY_TIMEOUT_MS / 1000)
        self._quick = _LeaseConnection(path, 0.0)

    def drop(self, thread_id: str, owner: str) -> None:
        """Delete owner's lease row (waiting for SQLite's lock)."""
        self._waiting.run(self._drop, thread_id, owner)

    def _take(self, conn: sqlite3.Connection, thread_id: str, owner: str) -> str | None:
        """Take the lease for owner; None on success, else who holds it."""
        conn.execute("BEGIN IMMEDIATE")
        row = conn.execute(f"SELECT pid, host, expires_at FROM {LEASE_TABLE} WHERE thread_id = ?", (thread_id,)).fetchone()
        now = time.time()
        if row is not None:
            pid, host, expires_at = row
            dead = host == self.host and not pid_alive(pid)
            if expires_at > now and not dead:
                conn.execute("ROLLBACK")
                return f"pid {pid} on {host} holds its lease"
            why = "its pid is dead" if dead else f"it expired {now - expires_at:.1f} s ago"
            log.info("taking over the lease of thread %r from pid %s on %s: %s", thread_id, pid, host, why)
        conn.execute(
            f"INSERT OR REPLACE INTO {LEASE_TABLE} VALUES (?, ?, ?, ?, ?)",
            (thread_id, owner, os.getpid(), self.host, now + self.ttl_s),
        )
        conn.execute("COMMIT")
        return None

    def _extend(self, conn: sqlite3.Connection, thread_id: str, owner: str) -> bool:
        """Push the expiry on; False when the row is no longer owner's."""
        cur = conn.execute(
            f"UPDATE {LEASE_TABLE} SET expires_at = ? WHERE thread_id = ? AND owner = ?",
            (time.time() + self.ttl_s, thread_id, owner),
        )
        return cur.rowcount == 1

    def _drop(self, conn: sqlite3.Connection, thread_id: str, owner: str) -> None:
        conn.execute(f"DELETE FROM {LEASE_TABLE} WHERE thread_id = ? AND owner = ?", (thread_id, owner))

    async def _run(self, op: Any, *args: Any) -> Any:
        """op(connection, *args) on this thread if it need not wait, else on a worker thread."""
        done, value = self._quick.try_now(op, *args)
        if done:
            return value
        return await asyncio.to_thread(self._waiting.run, op, *args)

    async def acquire(self, thread_id: str, deadline: float | None) -> tuple[str, str]:
        owner = uuid.uuid4().hex

        async def attempt() -> tuple[tuple[str, str] | None, str | None]:
            done, holder = self._quick.try_now(self._take, thread_id, owner)
            if not done:
                take = asyncio.ensure_future(asyncio.to_thread(self._waiting.run, self._take, thread_id, owner))
                try:
                    holder = await asyncio.shield(take)
                except asyncio.CancelledError:
                    # The row may be written already; a cancelled turn must not keep it.
                    with contextlib.suppress(Exception):
                        if await take is None:
                            await asyncio.to_thread(self.drop, thread_id, owner)
                    raise
            return ((thread_id, owner), None) if holder is None else (None, holder)

        return await poll_until_held(deadline, attempt)

    async def renew(self, handle: tuple[str, str]) -> bool:
        return bool(await self._run(self._extend, *handle))

    async def release(self, handle: tuple[str, str]) -> None:
        await self._run(self._drop, *handle)


class _LeaseConnection:
    """One lease connection, kept open (opening a database costs more than a lease write) and
    used by one thread at a time; a forked child opens its own."""

    def __init__(self, path: str, busy_timeout_s: float) -> None:
        self.path = path
        self.busy_timeout_s = busy_timeout_s
        self._mutex = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        self._pid = 0

    def _open(self) -> sqlite3.Connection:
        if self._conn is None or self._pid != os.getpid():
            conn = sqlite3.connect(self.path, timeout=self.busy_timeout_s, isolation_level=None, check_same_thread=False)
            try:
                conn.execute("PRAGMA synchronous=NORMAL")
                conn.execute(
                    f"CREATE TABLE IF NOT EXISTS {LEASE_TABLE} (thread_id TEXT PRIMARY KEY, owner TEXT NOT NULL, "
                    "pid INTEGER NOT NULL, host TEXT NOT NULL, expires_at REAL NOT NULL)"
                )
            except BaseException:
                conn.close()  # busy, say: the next use opens it again
                raise
            self._conn, self._pid = conn, os.getpid()
        return self._conn

    def run(self, op: Any, *args: Any) -> Any:
        """op(connection, *args), waiting for the connection (and SQLite's lock) as long as it takes."""
        with self._mutex:
            try:
                return op(self._open(), *args)
            except BaseException:
                self._roll_back()
                raise

    def try_now(self, op: Any, *args: Any) -> tuple[bool, Any]:
        """(True, op(connection, *args)) when it ran without waiting; (False, None) when the
        connection was in use or SQLite's write lock was busy (op's transaction rolled back)."""
        if not self._mutex.acquire(blocking=False):
            return False, None
        try:
            # Opening counts too: creating the lease table needs the lock another process may hold.
            return True, op(self._open(), *args)
        except BaseException as exc:
            self._roll_back()
            if isinstance(exc, sqlite3.OperationalError) and exc.sqlite_errorcode & 0xFF in (
                sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED  # extended codes too
            ):
                return False, None
            raise
        finally:
            self._mutex.release()

    def _roll_back(self) -> None:
        if self._conn is not None and self._conn.in_transaction:
            self._conn.rollback()


# --- both together ------------------------------------------------------------------------


@dataclass
class Hold:
    """One turn's hold on its thread."""

    key: Hashable
    """The in-process lock key: (database scope, thread id)."""
    token: object
    """This hold's in-process lock token."""
    lost: bool = False
    """True once the heartbeat found the cross-process lease taken over or its connection gone."""

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        """Mark the graph as running for this thread in the current context (tasks it starts inherit it)."""
        mark = _RUNNING.set((*_RUNNING.get(), (self.key, self.token)))
        try:
            yield
        finally:
            _RUNNING.reset(mark)


class ThreadLeases:
    """What keeps one turn at a time per thread, for one checkpointer spec."""

    def __init__(self, scope: Hashable, remote: RemoteLeases | None, locks: LocalLocks = LOCAL) -> None:
        self.scope = scope
        self.remote = remote
        self.locks = locks

    @contextlib.asynccontextmanager
    async def hold(self, thread_id: str, wait_s: float | None, *, share: bool = False) -> AsyncIterator[Hold]:
        """Hold thread_id for a turn, waiting up to wait_s (None: as long as it takes).

        share=True lets holds asked for later in this context (not in other tasks' contexts) on
        the same thread join this one: reads and the turn they decide on happen under one hold.
        """
        key = (self.scope, thread_id)
        if any(k == key and self.locks.owner(k) is t for k, t in _RUNNING.get()):
            raise ThreadBusy(thread_id, "a turn of this thread started it; a turn cannot wait for itself")
        for shared in _SHARED.get():
            if shared.key == key and self.locks.owner(key) is shared.token:
                yield shared
                return
        deadline = None if wait_s is None else time.monotonic() + wait_s
        token = await self.locks.acquire(key, deadline)
        if token is None:
            raise ThreadBusy(thread_id, f"another turn of this process holds it (waited {wait_s:g} s)")
        hold = Hold(key, token)
        handle: Any = None
        beat: asyncio.Task[None] | None = None
        try:
            if self.remote is not None:
                try:
                    handle = await self.remote.acquire(thread_id, deadline)
                except LeaseBusy as busy:
                    raise ThreadBusy(thread_id, f"{busy} (waited {wait_s:g} s)") from None
                beat = asyncio.create_task(self._heartbeat(thread_id, hold, handle))
            if not share:
                yield hold
            else:
                mark = _SHARED.set((*_SHARED.get(), hold))
                try:
                    yield hold
                finally:
                    _SHARED.reset(mark)
        finally:
            try:
                if beat is not None:
                    beat.cancel()
                if handle is not None and self.remote is not None:
                    try:
                        await asyncio.shield(self.remote.release(handle))
                    except Exception:
                        log.warning("could not release the lease of thread %r; it expires by itself", thread_id, exc_info=True)
            finally:
                self.locks.release(key, token)

    def shared_hold(self, thread_id: str) -> Hold | None:
        """The hold this context took on thread_id with share=True and still owns, if any."""
        key = (self.scope, thread_id)
        for shared in _SHARED.get():
            if shared.key == key and self.locks.owner(key) is shared.token:
                return shared
        return None

    async def aclose(self) -> None:
        """Close what the cross-process layer holds open in this event loop (a lock session)."""
        closer = getattr(self.remote, "aclose", None)
        if closer is not None:
            await closer()

    async def _heartbeat(self, thread_id: str, hold: Hold, handle: Any) -> None:
        assert self.remote is not None
        while True:
            await asyncio.sleep(self.remote.ttl_s / 3)
            try:
                if not await self.remote.renew(handle):
                    hold.lost = True
                    log.warning("thread %r: this turn lost its lease to another process", thread_id)
                    return
            except Exception:
                log.warning("thread %r: could not renew the lease; trying again", thread_id, exc_info=True)


def leases_for(spec: Any, user: object, ttl_s: float = LEASE_TTL_S) -> ThreadLeases:
    """The thread leases for a checkpointer spec (see open_checkpointer) used by user (an Agent)."""
    where = locate(spec)
    if where.kind == "sqlite":
        path = os.path.realpath(where.target or "")
        return ThreadLeases(("sqlite", path), SqliteLeases(path, ttl_s))
    if where.kind == "postgres":
        from agent.thread_lease_pg import PostgresLeases

        return ThreadLeases(("postgres", where.target), PostgresLeases(where.target or "", ttl_s))
    if where.kind == "custom":
        # Agents that share one saver object share its threads; other processes are out of reach.
        return ThreadLeases(("saver", id(spec)), None)
    # Each Agent's memory savers are its own: serialize within the Agent. The scope is a pure
    # function of the Agent, so two loops that build it at once get the same one.
    return ThreadLeases(("memory", id(user)), None)


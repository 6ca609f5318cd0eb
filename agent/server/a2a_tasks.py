"""Where the A2A endpoint keeps its tasks: beside the served agent's threads.

A task must outlive the request that made it (`tasks/get` reads it after the fact, from any
process sharing the database), so it is stored in the agent's own checkpointer database, in the
table `rein_a2a_tasks`, through a2a-sdk's `DatabaseTaskStore`. An agent on the memory checkpointer
(or a ready saver object rein cannot open a database for) keeps its tasks in memory, like its
threads. Tasks are scoped to their owner, `A2AOwner.user_name`, so one tenant never reads another's.
"""

from __future__ import annotations

import asyncio
import functools
import warnings
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from agent.checkpoint import BUSY_TIMEOUT_MS, locate
from agent.extras import needs_extra

with needs_extra("a2a", "the A2A endpoint"):
    from a2a.auth.user import User
    from a2a.server.tasks import InMemoryTaskStore, TaskStore

TABLE = "rein_a2a_tasks"
"""The task table, in the checkpointer's own database."""


class A2AOwner(User):
    """Who a task belongs to: one tenant's use of one served agent."""

    def __init__(self, agent: str, tenant: str | None) -> None:
        self.agent = agent
        """The served agent's name."""
        self.tenant = tenant
        """The tenant of the request's API key; None on an open server."""

    @property
    def is_authenticated(self) -> bool:
        """Whether a key was checked (an open server checks none)."""
        return self.tenant is not None

    @property
    def user_name(self) -> str:
        """The owner id tasks are stored under: `@TENANT/AGENT`, or `AGENT` on an open server."""
        return self.agent if self.tenant is None else f"@{self.tenant}/{self.agent}"


@dataclass
class TaskStores:
    """One task store per database the served agents use, opened lazily and closed together."""

    stores: dict[str, Any] = field(default_factory=dict)
    """Database (its path or connection string; "memory" for in-memory) → task store."""
    engines: list[Any] = field(default_factory=list)
    """The SQLAlchemy engines behind the database stores, disposed at shutdown."""

    def for_checkpointer(self, spec: Any) -> TaskStore:
        """The task store beside a checkpointer spec's database."""
        where = locate(spec)
        if where.kind in ("memory", "custom") or where.target is None:
            return self.stores.setdefault("memory", InMemoryTaskStore())
        store = self.stores.get(where.target)
        if store is None:
            store = self.stores[where.target] = self._database_store(where.kind, where.target)
        return store

    def _database_store(self, kind: str, target: str) -> TaskStore:
        with needs_extra("a2a", "the A2A endpoint's task store"):
            from a2a.server.tasks import DatabaseTaskStore
            from sqlalchemy.ext.asyncio import create_async_engine
        if kind == "sqlite":
            # The checkpointer has put the file in WAL mode; the busy timeout lets a task write wait
            # for a checkpoint commit instead of failing with "database is locked".
            engine = create_async_engine(
                f"sqlite+aiosqlite:///{target}", connect_args={"timeout": BUSY_TIMEOUT_MS / 1000}
            )
        else:
            # psycopg 3 is what the postgres extra installs; SQLAlchemy drives it asynchronously.
            url = "postgresql+psycopg://" + target.split("://", 1)[1]
            engine = create_async_engine(url)
        self.engines.append(engine)
        # DatabaseTaskStore maps a new ORM class for every custom table name it is given, and
        # SQLAlchemy refuses a table mapped twice: the class is made once a process instead.
        store = DatabaseTaskStore(engine)
        store.task_model = _task_model()
        return store

    async def open(self) -> None:
        """Create the task tables now, so a bad database fails at startup."""
        for store in self.stores.values():
            initialize = getattr(store, "initialize", None)
            if initialize is not None:
                await _create_once(initialize)

    async def aclose(self) -> None:
        """Close the database connections."""
        for engine in self.engines:
            await engine.dispose()
        self.engines.clear()


async def _create_once(initialize: Callable[[], Awaitable[None]]) -> None:
    """Run a store's table creation, tolerating another process creating the table at the same moment.

    On Postgres, CREATE TABLE IF NOT EXISTS is not atomic: two processes starting together on a
    fresh database (`rein serve --workers N`) can both pass the check, and the second then fails on
    the catalog's unique index. By then the table exists, so one more try finds it.
    """
    with needs_extra("a2a", "the A2A endpoint's task store"):
        from sqlalchemy.exc import IntegrityError, ProgrammingError
    for attempt in range(3):
        try:
            await initialize()
            return
        except (IntegrityError, ProgrammingError) as exc:
            if attempt == 2 or "already exists" not in str(exc):
                raise
            await asyncio.sleep(0.05 * (attempt + 1))


@functools.cache
def _task_model() -> Any:
    """The ORM class of the `rein_a2a_tasks` table."""
    with needs_extra("a2a", "the A2A endpoint's task store"):
        from a2a.server.models import create_task_model
        from sqlalchemy.exc import SAWarning
    with warnings.catch_warnings():
        # The SDK names every such class TaskModel: SQLAlchemy warns that the name now points at
        # this one in its by-name lookup, which nothing here uses.
        warnings.simplefilter("ignore", SAWarning)
        return create_task_model(TABLE)

"""The served threads databases' health, as /healthz and each request see it: a database file
deleted or replaced under the server, and storage errors (a full disk, a read-only or corrupt file)
answered as 503 with their cause instead of a bare 500."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field

from agent.checkpoint import locate
from agent.errors import UserFacingError
from agent.runtime import Agent
from agent.server.errors import storage_unavailable
from agent.sqlite_file import FileWatch, storage_cause

log = logging.getLogger("rein.server")


@dataclass
class StorageHealth:
    """The SQLite files of the served agents as opened at start-up, and the last storage error a
    request met."""

    watches: list[FileWatch] = field(default_factory=list)
    """Each SQLite threads database, with its identity when the server opened it."""
    fault: str | None = None
    """The cause of the last storage error a request met; cleared when a later request succeeds
    (a disk that had filled up may have room again)."""

    def watch(self, agents: Iterable[Agent]) -> None:
        """Note the served agents' SQLite files as they are now (once their checkpointers are open)."""
        paths: set[str] = set()
        for agent in agents:
            try:
                where = locate(agent.checkpointer_spec)
            except UserFacingError:
                continue
            if where.kind == "sqlite" and where.target:
                paths.add(where.target)
        self.watches = [FileWatch.take(path) for path in sorted(paths)]

    def problem(self) -> str | None:
        """Why the storage is unhealthy now, or None: a file deleted or replaced, else the last fault."""
        for watch in self.watches:
            change = watch.change()
            if change is not None:
                return change
        return self.fault

    def check(self) -> None:
        """503 before a request starts when a database file was deleted or replaced: nothing the
        request commits could be kept. A single storage error does not stop the next request."""
        for watch in self.watches:
            change = watch.change()
            if change is not None:
                raise storage_unavailable(change)

    def failure(self, exc: BaseException) -> BaseException:
        """The error to answer for exc: a 503 naming the cause when exc is a storage fault (which is
        then reported by /healthz), else exc itself."""
        cause = storage_cause(exc)
        if cause is None or not isinstance(exc, Exception):
            return exc
        if cause != self.fault:
            log.error("threads database: %s", cause)
        self.fault = cause
        return storage_unavailable(cause)

    def recovered(self) -> None:
        """A request succeeded: the last storage error no longer holds."""
        self.fault = None

"""The threads database's file on disk: created owner-only, watched for being deleted or replaced
under a running process, and SQLite's storage errors told apart from everything else."""

from __future__ import annotations

import contextlib
import os
import sqlite3
from dataclasses import dataclass
from pathlib import Path

# Primary result codes (the low byte of an extended code) that say the file or its disk is at fault,
# not the statement: full, read-only, I/O error, corrupt, not a database, cannot be opened.
_STORAGE_CODES = frozenset({
    sqlite3.SQLITE_FULL, sqlite3.SQLITE_READONLY, sqlite3.SQLITE_IOERR, sqlite3.SQLITE_CORRUPT,
    sqlite3.SQLITE_NOTADB, sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_PERM,
})


class StorageFault(Exception):
    """The threads database cannot be used: its file was deleted or replaced while in use, its disk
    is full or read-only, or it is corrupt."""

    def __init__(self, path: str | Path, cause: str) -> None:
        super().__init__(f"{path}: {cause}")
        self.path = str(path)
        """The database file."""
        self.cause = cause
        """What is wrong with it, in a few words a person can act on."""


def storage_cause(exc: BaseException) -> str | None:
    """What is wrong with the storage when exc comes from it (a `StorageFault`, SQLite's full, read-only,
    I/O, corrupt or cannot-open errors); None for other errors (bugs, a busy database)."""
    if isinstance(exc, StorageFault):
        return exc.cause
    if isinstance(exc, sqlite3.Error):
        code = getattr(exc, "sqlite_errorcode", None)
        if code is None or code & 0xFF not in _STORAGE_CODES:
            return None
        return f"{exc} ({getattr(exc, 'sqlite_errorname', code)})"
    return None


def create_private(path: str | Path) -> None:
    """Create the database file (and its folder, when missing) readable by its owner alone.

    The file holds every thread of every tenant. SQLite gives a new database the mode 0644 and its
    -wal and -shm files the database's own mode, so a file created here first as 0600 keeps all three
    private. An existing file or folder keeps the mode its owner gave it."""
    path = Path(path)
    if not path.parent.is_dir():
        # Only the last folder is rein's own; missing parents get the usual mode.
        path.parent.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileExistsError):
            path.parent.mkdir(mode=0o700)
    with contextlib.suppress(FileExistsError):  # another process may have created it meanwhile
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))


def _identity(path: str) -> tuple[int, int] | None:
    try:
        found = os.stat(path)
    except FileNotFoundError:
        return None
    return found.st_dev, found.st_ino


@dataclass(frozen=True)
class FileWatch:
    """A SQLite database file and its write-ahead log as they were when opened, to tell when either
    was deleted or replaced by another file: SQLite goes on writing to a deleted file, and every
    commit made to it after that is lost when the process ends."""

    path: str
    """The database file."""
    identities: tuple[tuple[str, tuple[int, int]], ...]
    """(file, (st_dev, st_ino)) of the database and, when it had one, its -wal file."""

    @classmethod
    def take(cls, path: str | Path) -> FileWatch:
        """The files at path as they are now."""
        found = [(name, ident) for name in (str(path), f"{path}-wal") if (ident := _identity(name)) is not None]
        return cls(str(path), tuple(found))

    def change(self) -> str | None:
        """What happened to the files since they were taken (deleted, replaced), or None."""
        for name, was in self.identities:
            now = _identity(name)
            if now == was:
                continue
            what = name if name == self.path else f"{name} (its write-ahead log)"
            how = "deleted" if now is None else "replaced by another file"
            return f"{what} was {how} while in use, so nothing more can be stored in it; restart to open the file now at that path"
        return None

    def check(self) -> None:
        """Raise `StorageFault` when the files were deleted or replaced."""
        change = self.change()
        if change is not None:
            raise StorageFault(self.path, change)

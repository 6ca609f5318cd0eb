"""An exclusive advisory lock on an open file, so that processes sharing a file take turns."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import IO, Any


@contextlib.contextmanager
def exclusive(handle: IO[Any]) -> Iterator[None]:
    """Hold an exclusive `flock` on the open file while the block runs (a no-op without fcntl:
    Windows, where rein's callers fall back on what a single process guarantees)."""
    try:
        import fcntl
    except ImportError:
        yield
        return
    fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
    try:
        yield
    finally:
        fcntl.flock(handle.fileno(), fcntl.LOCK_UN)

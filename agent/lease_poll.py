"""Waiting for a thread that another process holds: the lease timing and the back-off loop that
both cross-process lease backends (SQLite rows, Postgres advisory locks) poll with."""

from __future__ import annotations

import asyncio
import time
from typing import Any

LEASE_TTL_S = 30.0
"""How long a lease outlives its last heartbeat; the holder renews it every third of that."""
POLL_S = (0.01, 0.25)
"""First and longest pause between tries for a thread that another process holds."""


class LeaseBusy(Exception):
    """The deadline passed while another process held the thread; the argument says who."""


async def poll_until_held(deadline: float | None, attempt: Any) -> Any:
    """Call attempt() until it returns a handle; between tries, back off up to POLL_S[1]."""
    pause = POLL_S[0]
    while True:
        handle, holder = await attempt()
        if handle is not None:
            return handle
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            raise LeaseBusy(holder or "another process holds it")
        await asyncio.sleep(pause if left is None else min(pause, left))
        pause = min(pause * 2, POLL_S[1])


__all__ = ["LEASE_TTL_S", "POLL_S", "LeaseBusy", "poll_until_held"]

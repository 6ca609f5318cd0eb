"""A uvicorn server that drains before it stops: on SIGTERM or SIGINT it keeps accepting
connections, answering 503 to new work and to /healthz, while requests or turns still run (at most
a grace period), so load balancers and clients see the documented 503 instead of a refused
connection (docs/server.md, "Shutdown")."""

from __future__ import annotations

import time
from collections.abc import Callable
from types import FrameType

import uvicorn


class DrainingServer(uvicorn.Server):
    """uvicorn's server with a drain phase between the first stop signal and its own shutdown."""

    def __init__(
        self, config: uvicorn.Config, *, start_drain: Callable[[], None], busy: Callable[[], bool], grace_s: float
    ) -> None:
        super().__init__(config)
        self.start_drain = start_drain
        """Puts the app in its shutting-down state (new turns and /healthz answer 503)."""
        self.busy = busy
        """Whether the app still runs turns of its own (uvicorn's requests in flight count too)."""
        self.grace_s = grace_s
        """Longest drain, in seconds; then uvicorn's shutdown starts whatever still runs."""
        self.drain_deadline: float | None = None
        """When the drain ends at the latest; None until a stop signal."""

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self.drain_deadline is None and not self.should_exit:
            self.drain_deadline = time.monotonic() + self.grace_s
            self.start_drain()
            return
        # A second signal: stop draining and shut down now (a third SIGINT forces the exit).
        super().handle_exit(sig, frame)

    async def on_tick(self, counter: int) -> bool:
        if self.drain_deadline is not None and not self.should_exit:
            running = bool(self.server_state.tasks) or self.busy()
            if not running or time.monotonic() >= self.drain_deadline:
                self.should_exit = True
        return await super().on_tick(counter)


__all__ = ["DrainingServer"]

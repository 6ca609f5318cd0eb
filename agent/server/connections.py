"""Connection guards for `rein serve`: how long a client may take to send its request head, how long
an idle connection is kept, and how many connections the server holds, so idle or slow sockets
cannot use up the process's file descriptors (see docs/server.md, "Connections and limits")."""

from __future__ import annotations

import asyncio
import resource
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

RESERVED_FDS = 128
"""Descriptors kept back from connections for the database, logs, model files and sockets of our own."""
MIN_CONNECTIONS = 16
"""The fewest connections a derived limit allows, however low the open-file limit is."""
_TIMEOUT_408 = (
    b"HTTP/1.1 408 Request Timeout\r\ncontent-type: text/plain; charset=utf-8\r\n"
    b"content-length: 41\r\nconnection: close\r\n\r\nthe request head did not arrive in time.\n"
)
_FULL_503 = (
    b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain; charset=utf-8\r\n"
    b"content-length: 49\r\nconnection: close\r\nretry-after: 1\r\n\r\n"
    b"the server holds its limit of busy connections.\n"
)


@dataclass(frozen=True)
class ConnectionLimits:
    """How long a connection may idle or dawdle, and how many the server holds at once."""

    header_timeout_s: float = 10.0
    """Seconds a new connection, or a kept-alive one from the first byte of its next request, has
    to send the complete request line and headers; then it is closed (with a 408 when part of a
    head had arrived)."""
    keep_alive_timeout_s: float = 5.0
    """Seconds an idle connection stays open after a response, waiting for the next request."""
    max_connections: int | None = None
    """Most connections held at once; None derives it from the open-file limit (less
    RESERVED_FDS). Past it the longest-idle connection is closed to make room, or, when every
    connection is busy with a request, the new one is answered 503 and closed."""

    def connection_cap(self) -> int:
        """The connection limit in force: the configured one, or one the open-file limit allows."""
        if self.max_connections is not None:
            return self.max_connections
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft == resource.RLIM_INFINITY:
            soft = 65536
        return max(soft - RESERVED_FDS, MIN_CONNECTIONS)


def guarded_protocol(base: type[asyncio.Protocol], limits: ConnectionLimits) -> type[asyncio.Protocol]:
    """A subclass of uvicorn's HTTP protocol `base` (httptools' or h11's) that enforces `limits`.

    uvicorn times out only a connection kept alive after a response: a connection that never sends
    a byte, or stops halfway through its headers, stays open for ever, and enough of them make
    every accept() fail. The subclass relies on what both of uvicorn's protocols share: a `cycle`
    attribute set once a request's head is parsed, and `on_response_complete`.
    """
    cap = limits.connection_cap()
    # Connections with no request in flight, least recently active first: the ones to drop when
    # the server is full. A class attribute, so every connection of this server shares it.
    idle: OrderedDict[Any, None] = OrderedDict()
    held: set[Any] = set()

    class GuardedProtocol(base):  # type: ignore[valid-type,misc]
        """uvicorn's HTTP protocol with a header timeout and a connection limit."""

        _head_timer: asyncio.TimerHandle | None = None
        _head_bytes = False
        _seen_cycle: Any = None

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            held.add(self)
            idle[self] = None
            self._arm_head_timer()
            if len(held) > cap:
                self._make_room()

        def data_received(self, data: bytes) -> None:
            between_requests = self.cycle is None or self.cycle.response_complete
            if between_requests:
                self._head_bytes = True
                if self._head_timer is None:
                    self._arm_head_timer()
            super().data_received(data)
            if self.cycle is not None and self.cycle is not self._seen_cycle:
                # A request head was parsed: the app owns the connection until its response ends.
                self._seen_cycle = self.cycle
                self._cancel_head_timer()
                idle.pop(self, None)

        def on_response_complete(self) -> None:
            super().on_response_complete()
            # A pipelined request may have started in super(): then the connection stays busy.
            if not self.transport.is_closing() and self.cycle.response_complete:
                self._head_bytes = False
                idle[self] = None

        def connection_lost(self, exc: Exception | None) -> None:
            self._cancel_head_timer()
            idle.pop(self, None)
            held.discard(self)
            super().connection_lost(exc)

        def _make_room(self) -> None:
            oldest = next((c for c in idle if c is not self), None)
            if oldest is not None:
                idle.pop(oldest)
                oldest.transport.close()
                return
            # Every other connection is running a request: refuse this one rather than let the
            # next accept() fail for everyone.
            idle.pop(self, None)
            self.transport.write(_FULL_503)
            self.transport.close()

        def _arm_head_timer(self) -> None:
            self._head_timer = self.loop.call_later(limits.header_timeout_s, self._head_timed_out)

        def _cancel_head_timer(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def _head_timed_out(self) -> None:
            self._head_timer = None
            if self.transport.is_closing():
                return
            if self._head_bytes:
                # Part of a request came: say why it ends. A connection that sent nothing is
                # closed silently, as a pooled client expects of an idle one.
                self.transport.write(_TIMEOUT_408)
            self.transport.close()

    return GuardedProtocol


__all__ = ["ConnectionLimits", "guarded_protocol"]

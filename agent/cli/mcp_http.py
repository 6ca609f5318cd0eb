"""The guard in front of `rein mcp serve` over HTTP: bearer keys (those of `rein serve`) and the
Host and Origin checks that stop DNS rebinding (docs/mcp.md, "Serving agents over MCP").

The key check is an ASGI wrapper around the SDK's app, so a request without a valid key is
answered 401 before the MCP session sees it; the tool handler reads the caller's tenant from the
same header (`tenant_of`).
"""

from __future__ import annotations

import json
import socket
from collections.abc import Awaitable, Callable, MutableMapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mcp.server.transport_security import TransportSecuritySettings

    from agent.server.auth import ApiKeys

LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")
"""Host names that always reach a loopback listener, as they appear in a Host header."""
WILDCARD = {"0.0.0.0", "::", ""}
"""--host values that listen on every interface: they name no host a client would send."""

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]


SESSION_HEADER = b"mcp-session-id"
"""The streamable HTTP transport's session id, issued by the server on initialize."""
MAX_SESSIONS = 100_000
"""Sessions whose tenant is remembered; the oldest are forgotten (and must initialize again) past it."""


class RequireKey:
    """ASGI wrapper: HTTP requests must carry `Authorization: Bearer KEY` with one of the keys, and
    a session may be used only by the tenant that opened it (another tenant's key naming its
    `Mcp-Session-Id` gets 404, as for an unknown session, so it can neither send on it nor read
    its stream of server messages)."""

    def __init__(self, app: App, keys: ApiKeys) -> None:
        self.app = app
        self.keys = keys
        self.sessions: dict[bytes, str] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":  # lifespan: the app's own start-up and shutdown
            await self.app(scope, receive, send)
            return
        from agent.server.errors import ApiError

        headers = dict(scope.get("headers") or [])
        authorization = headers.get(b"authorization", b"").decode("latin-1") or None
        try:
            tenant = self.keys.check(authorization) or ""
            session = headers.get(SESSION_HEADER)
            if session is not None and self.sessions.get(session, tenant) != tenant:
                raise ApiError(404, "no such MCP session for this key", type="invalid_request_error", code="session_not_found")
        except ApiError as exc:
            body = json.dumps(exc.body()).encode()
            head = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
            head += [(k.lower().encode(), v.encode()) for k, v in exc.headers.items()]
            await send({"type": "http.response.start", "status": exc.status, "headers": head})
            await send({"type": "http.response.body", "body": body})
            return

        async def send_noting_sessions(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "http.response.start":
                for name, value in message.get("headers") or ():
                    if name.lower() == SESSION_HEADER and value not in self.sessions:
                        if len(self.sessions) >= MAX_SESSIONS:
                            del self.sessions[next(iter(self.sessions))]
                        self.sessions[value] = tenant
            await send(message)

        await self.app(scope, receive, send_noting_sessions)


def tenant_of(request: Any, keys: ApiKeys | None) -> str | None:
    """The tenant of the key an HTTP request carries; None over stdio or on a server without keys.

    `request` is what the SDK hands a handler as `ctx.request` (the Starlette request over HTTP).
    `RequireKey` has let only valid keys through, so a request that gets here carries one.
    """
    if keys is None or not keys.enabled or request is None:
        return None
    return keys.check(request.headers.get("authorization"))


def allowed_hosts(host: str, extra: list[str]) -> list[str]:
    """Host names clients may send: loopback, the --host address (or, listening on every interface,
    this machine's name) and the --allowed-host names."""
    names = [*LOOPBACK_NAMES]
    if host in WILDCARD:
        names.append(socket.gethostname())
    else:
        names.append(f"[{host}]" if ":" in host else host)
    for name in extra:
        if name not in names:
            names.append(name)
    return names


def transport_security(host: str, extra: list[str]) -> TransportSecuritySettings:
    """The SDK's DNS-rebinding protection for a listener on `host`: Host must name one of
    `allowed_hosts`, and an Origin, when a browser sends one, must be on one of them."""
    from mcp.server.transport_security import TransportSecuritySettings

    names = allowed_hosts(host, extra)
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        # A Host header carries the port unless it is the scheme's default.
        allowed_hosts=[form for name in names for form in (name, f"{name}:*")],
        allowed_origins=[
            form for name in names for scheme in ("http", "https") for form in (f"{scheme}://{name}", f"{scheme}://{name}:*")
        ],
    )

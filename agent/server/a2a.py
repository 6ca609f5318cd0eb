"""The A2A (Agent2Agent) endpoint: every served agent at `/a2a/{agent}/`, with its agent card at
`/a2a/{agent}/.well-known/agent-card.json`; see docs/server.md, "A2A".

A task's contextId is a rein thread (one per tenant), so `message/send` and `message/stream` run
turns like chat requests do, and `tasks/get` reads the task back from the agent's database. The
protocol itself is a2a-sdk's (the `a2a` extra); without it these routes answer 501 naming the
extra, and the rest of the server runs as before.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from agent.extras import MissingExtra, needs_extra
from agent.server.chat_turns import ServerState
from agent.server.errors import ApiError

with needs_extra("server", "rein's HTTP server"):
    from fastapi import FastAPI
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response
    from starlette.types import Message, Receive

BodyReader = Callable[[Request, int, float | None], Awaitable[bytes]]
"""Reads a request's body within the server's size and time limits (`agent.server.app.read_body`)."""
CARD_PATH = "/a2a/{agent}/.well-known/agent-card.json"
"""Where each agent's card is served."""
RPC_PATHS = ("/a2a/{agent}/", "/a2a/{agent}")
"""Where each agent's JSON-RPC endpoint answers (with or without the trailing slash)."""


def add_a2a(app: FastAPI, state: ServerState, read_body: BodyReader) -> None:
    """Serve the app's agents over A2A, behind the same API keys and limits as the chat routes."""
    try:
        with needs_extra("a2a", "the A2A endpoint"):
            from agent.server.a2a_service import A2AService
    except MissingExtra as exc:
        _add_unavailable(app, exc)
        return
    service = A2AService(state)
    cfg = state.config

    async def card(request: Request) -> Response:
        name = request.path_params["agent"]
        state.keys.check(request.headers.get("authorization"))
        state.agent(name)
        # The card's URLs are the ones this client reached the server by.
        return JSONResponse(service.card(name, str(request.base_url)))

    async def rpc(request: Request) -> Response:
        name = request.path_params["agent"]
        tenant = state.keys.check(request.headers.get("authorization"))
        state.agent(name)
        body = await read_body(request, cfg.max_body_bytes, cfg.body_timeout_s)
        request.state.rein_tenant = tenant
        return await service.agents[name].rpc(Request(request.scope, _replay(body, request.receive)))

    app.add_route(CARD_PATH, card, methods=["GET"])
    for path in RPC_PATHS:
        app.add_route(path, rpc, methods=["POST"])
    _close_with(app, service)


def _add_unavailable(app: FastAPI, missing: MissingExtra) -> None:
    async def unavailable(_request: Request) -> Response:
        raise ApiError(501, str(missing), type="server_error", code="a2a_unavailable")

    app.add_route(CARD_PATH, unavailable, methods=["GET"])
    for path in RPC_PATHS:
        app.add_route(path, unavailable, methods=["POST"])


def _close_with(app: FastAPI, service: Any) -> None:
    """Open the task tables after the app's startup and close the A2A side before its shutdown,
    while the agents' checkpointers are still open for the turns it waits for."""
    inner = app.router.lifespan_context

    @contextlib.asynccontextmanager
    async def lifespan(scope_app: Any) -> AsyncIterator[Any]:
        async with inner(scope_app) as value:
            await service.open()
            try:
                yield value
            finally:
                await service.aclose()

    app.router.lifespan_context = lifespan


def _replay(body: bytes, receive_next: Receive) -> Receive:
    """An ASGI receive that hands over a body already read (within the limits) in one message,
    then the connection's own messages, so a stream still hears the client disconnect."""
    sent = False

    async def receive() -> Message:
        nonlocal sent
        if sent:
            return await receive_next()
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return receive

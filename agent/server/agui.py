"""The AG-UI endpoint: `POST /v1/agui/{agent}` runs a turn of the served agent from an AG-UI
RunAgentInput and streams the run's events (agui_input.py reads the request, agui_stream.py writes
the events; docs/server.md, "AG-UI").

The protocol's package (`ag-ui-protocol`) is the `agui` extra: without it the route answers 501
naming the extra, and the rest of the server is unaffected.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from agent.extras import MissingExtra, needs_extra

with needs_extra("server", "rein's HTTP server"):
    from fastapi import FastAPI, Request
    from fastapi.responses import Response

from agent.server.chat_turns import ServerState
from agent.server.errors import ApiError, bad_request
from agent.server.retries import read_signal
from agent.server.sse import EventStream

BodyReader = Callable[[Request, int, float | None], Awaitable[bytes]]
"""Reads a request body within the server's size and time limits (app.read_body)."""


def add_agui_routes(app: FastAPI, state: ServerState, read_body: BodyReader) -> None:
    """Serve every agent of `state` over AG-UI at `POST /v1/agui/{agent}`."""
    cfg = state.config
    try:
        from agent.server.agui_input import parse_run_input, run_request
        from agent.server.agui_stream import RunEvents, run_stream
    except MissingExtra as exc:
        missing: MissingExtra | None = exc
    else:
        missing = None

    async def agui_run(request: Request) -> Response:
        tenant = state.keys.check(request.headers.get("authorization"))
        agent = request.path_params["agent"]
        state.agent(agent)
        if missing is not None:
            raise ApiError(501, str(missing), type="server_error", code="extra_missing")
        body = await read_body(request, cfg.max_body_bytes, cfg.body_timeout_s)
        run = parse_run_input(body, max_messages=cfg.max_messages)
        try:
            retry = read_signal(request.headers)
        except ValueError as exc:
            raise bad_request(str(exc)) from None
        turn = run_request(agent, run, tenant, retry)
        deadline = asyncio.get_running_loop().time() + cfg.request_timeout_s
        handle = state.start(turn)
        return EventStream(
            run_stream(handle, RunEvents(run.thread_id, run.run_id), deadline, cfg.request_timeout_s),
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )

    # A plain Starlette route, like the chat route: it reads its own body and checks its own key.
    app.add_route("/v1/agui/{agent}", agui_run, methods=["POST"])


__all__ = ["add_agui_routes"]

"""The FastAPI application: OpenAI-compatible chat completions over rein agents.

`create_app` builds a standalone app (what `rein serve` runs) that can also be mounted inside an
existing FastAPI app; see docs/server.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
from collections.abc import AsyncIterator, Iterable, Mapping
from typing import Any

from agent.extras import needs_extra

with needs_extra("server", "rein's HTTP server"):
    from fastapi import Depends, FastAPI, Request
    from fastapi.responses import Response
    from starlette.exceptions import HTTPException as StarletteHTTPException

from agent.runtime import Agent
from agent.server.a2a import add_a2a
from agent.server.agui import add_agui_routes
from agent.server.auth import ApiKey, ApiKeys
from agent.server.chat_turns import ServerConfig, ServerState, TurnRequest
from agent.server.cors import add_cors
from agent.server.deliveries import client_connected, delivered_stream
from agent.server.errors import ApiError, bad_request, error_body
from agent.server.http_io import THREAD_HEADERS, json_response, read_body, wait_turn
from agent.server.responses import add_responses_routes
from agent.server.retries import read_signal
from agent.server.schema import (
    ChatRequest,
    client_history,
    completion_object,
    new_completion_id,
    parse_request,
)
from agent.server.sse import EventStream, stream_turn
from agent.server.thread_header import read_thread_header, thread_header
from agent.server.threads import KeySource, Turn, check_key, derived_key
from agent.server.ui import add_ui_routes
from agent.sqlite_file import StorageFault

log = logging.getLogger("rein.server")

def create_app(
    agents: Mapping[str, Agent],
    *,
    api_keys: Iterable[str | ApiKey] | Mapping[str, str | None] = (),
    config: ServerConfig | None = None,
    cors_origins: Iterable[str] = (),
    ui: bool = False,
) -> FastAPI:
    """An app serving each agent under its mapping key as a model.

    api_keys: accepted bearer keys (a plain key is its own tenant; `ApiKey(key, tenant=NAME)`
    entries, or a key → tenant-name mapping, let several keys share one tenant's threads); none
    means an open server. cors_origins: browser origins allowed to call the app (`*` for any);
    none leaves CORS off. ui: serve the browser chat page at `/` (agent/server/ui.py). The app's
    lifespan opens the agents' checkpointers at startup and, at shutdown, waits for running turns
    and closes them; when mounting the app, run
    `app.state.rein.open()` / `aclose()` from the parent's lifespan (or pass
    `lifespan=rein_app.router.lifespan_context`).
    """
    keys = ApiKeys(api_keys)
    state = ServerState(agents, config, keys)
    cfg = state.config

    @contextlib.asynccontextmanager
    async def lifespan(_app: Any) -> AsyncIterator[None]:
        await state.open()
        try:
            yield
        finally:
            await state.aclose()

    app = FastAPI(title="rein", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    app.state.rein = state
    add_cors(app, cors_origins)

    @app.exception_handler(ApiError)
    async def _api_error(_request: Request, exc: ApiError) -> Response:
        return json_response(exc.body(), exc.status, exc.headers)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(_request: Request, exc: StarletteHTTPException) -> Response:
        kind = "invalid_request_error" if exc.status_code < 500 else "server_error"
        # exc.headers carries what the status needs, such as a 405's Allow
        return json_response(error_body(str(exc.detail), type=kind), exc.status_code, exc.headers)

    @app.exception_handler(Exception)
    async def _unexpected(_request: Request, exc: Exception) -> Response:
        log.exception("unexpected error")
        return json_response(error_body(f"internal error: {type(exc).__name__}", type="server_error"), 500)

    @app.exception_handler(StorageFault)
    @app.exception_handler(sqlite3.Error)
    async def _storage_error(request: Request, exc: Exception) -> Response:
        # A full disk, a read-only or corrupt file: 503 with its cause, and /healthz reports it.
        answer = state.storage.failure(exc)
        if isinstance(answer, ApiError):
            return await _api_error(request, answer)
        return await _unexpected(request, exc)

    async def authorize(request: Request) -> str | None:
        # async: FastAPI runs a plain def dependency on a worker thread, a hand-off per request
        # for a check that takes microseconds.
        return keys.check(request.headers.get("authorization"))

    @app.get("/healthz")
    async def healthz() -> Response:
        if state.closing:
            return json_response({"status": "shutting_down"}, 503)
        problem = state.storage.problem()
        if problem is not None:
            return json_response({"status": "unhealthy", "error": problem}, 503)
        return json_response({"status": "ok"})

    @app.get("/v1/models", dependencies=[Depends(authorize)])
    async def list_models() -> Response:
        return json_response({"object": "list", "data": [_model_card(n) for n in state.agents]})

    @app.get("/v1/models/{model_id:path}", dependencies=[Depends(authorize)])
    async def get_model(model_id: str) -> Response:
        state.agent(model_id)
        return json_response(_model_card(model_id))

    async def chat_completions(request: Request) -> Response:
        # A plain Starlette route (added below): FastAPI's request handling, dependency solving
        # included, cost about 3% of a served turn's Python calls for a route that reads its own
        # body and checks its own key.
        tenant = await authorize(request)
        body = await read_body(request, cfg.max_body_bytes, cfg.body_timeout_s)
        chat = parse_request(body, max_messages=cfg.max_messages)
        state.agent(chat.model)
        turns, messages, system = client_history(chat)
        key, source = thread_key(request, chat, system, turns)
        try:
            retry = read_signal(request.headers)
        except ValueError as exc:
            raise bad_request(str(exc)) from None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + cfg.request_timeout_s
        turn = TurnRequest(chat.model, key, source, tenant, turns, messages, stream=chat.stream, retry=retry,
                           decisions=chat.decisions)
        handle = state.start(turn)
        if chat.stream:
            plan = await wait_turn(handle, handle.plan, deadline, cfg.request_timeout_s)
            return EventStream(
                delivered_stream(stream_turn(handle, chat, deadline, cfg.request_timeout_s), client_connected(request),
                                 handle.done, lambda outcome: state.delivered(turn, outcome)),
                headers={
                    "Cache-Control": "no-cache", "X-Accel-Buffering": "no",
                    "X-Rein-Thread": thread_header(plan.thread_id),
                },
            )
        outcome = await wait_turn(handle, handle.done, deadline, cfg.request_timeout_s)
        failure = outcome.failed()
        if failure is not None:
            raise failure
        if await client_connected(request)():
            state.delivered(turn, outcome)
        return json_response(
            completion_object(
                id=new_completion_id(), model=chat.model, content=outcome.reply,
                finish_reason=outcome.finish_reason, usage=outcome.usage, rein=outcome.metadata(),
                reasoning=outcome.reasoning, pending=outcome.pending,
            ),
            headers={"X-Rein-Thread": thread_header(outcome.thread_id)},
        )

    app.add_route("/v1/chat/completions", chat_completions, methods=["POST"])
    add_responses_routes(app, state, authorize, cfg, read_body)
    add_agui_routes(app, state, read_body)
    add_a2a(app, state, read_body)
    if ui:
        add_ui_routes(app, state)
    return app


def _model_card(name: str) -> dict[str, Any]:
    return {"id": name, "object": "model", "created": 0, "owned_by": "rein"}


def thread_key(request: Request, chat: ChatRequest, system: list[str], turns: list[Turn]) -> tuple[str, KeySource]:
    """The thread key: X-Rein-Thread / X-Thread-Id, else `user`, else derived from the conversation."""
    try:
        given = {
            name: read_thread_header(v.strip()) for name in THREAD_HEADERS if (v := request.headers.get(name)) and v.strip()
        }
        if len(set(given.values())) > 1:
            raise ValueError("X-Rein-Thread and X-Thread-Id name different threads")
        if given:
            name, value = next(iter(given.items()))
            return check_key(value, f"the {name} header"), "header"
        if chat.user and chat.user.strip():
            return check_key(chat.user, "the `user` field"), "user"
    except ValueError as exc:
        raise bad_request(str(exc)) from None
    return derived_key(system, turns), "derived"


__all__ = ["ServerConfig", "create_app", "json_response", "read_body", "thread_key"]

"""The FastAPI application: OpenAI-compatible chat completions over rein agents.

`create_app` builds a standalone app (what `rein serve` runs) that can also be mounted inside an
existing FastAPI app; see docs/server.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
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
from agent.server.chat_turns import ServerConfig, ServerState, TurnHandle, TurnRequest
from agent.server.cors import add_cors
from agent.server.deliveries import client_connected, delivered_stream
from agent.server.errors import ApiError, bad_request, error_body
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

THREAD_HEADERS = ("x-rein-thread", "x-thread-id")
"""Request headers that name a thread (either one; both must agree)."""
DRAIN_LIMIT = 16 * 1024 * 1024
"""How much of an oversized body is read and dropped so the client can read its 413."""


def json_response(obj: Any, status: int = 200, headers: Mapping[str, str] | None = None) -> Response:
    """A JSON response that tolerates odd values in intervention records."""
    body = json.dumps(obj, ensure_ascii=False, default=str).encode()
    return Response(body, status_code=status, media_type="application/json", headers=dict(headers or {}))


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
            plan = await _wait(handle, handle.plan, deadline, cfg.request_timeout_s)
            return EventStream(
                delivered_stream(stream_turn(handle, chat, deadline, cfg.request_timeout_s), client_connected(request),
                                 handle.done, lambda outcome: state.delivered(turn, outcome)),
                headers={
                    "Cache-Control": "no-cache", "X-Accel-Buffering": "no",
                    "X-Rein-Thread": thread_header(plan.thread_id),
                },
            )
        outcome = await _wait(handle, handle.done, deadline, cfg.request_timeout_s)
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


async def read_body(request: Request, limit: int, timeout_s: float | None = None) -> bytes:
    """The request body, or 413 when Content-Length or the bytes received pass the limit, or 408
    when it has not all arrived within timeout_s."""
    try:
        async with asyncio.timeout(timeout_s):
            return await _read_body(request, limit)
    except TimeoutError:
        # Closing the connection drops the rest of a body that might never come.
        raise ApiError(
            408, f"the request body did not arrive within {timeout_s:g} s", code="body_timeout",
            headers={"Connection": "close"},
        ) from None


async def _read_body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    try:
        limit_hit = declared is not None and int(declared) > limit
    except ValueError:
        raise bad_request(f"invalid Content-Length header {declared!r}") from None
    chunks: list[bytes] = []
    received = 0
    # An oversized body is still read (up to DRAIN_LIMIT) and dropped, so a client that is still
    # sending sees the 413 instead of a reset connection.
    with contextlib.suppress(OSError, RuntimeError):
        async for chunk in request.stream():
            received += len(chunk)
            if received > limit:
                limit_hit = True
            if limit_hit:
                chunks.clear()
                if received > DRAIN_LIMIT:
                    break
            else:
                chunks.append(chunk)
    if limit_hit:
        raise ApiError(413, f"the request body is larger than the server's limit of {limit} bytes", code="request_too_large")
    return b"".join(chunks)


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


async def _wait(handle: TurnHandle, future: asyncio.Future[Any], deadline: float, timeout_s: float) -> Any:
    remaining = max(deadline - asyncio.get_running_loop().time(), 0.0)
    try:
        return await asyncio.wait_for(asyncio.shield(future), remaining)
    except TimeoutError:
        if handle.started:
            detail = (
                "the turn keeps running and is committed to its thread; resend the same request (the "
                "same Idempotency-Key, or the whole history) to get its answer without running it again"
            )
        else:
            # It was still queued behind another turn of the same thread: nothing ran, so drop it.
            if handle.task is not None:
                handle.task.cancel()
            detail = "it was still waiting for an earlier turn of the same thread and was dropped"
        raise ApiError(
            504, f"the agent did not answer within {timeout_s:g} s; {detail}", type="timeout", code="request_timeout"
        ) from None


__all__ = ["ServerConfig", "create_app", "json_response", "read_body", "thread_key"]

"""HTTP plumbing every protocol of `rein serve` shares: reading a bounded body, answering JSON,
the headers that name a thread, and waiting for a turn within the request's deadline."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Mapping
from typing import Any

from agent.extras import needs_extra
from agent.server.chat_turns import TurnHandle
from agent.server.errors import ApiError, bad_request, still_running

with needs_extra("server", "rein's HTTP server"):
    from fastapi import Request
    from fastapi.responses import Response

THREAD_HEADERS = ("x-rein-thread", "x-thread-id")
"""Request headers that name a thread (either one; both must agree)."""
DRAIN_LIMIT = 16 * 1024 * 1024
"""How much of an oversized body is read and dropped so the client can read its 413."""


def json_response(obj: Any, status: int = 200, headers: Mapping[str, str] | None = None) -> Response:
    """A JSON response that tolerates odd values in intervention records."""
    body = json.dumps(obj, ensure_ascii=False, default=str).encode()
    return Response(body, status_code=status, media_type="application/json", headers=dict(headers or {}))


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


async def wait_turn(handle: TurnHandle, future: asyncio.Future[Any], deadline: float, timeout_s: float,
                    resend: str = "the same Idempotency-Key, or the whole history") -> Any:
    """The future's result; 504 past the deadline. A turn that started keeps running and is
    committed (the client resends with `resend` to get its answer); one still queued behind
    another turn of its thread is dropped."""
    remaining = max(deadline - asyncio.get_running_loop().time(), 0.0)
    try:
        return await asyncio.wait_for(asyncio.shield(future), remaining)
    except TimeoutError:
        if handle.started:
            raise still_running(timeout_s, resend) from None
        # It was still queued behind another turn of the same thread: nothing ran, so drop it.
        if handle.task is not None:
            handle.task.cancel()
        raise ApiError(
            504,
            f"the agent did not answer within {timeout_s:g} s; it was still waiting for an earlier turn of "
            "the same thread and was dropped",
            type="timeout",
            code="request_timeout",
        ) from None


__all__ = ["DRAIN_LIMIT", "THREAD_HEADERS", "json_response", "read_body", "wait_turn"]

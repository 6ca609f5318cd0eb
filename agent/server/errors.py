"""HTTP errors in OpenAI's shape: `{"error": {"message", "type", "param", "code"}}`."""

from __future__ import annotations

from typing import Any


class ApiError(Exception):
    """An error answered to the client with an HTTP status and an OpenAI-style body."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",
        code: str | None = None,
        param: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.code = code
        self.param = param
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        """The JSON body."""
        return error_body(self.message, type=self.type, code=self.code, param=self.param)


def error_body(message: str, *, type: str, code: str | None = None, param: str | None = None) -> dict[str, Any]:
    """An OpenAI-style error object."""
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


def unauthorized(message: str) -> ApiError:
    """401 for a missing or wrong API key."""
    return ApiError(401, message, code="invalid_api_key", headers={"WWW-Authenticate": "Bearer"})


def bad_request(message: str, param: str | None = None) -> ApiError:
    """400 for a malformed or unsupported request."""
    return ApiError(400, message, code="invalid_request", param=param)


def not_found(message: str, code: str = "not_found") -> ApiError:
    """404 for an unknown model (agent) or path."""
    return ApiError(404, message, code=code)


def storage_unavailable(cause: str) -> ApiError:
    """503 for a threads database that cannot be used (deleted, replaced, full, read-only, corrupt), naming the cause."""
    return ApiError(503, f"the threads database cannot be used: {cause}", type="server_error", code="storage_unavailable")


def still_running(timeout_s: float, resend: str = "the same Idempotency-Key, or the whole history") -> ApiError:
    """The 504 of a request whose turn started but did not finish within its deadline: the turn
    keeps running and is committed, and a resend with `resend` gets its answer."""
    return ApiError(
        504,
        f"the agent did not finish within {timeout_s:g} s; the turn keeps running and is committed to "
        f"its thread; resend the same request ({resend}) to get its answer without running it again",
        type="timeout",
        code="request_timeout",
    )

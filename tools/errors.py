"""Errors raised by tools and by the tool machinery."""

from __future__ import annotations

import concurrent.futures
from typing import Any


class ToolError(Exception):
    """An error a tool raises on purpose; its message goes back to the model in full, as the tool
    result. Any other exception reaches the model only as its type and a short message with file
    paths removed (see `tools.execute.describe_exception`)."""


class ToolArgumentError(ToolError):
    """The model sent arguments that are not valid JSON or do not match the tool's schema."""


class ToolTimeoutError(ToolError):
    """The tool did not finish within its timeout."""

    def __init__(self, message: str, completion: concurrent.futures.Future[Any] | None = None) -> None:
        super().__init__(message)
        self.completion = completion
        """For a sync tool, whose thread cannot be stopped: resolves with the call's eventual return
        value or exception when the thread ends. None for async tools, which are cancelled."""


class ToolRetryBudgetExceeded(Exception):
    """A tool received invalid arguments more often than its retry budget allows."""

    def __init__(self, tool: str, attempts: int, detail: str) -> None:
        super().__init__(f"tool {tool!r} got invalid arguments {attempts} times; last error: {detail}")
        self.tool = tool
        self.attempts = attempts
        self.detail = detail


class ToolExecutionError(Exception):
    """A tool raised an unexpected exception and the tool is configured to raise, not to report."""

    def __init__(self, tool: str, cause: BaseException) -> None:
        super().__init__(f"tool {tool!r} failed: {type(cause).__name__}: {cause}")
        self.tool = tool
        self.cause = cause

"""Errors raised by tools and by the tool machinery."""

from __future__ import annotations


class ToolError(Exception):
    """An error a tool raises on purpose; its message goes back to the model as the tool result."""


class ToolArgumentError(ToolError):
    """The model sent arguments that are not valid JSON or do not match the tool's schema."""


class ToolTimeoutError(ToolError):
    """The tool did not finish within its timeout."""


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

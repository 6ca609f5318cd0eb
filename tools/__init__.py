"""Tool declaration, validation, execution and the toolkit registry. Depends on nothing else in rein."""

from tools.errors import (
    ToolArgumentError,
    ToolError,
    ToolExecutionError,
    ToolRetryBudgetExceeded,
    ToolTimeoutError,
)
from tools.execute import CallRequest, ToolResult, execute_calls
from tools.registry import Toolkit, load_toolkit, register_toolkit, toolkit_names
from tools.tool import Tool, ToolKind, format_result, tool

__all__ = [
    "CallRequest",
    "Tool",
    "ToolArgumentError",
    "ToolError",
    "ToolExecutionError",
    "ToolKind",
    "ToolResult",
    "ToolRetryBudgetExceeded",
    "ToolTimeoutError",
    "Toolkit",
    "execute_calls",
    "format_result",
    "load_toolkit",
    "register_toolkit",
    "tool",
    "toolkit_names",
]

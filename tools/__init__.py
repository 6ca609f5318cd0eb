"""Tool declaration, validation, execution, and toolkits found by name (registered in this process or
declared as "rein.toolkits" entry points). Depends on nothing else in rein."""

from tools.errors import (
    ToolArgumentError,
    ToolError,
    ToolExecutionError,
    ToolRetryBudgetExceeded,
    ToolTimeoutError,
)
from tools.execute import CallHooks, CallRequest, ToolResult, describe_exception, execute_calls
from tools.registry import Toolkit, load_toolkit, register_toolkit, toolkit_factory, toolkit_names
from tools.tool import Tool, ToolKind, format_result, tool

__all__ = [
    "CallHooks",
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
    "describe_exception",
    "execute_calls",
    "format_result",
    "load_toolkit",
    "register_toolkit",
    "tool",
    "toolkit_factory",
    "toolkit_names",
]

"""The `python` tool: code execution in a sandbox session that any agent can be given."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tools.errors import ToolError
from tools.registry import Toolkit, toolkit_factory
from tools.sandbox import SandboxLimits, SandboxSession
from tools.tool import Tool, ToolKind, tool

_DESCRIPTION = (
    "Run Python code in a sandbox and get its printed output and the value of its last expression. "
    "Variables persist between calls. No imports, files or network; builtins are limited to plain "
    "data types and functions (len, range, sorted, sum, min, max, dict, list, ...) plus `math`; "
    "names or attributes starting with '_' and str.format are rejected (use f-strings)."
)


def python_tool(session: SandboxSession, name: str = "python") -> Tool:
    """A code-execution tool bound to one sandbox session."""

    def python(code: str) -> str:
        """Run Python code in the sandbox.

        Args:
            code: Python source; the value of a final expression is returned after the output.
        """
        result = session.run(code)
        if not result.ok:
            raise ToolError(result.describe())
        return result.describe()

    built = tool(name=name, description=_DESCRIPTION, kind=ToolKind.GENERIC,
                 timeout_s=session.limits.wall_s + session.limits.startup_s + 5)(python)
    built.metadata["sandbox_session"] = session
    return built


@toolkit_factory
def python_toolkit(
    limits: SandboxLimits | None = None,
    preamble: str = "",
    data: Mapping[str, Any] | None = None,
    exports: Sequence[str] | None = None,
) -> Toolkit:
    """A toolkit holding one `python` tool with its own sandbox session (started on first use)."""
    session = SandboxSession(preamble=preamble, data=data, exports=exports, limits=limits)
    return Toolkit([python_tool(session)], name="python")

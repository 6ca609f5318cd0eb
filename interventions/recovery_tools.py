"""Declaring the recovery tools to the agent.

ReIn's plan tells the agent to call a recovery tool; the paper found the plan has no effect when
that tool is not among the agent's declared tools, so agents that use ReIn get them as real tools.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

from agent.errors import UserFacingError
from interventions.error_map import ErrorMap, resolve_error_map
from tools import Tool, Toolkit
from tools.builtin import PLAN_ONLY, RESPOND_NEXT, USER_ERRORS_ONLY, recovery_tools, think
from tools.registry import resolve

Offer = Literal["on_plan", "always"]
"""When ReIn's own tools are offered to the model: only in turns with a planted plan, or always."""


def recovery_declarations(error_map: ErrorMap | None = None, offer: Offer = "on_plan") -> list[Tool]:
    """What ReIn declares to an agent: the recovery tools marked as such, and the think tool; with
    offer="on_plan" each is marked PLAN_ONLY. The agent's own tools of the same names win."""
    out = [as_recovery_tool(t) for t in recovery_tool_objects(error_map)] + [think]
    if offer == "on_plan":
        out = [t.with_options(metadata={**t.metadata, PLAN_ONLY: True}) for t in out]
    return out


def recovery_tool_objects(error_map: ErrorMap | None = None) -> list[Tool]:
    """The Tool objects for every recovery tool the map names (built-ins or "module:attribute" refs)."""
    error_map = error_map or resolve_error_map(None)
    builtin = {t.name: t for t in recovery_tools()}
    out: list[Tool] = []
    for name, ref in error_map.recovery_tools().items():
        if ref:
            try:
                found = resolve(ref)
            except (ImportError, AttributeError, ValueError) as exc:
                raise UserFacingError(f"recovery tool {name!r}: cannot load {ref!r}: {exc}") from None
            if not isinstance(found, Tool):
                raise UserFacingError(f"recovery tool {name!r}: {ref!r} is a {type(found).__name__}, not a Tool")
            if found.name != name:
                raise UserFacingError(f"recovery tool {name!r}: {ref!r} is named {found.name!r}")
            out.append(found)
        elif name in builtin:
            out.append(builtin[name])
        else:
            raise UserFacingError(
                f"recovery tool {name!r} is not built in; give its recovery_tool_ref ('module:attribute') "
                "in the error map"
            )
    return out


def with_recovery_tools(
    tools: Iterable[Tool] | Toolkit, error_map: ErrorMap | None = None, *, think_tool: bool = True
) -> Toolkit:
    """The agent's tools plus the recovery tools (and the think tool that carries ReIn's plan).

    Tools the agent already has keep their own definition (a domain's transfer_to_human_agents,
    say), marked as recovery tools too: after any of them succeeds, the agent answers the user.
    """
    base = tools if isinstance(tools, Toolkit) else Toolkit(tools, name="agent")
    extra = recovery_tool_objects(error_map)
    recovery = {t.name for t in extra}
    if think_tool:
        extra.append(think)
    merged = base.merged(extra)
    return Toolkit((as_recovery_tool(t) if t.name in recovery else t for t in merged), name=merged.name)


def as_recovery_tool(tool: Tool) -> Tool:
    """The tool marked as a recovery tool: once a call of it succeeds, the agent's next step answers
    the user instead of calling it, or any tool, again in that turn (RESPOND_NEXT); and after a
    refused call of the agent's own in a turn it is not offered, unless the turn holds a planted
    plan (USER_ERRORS_ONLY)."""
    if tool.metadata.get(RESPOND_NEXT) and tool.metadata.get(USER_ERRORS_ONLY):
        return tool
    return tool.with_options(metadata={**tool.metadata, RESPOND_NEXT: True, USER_ERRORS_ONLY: True})


def missing_recovery_tools(tool_schemas: list[dict], error_map: ErrorMap) -> list[str]:
    """Recovery tools the map uses that the agent's tool schemas do not declare."""
    declared = {s.get("function", s).get("name") for s in tool_schemas}
    return [name for name in error_map.recovery_tools() if name not in declared]

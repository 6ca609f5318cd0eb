"""Run a batch of tool calls: validate, execute concurrently where safe, and always answer every call."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from tools.errors import (
    ToolArgumentError,
    ToolError,
    ToolExecutionError,
    ToolRetryBudgetExceeded,
    ToolTimeoutError,
)
from tools.tool import Tool, ToolKind, format_result

ErrorKind = Literal["arguments", "execution", "timeout", "unknown_tool", "rejected"]


@dataclass(frozen=True)
class CallRequest:
    """One tool call as the model made it."""

    id: str
    """The model's id for the call; the tool message answers it."""
    name: str
    """Tool name the model asked for."""
    arguments: str | dict[str, Any]
    """Raw arguments: JSON text from the model, or an already-decoded object."""


@dataclass(frozen=True)
class ToolResult:
    """The answer to one tool call, sent back to the model as a tool message."""

    call_id: str
    """Id of the call this answers."""
    name: str
    """Tool name."""
    content: str
    """Text of the tool message."""
    is_error: bool = False
    """Whether the call failed."""
    error_kind: ErrorKind | None = None
    """Why it failed, when it did."""
    cost: float = 0.0
    """Price booked for the call."""


async def execute_calls(
    calls: Sequence[CallRequest],
    tools: Mapping[str, Tool],
    argument_errors: dict[str, int] | None = None,
) -> list[ToolResult]:
    """Answer every call, in the order given.

    READ, GENERIC and THINK calls run concurrently; WRITE calls run one at a time in call order
    after them, so that state changes are deterministic. `argument_errors` counts invalid-argument
    errors per tool across a run; going past a tool's budget raises ToolRetryBudgetExceeded.
    """
    counts = argument_errors if argument_errors is not None else {}
    prepared: list[tuple[CallRequest, Tool | None, dict[str, Any] | ToolResult]] = []
    for call in calls:
        t = tools.get(call.name)
        if t is None:
            known = ", ".join(sorted(tools)) or "none"
            prepared.append(
                (call, None, _error(call, f"unknown tool {call.name!r}; available tools: {known}", "unknown_tool"))
            )
            continue
        try:
            prepared.append((call, t, t.parse_arguments(call.arguments)))
        except ToolArgumentError as exc:
            counts[t.name] = counts.get(t.name, 0) + 1
            if counts[t.name] > t.max_argument_retries:
                raise ToolRetryBudgetExceeded(t.name, counts[t.name], str(exc)) from None
            prepared.append((call, t, _error(call, str(exc), "arguments")))

    results: dict[int, ToolResult] = {}
    concurrent: list[tuple[int, CallRequest, Tool, dict[str, Any]]] = []
    sequential: list[tuple[int, CallRequest, Tool, dict[str, Any]]] = []
    for i, (call, t, args) in enumerate(prepared):
        if isinstance(args, ToolResult) or t is None:
            results[i] = args  # type: ignore[assignment]
        elif t.kind is ToolKind.WRITE:
            sequential.append((i, call, t, args))
        else:
            concurrent.append((i, call, t, args))

    outcomes = await asyncio.gather(*(run_one(call, t, args) for _, call, t, args in concurrent))
    for (i, *_), outcome in zip(concurrent, outcomes, strict=True):
        results[i] = outcome
    for i, call, t, args in sequential:
        results[i] = await run_one(call, t, args)
    return [results[i] for i in range(len(prepared))]


async def run_one(call: CallRequest, t: Tool, args: dict[str, Any]) -> ToolResult:
    """Execute one validated call; errors become error results unless the tool says raise."""
    try:
        value = await t.run(args)
    except ToolTimeoutError as exc:
        return _error(call, str(exc), "timeout", t.cost)
    except ToolError as exc:
        return _error(call, f"Error: {exc}", "execution", t.cost)
    except Exception as exc:
        if t.on_error == "raise":
            raise ToolExecutionError(t.name, exc) from exc
        return _error(call, f"Error: {type(exc).__name__}: {exc}", "execution", t.cost)
    return ToolResult(call_id=call.id, name=call.name, content=format_result(value), cost=t.cost)


def rejected(call: CallRequest, reason: str | None = None) -> ToolResult:
    """The tool message for a call a human declined to approve."""
    text = "The user declined this tool call." + (f" Reason: {reason}" if reason else "")
    return _error(call, text, "rejected")


def _error(call: CallRequest, text: str, kind: ErrorKind, cost: float = 0.0) -> ToolResult:
    return ToolResult(call_id=call.id, name=call.name, content=text, is_error=True, error_kind=kind, cost=cost)

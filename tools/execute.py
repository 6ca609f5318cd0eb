"""Run a batch of tool calls: validate, execute concurrently where safe, and always answer every call."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import re
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

ErrorKind = Literal["arguments", "execution", "timeout", "unknown_tool", "rejected", "interrupted"]

ERROR_TEXT_LIMIT = 300
"""Most characters of an unexpected exception's message that reach the model."""

_NOTHING = contextlib.nullcontext()
_PATH = re.compile(r"(?:[A-Za-z]:)?(?:[/\\][\w.@~+-]+){2,}[/\\]?")


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
    parts: list[dict[str, Any]] | None = None
    """Content parts (text and image_url) for models that take them; `content` stays the text."""
    end_turn: str | None = None
    """A termination reason: the tool's environment ended, so the turn ends after this step."""


@dataclass(frozen=True)
class ToolOutput:
    """What a tool may return instead of a plain value: text, optional content parts (e.g. a
    picture for vision models) and, for an environment that has ended, the turn's termination."""

    text: str
    """The text of the tool message (what text-only models and logs see)."""
    parts: list[dict[str, Any]] | None = None
    """OpenAI content parts sent instead of the text when given (include the text part)."""
    end_turn: str | None = None
    """Ends the turn after this tool step with this termination (e.g. environment_done)."""


class CallHooks:
    """Callbacks around the execution of each call; these do nothing. The agent runtime overrides
    them to journal every call, so a crash never runs a finished call again."""

    def running(self, call: CallRequest, tool: Tool) -> contextlib.AbstractContextManager[Any]:
        """A context held while the call runs, `finished` included (the agent runtime's tracing
        opens the call's span here)."""
        return _NOTHING

    async def started(self, call: CallRequest, tool: Tool) -> None:
        """A WRITE call is about to run; returns before the tool starts."""

    async def finished(self, call: CallRequest, result: ToolResult) -> None:
        """A call ran and has its answer; returns before the answer is handed on."""

    async def late(self, call: CallRequest, result: ToolResult) -> None:
        """A timed-out WRITE call's thread ended after all (result or error); runs on the event loop
        that ran the call, if that loop still runs."""


async def execute_calls(
    calls: Sequence[CallRequest],
    tools: Mapping[str, Tool],
    argument_errors: dict[str, int] | None = None,
    hooks: CallHooks | None = None,
) -> list[ToolResult]:
    """Answer every call, in the order given.

    READ, GENERIC and THINK calls run concurrently; WRITE calls run one at a time in call order
    after them, so that state changes are deterministic. `argument_errors` counts invalid-argument
    errors per tool across a run; going past a tool's budget raises ToolRetryBudgetExceeded.
    `hooks` hear of each call that runs (calls answered by validation errors do not run).
    """
    hooks = hooks or CallHooks()
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
        if isinstance(args, ToolResult):
            results[i] = args
            continue
        assert t is not None, "an unknown tool is answered by an error result above"
        if t.kind is ToolKind.WRITE:
            sequential.append((i, call, t, args))
        else:
            concurrent.append((i, call, t, args))

    outcomes = await asyncio.gather(*(run_one(call, t, args, hooks) for _, call, t, args in concurrent))
    for (i, *_), outcome in zip(concurrent, outcomes, strict=True):
        results[i] = outcome
    for i, call, t, args in sequential:
        results[i] = await run_one(call, t, args, hooks)
    return [results[i] for i in range(len(prepared))]


async def run_one(call: CallRequest, t: Tool, args: dict[str, Any], hooks: CallHooks | None = None) -> ToolResult:
    """Execute one validated call; errors become error results unless the tool says raise."""
    hooks = hooks or CallHooks()
    with hooks.running(call, t):
        if t.kind is ToolKind.WRITE:
            await hooks.started(call, t)
        result = await _run(call, t, args, hooks)
        await hooks.finished(call, result)
    return result


async def _run(call: CallRequest, t: Tool, args: dict[str, Any], hooks: CallHooks) -> ToolResult:
    try:
        value = await t.run(args)
    except ToolTimeoutError as exc:
        if t.kind is not ToolKind.WRITE:
            return _error(call, str(exc), "timeout", t.cost)
        if exc.completion is not None:
            _report_late(call, t, exc.completion, hooks)
        return _error(call, f"{exc}; outcome unknown: it may still take effect, check before retrying", "timeout", t.cost)
    except ToolError as exc:
        return _error(call, f"Error: {exc}", "execution", t.cost)
    except Exception as exc:
        if t.on_error == "raise":
            raise ToolExecutionError(t.name, exc) from exc
        return _error(call, f"Error: {describe_exception(exc)}", "execution", t.cost)
    if isinstance(value, ToolOutput):
        return ToolResult(call.id, call.name, value.text, cost=t.cost, parts=value.parts, end_turn=value.end_turn)
    return ToolResult(call_id=call.id, name=call.name, content=format_result(value), cost=t.cost)


def describe_exception(exc: BaseException) -> str:
    """An unexpected exception as the model may see it: its type and the first line of its
    message, file paths replaced by <path>, at most ERROR_TEXT_LIMIT characters. Internals
    (paths, tracebacks, long dumps) stay out of the conversation; raise ToolError to show more."""
    lines = str(exc).strip().splitlines()
    text = _PATH.sub("<path>", lines[0] if lines else "")
    if len(text) > ERROR_TEXT_LIMIT:
        text = text[: ERROR_TEXT_LIMIT - 1] + "…"
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def interrupted(call: CallRequest) -> ToolResult:
    """The tool message for a WRITE call that was running when its process stopped."""
    return _error(
        call,
        f"Error: tool {call.name!r} was interrupted: outcome unknown; check before retrying "
        "(the process stopped while this call ran, so it may or may not have taken effect)",
        "interrupted",
    )


_LATE_TASKS: set[asyncio.Task[None]] = set()


def _report_late(call: CallRequest, t: Tool, completion: concurrent.futures.Future[Any], hooks: CallHooks) -> None:
    """Hand a timed-out sync call's eventual outcome to hooks.late, on this event loop."""
    loop = asyncio.get_running_loop()

    def landed(done: concurrent.futures.Future[Any]) -> None:
        exc = done.exception()
        if exc is None:
            result = ToolResult(call.id, call.name, format_result(done.result()), cost=t.cost)
        elif isinstance(exc, ToolError):
            result = _error(call, f"Error: {exc}", "execution", t.cost)
        else:
            result = _error(call, f"Error: {describe_exception(exc)}", "execution", t.cost)
        # RuntimeError: the loop that ran the call has closed; nobody is left to record it.
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(_start_late, hooks, call, result)

    completion.add_done_callback(landed)


def _start_late(hooks: CallHooks, call: CallRequest, result: ToolResult) -> None:
    task = asyncio.ensure_future(hooks.late(call, result))
    # Keep a reference until done: the loop holds tasks only weakly.
    _LATE_TASKS.add(task)
    task.add_done_callback(_LATE_TASKS.discard)



def rejected(call: CallRequest, reason: str | None = None) -> ToolResult:
    """The tool message for a call a human declined to approve."""
    text = "The user declined this tool call." + (f" Reason: {reason}" if reason else "")
    return _error(call, text, "rejected")


def _error(call: CallRequest, text: str, kind: ErrorKind, cost: float = 0.0) -> ToolResult:
    return ToolResult(call_id=call.id, name=call.name, content=text, is_error=True, error_kind=kind, cost=cost)

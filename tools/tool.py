"""The tool declaration: a typed function plus the schema, kind and limits the runtime needs."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import dataclasses
import enum
import functools
import inspect
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, overload

from pydantic import BaseModel, ValidationError

from tools.errors import ToolArgumentError, ToolTimeoutError
from tools.schema import json_schema_for, model_from_signature, parse_docstring


class ToolKind(enum.StrEnum):
    """What a tool does to the world; WRITE calls are replayed when a trajectory is re-executed."""

    READ = "READ"
    WRITE = "WRITE"
    GENERIC = "GENERIC"
    THINK = "THINK"


@dataclass
class Tool:
    """A callable the model may use, with everything the runtime needs to call it safely."""

    name: str
    """Name the model calls the tool by."""
    description: str
    """What the tool does, shown to the model."""
    parameters: dict[str, Any]
    """JSON Schema of the arguments object."""
    fn: Callable[..., Any]
    """The implementation; sync or async, called with keyword arguments."""
    kind: ToolKind = ToolKind.GENERIC
    """READ, WRITE, GENERIC or THINK."""
    args_model: type[BaseModel] | None = None
    """Pydantic model that validates arguments; None passes the parsed JSON through unchecked."""
    needs_approval: bool = False
    """Pause the run for human approval before each call."""
    idempotent: bool = False
    """Running a call twice has the effect of running it once: a WRITE call cut off by a crash is
    run again on resume, instead of being answered "interrupted: outcome unknown"."""
    timeout_s: float | None = 30.0
    """Wall-clock limit per call; None means no limit."""
    max_argument_retries: int = 3
    """How many invalid-argument errors per run the model may make before the run stops."""
    on_error: Literal["return", "raise"] = "return"
    """Unexpected exceptions: send to the model as a tool error, or stop the run."""
    cost: float = 0.0
    """Price of one call in dollars, booked in the cost ledger."""
    metadata: dict[str, Any] = field(default_factory=dict)
    """Free-form data for plug-ins (e.g. recovery tool roles)."""

    def openai_schema(self) -> dict[str, Any]:
        """The tool in OpenAI's function-calling format."""
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }

    def parse_arguments(self, raw: str | dict[str, Any] | None) -> dict[str, Any]:
        """Decode and validate raw model arguments; raises ToolArgumentError with the detail."""
        if raw is None or raw == "":
            data: Any = {}
        elif isinstance(raw, str):
            try:
                data = json.loads(raw)
            except json.JSONDecodeError as exc:
                raise ToolArgumentError(
                    f"arguments for {self.name!r} are not valid JSON ({exc.msg} at position {exc.pos}); "
                    "send a JSON object matching the tool's parameters"
                ) from None
        else:
            data = raw
        if not isinstance(data, dict):
            raise ToolArgumentError(
                f"arguments for {self.name!r} must be a JSON object, got {type(data).__name__}"
            )
        if self.args_model is None:
            return data
        try:
            validated = self.args_model.model_validate(data)
        except ValidationError as exc:
            raise ToolArgumentError(_describe_validation(self.name, exc)) from None
        # Keep only what the caller sent plus defaults, as the function's own keyword arguments.
        return {name: getattr(validated, name) for name in type(validated).model_fields}

    async def run(self, arguments: dict[str, Any]) -> Any:
        """Call the implementation with validated arguments, enforcing the timeout.

        An async tool that times out is cancelled. A sync tool cannot be stopped: its thread runs
        on, and the ToolTimeoutError carries a future of its eventual outcome.
        """
        completion: concurrent.futures.Future[Any] | None = None
        if inspect.iscoroutinefunction(self.fn):
            call: Any = self.fn(**arguments)
        else:
            # Sync tools run in a thread so a slow one cannot block the event loop or its peers.
            completion = _start_thread(functools.partial(self.fn, **arguments), self.name)
            call = asyncio.wrap_future(completion)
        if self.timeout_s is None:
            return await call
        try:
            # The running thread's future ignores the cancel, so `completion` still reports its end.
            return await asyncio.wait_for(call, self.timeout_s)
        except TimeoutError:
            raise ToolTimeoutError(
                f"tool {self.name!r} timed out after {self.timeout_s:g}s", completion
            ) from None

    def with_options(self, **changes: Any) -> Tool:
        """A copy of this tool with some fields changed."""
        return dataclasses.replace(self, **changes)


def _start_thread(fn: Callable[[], Any], name: str) -> concurrent.futures.Future[Any]:
    """Run fn in a daemon thread of its own and return a future of its outcome.

    Not asyncio.to_thread: the default executor's threads are joined at interpreter exit, so one
    stuck tool (e.g. after a timeout) would keep the process alive until it returned.
    """
    future: concurrent.futures.Future[Any] = concurrent.futures.Future()
    future.set_running_or_notify_cancel()
    context = contextvars.copy_context()

    def body() -> None:
        try:
            value = context.run(fn)
        except BaseException as exc:  # handed to the awaiting call, whatever it is
            future.set_exception(exc)
        else:
            future.set_result(value)

    threading.Thread(target=body, name=f"rein-tool-{name}", daemon=True).start()
    return future


def _describe_validation(name: str, exc: ValidationError) -> str:
    problems = []
    for err in exc.errors(include_url=False):
        loc = ".".join(str(part) for part in err["loc"]) or "(arguments)"
        problems.append(f"{loc}: {err['msg']}")
    return f"invalid arguments for {name!r}: " + "; ".join(problems)


def format_result(value: Any) -> str:
    """Turn a tool's return value into the text of its tool message."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, BaseModel):
        return value.model_dump_json()
    try:
        return json.dumps(value, ensure_ascii=False, default=_default)
    except (TypeError, ValueError):
        return str(value)


def _default(obj: Any) -> Any:
    if isinstance(obj, BaseModel):
        return obj.model_dump(mode="json")
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.asdict(obj)
    return str(obj)


@overload
def tool(fn: Callable[..., Any], /) -> Tool: ...
@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    kind: ToolKind | str = ToolKind.GENERIC,
    needs_approval: bool = False,
    idempotent: bool = False,
    timeout_s: float | None = 30.0,
    max_argument_retries: int = 3,
    on_error: Literal["return", "raise"] = "return",
    cost: float = 0.0,
    parameters: dict[str, Any] | None = None,
) -> Callable[[Callable[..., Any]], Tool]: ...


def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    kind: ToolKind | str = ToolKind.GENERIC,
    needs_approval: bool = False,
    idempotent: bool = False,
    timeout_s: float | None = 30.0,
    max_argument_retries: int = 3,
    on_error: Literal["return", "raise"] = "return",
    cost: float = 0.0,
    parameters: dict[str, Any] | None = None,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Turn a typed function into a Tool; the schema comes from its signature and docstring.

    `parameters` replaces the generated schema (e.g. to match an external tool spec exactly);
    arguments are still validated against the signature.
    """

    def build(f: Callable[..., Any]) -> Tool:
        tool_name = name or f.__name__
        summary, arg_docs = parse_docstring(f.__doc__)
        args_model = model_from_signature(f, tool_name, arg_docs)
        return Tool(
            name=tool_name,
            description=description if description is not None else summary,
            parameters=parameters if parameters is not None else json_schema_for(args_model),
            fn=f,
            kind=ToolKind(kind),
            args_model=args_model,
            needs_approval=needs_approval,
            idempotent=idempotent,
            timeout_s=timeout_s,
            max_argument_retries=max_argument_retries,
            on_error=on_error,
            cost=cost,
        )

    return build(fn) if fn is not None else build

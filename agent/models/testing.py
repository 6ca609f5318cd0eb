"""Deterministic models shipped for tests and demos: scripted playback and user functions."""

from __future__ import annotations

import inspect
import json
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from agent.messages import Message, ModelRequest, ModelResponse, ToolCall, Usage
from agent.models.base import Model, ModelError


def reply(text: str, reasoning: str | None = None) -> ModelResponse:
    """A scripted step that answers with text."""
    return ModelResponse(text=text, reasoning=reasoning, finish_reason="stop")


def call(name: str, arguments: dict[str, Any] | str | None = None, /, *, id: str | None = None, text: str = "", reasoning: str | None = None, **kwargs: Any) -> ModelResponse:
    """A scripted step that calls one tool; arguments may be a dict, raw (even invalid) JSON, or kwargs."""
    args = arguments if arguments is not None else kwargs
    raw = args if isinstance(args, str) else json.dumps(args)
    tc = ToolCall(name=name, arguments=raw) if id is None else ToolCall(id=id, name=name, arguments=raw)
    return ModelResponse(text=text, reasoning=reasoning, tool_calls=[tc], finish_reason="tool_calls")


def calls(*steps: ModelResponse) -> ModelResponse:
    """A scripted step with several parallel tool calls, merged from call() steps."""
    merged = [tc for s in steps for tc in s.tool_calls]
    return ModelResponse(tool_calls=merged, finish_reason="tool_calls")


def estimate_tokens(text: str) -> int:
    """A rough, deterministic token count (about four characters a token) for test usage."""
    return max(1, (len(text) + 3) // 4) if text else 0


def _usage_for(request: ModelRequest, response: ModelResponse) -> Usage:
    prompt = sum(estimate_tokens(m.text) for m in request.messages)
    out = estimate_tokens(response.text) + estimate_tokens(response.reasoning or "")
    out += sum(estimate_tokens(tc.arguments) + 1 for tc in response.tool_calls)
    return Usage(input_tokens=prompt, output_tokens=out, requests=1)


Step = ModelResponse | str | Callable[[ModelRequest], ModelResponse | str]


class ScriptedModel(Model):
    """Plays back steps in order and records every request.

    A step is a ModelResponse, a plain string (a text reply), or a function of the request.
    Running out of steps raises ModelError; `assert_done()` fails if steps were left unused.
    """

    def __init__(self, steps: Sequence[Step] = (), name: str = "scripted") -> None:
        self.steps: list[Step] = list(steps)
        self.name = name
        self.requests: list[ModelRequest] = []
        self._next = 0

    def add(self, *steps: Step) -> ScriptedModel:
        """Append steps; returns self."""
        self.steps.extend(steps)
        return self

    @property
    def remaining(self) -> int:
        """Steps not played yet."""
        return len(self.steps) - self._next

    async def complete(self, request: ModelRequest) -> ModelResponse:
        self.requests.append(request)
        if self._next >= len(self.steps):
            raise ModelError(
                f"scripted model {self.name!r} has no step left for request #{len(self.requests)} "
                f"(it had {len(self.steps)} steps); last message: {_last_text(request.messages)!r}"
            )
        step = self.steps[self._next]
        self._next += 1
        if callable(step) and not isinstance(step, ModelResponse):
            step = step(request)
        response = reply(step) if isinstance(step, str) else step.model_copy(deep=True)
        # Fresh ids per playback keep replays of the same script from colliding in one thread.
        for i, tc in enumerate(response.tool_calls):
            if tc.id.startswith("call_") and len(tc.id) == 21:
                response.tool_calls[i] = tc.model_copy(update={"id": f"call_{len(self.requests)}_{i}"})
        if response.usage.requests == 0:
            response.usage = _usage_for(request, response)
        response.model = response.model or self.name
        return response

    def assert_done(self) -> None:
        """Fail if any scripted step was not used."""
        if self.remaining:
            raise AssertionError(f"scripted model {self.name!r} has {self.remaining} unused step(s)")


def _last_text(messages: list[Message]) -> str:
    return messages[-1].text[:80] if messages else ""


ModelFunction = Callable[[ModelRequest], ModelResponse | str | Awaitable[ModelResponse | str]]


class FunctionModel(Model):
    """A model whose answers come from user code: fn(request) -> ModelResponse | str (sync or async)."""

    def __init__(self, fn: ModelFunction, name: str = "function") -> None:
        self.fn = fn
        self.name = name
        self.requests: list[ModelRequest] = []

    async def complete(self, request: ModelRequest) -> ModelResponse:
        self.requests.append(request)
        out = self.fn(request)
        if inspect.isawaitable(out):
            out = await out
        response = reply(out) if isinstance(out, str) else out
        if response.usage.requests == 0:
            response = response.model_copy(update={"usage": _usage_for(request, response)})
        return response.model_copy(update={"model": response.model or self.name})


class EchoModel(Model):
    """Answers every request with the last user message, prefixed; a zero-setup model for demos."""

    name = "echo"

    async def complete(self, request: ModelRequest) -> ModelResponse:
        last = next((m.text for m in reversed(request.messages) if m.role == "user"), "")
        response = reply(f"You said: {last}")
        response.usage = _usage_for(request, response)
        response.model = self.name
        return response

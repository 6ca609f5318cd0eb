"""OpenTelemetry traces of agent runs, in the GenAI semantic conventions.

One user turn is an `invoke_agent {agent}` span. Under it, each model call is `chat {model}` (model
name, token usage, finish reason), each tool call that runs is `execute_tool {tool}`, and rein's own
steps are `rein.intervention {name}` (activation, diagnosis, planted text length), `rein.guardrail
{name}` (a guardrail's check: kind, action, reason), `rein.mode`
(the mode decision) and `retrieval {source}`. A scenario run is an `invoke_workflow {scenario}`
span over its turns. The thread id is `gen_ai.conversation.id` (and `session.id`; a server names it as
its client does, `conversation`), the scenario id `rein.scenario.id`; a turn's span carries its total usage.

Off by default: REIN_OTEL=console|otlp (read when this module is imported) or `enable(...)` turns
it on. While off, each hook is one global read and a shared empty context manager, and
OpenTelemetry is not even imported. Message contents (prompts, answers, tool arguments and results,
planted text, retrieval queries) are recorded only with `enable(capture_content=True)` or
OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true.

The core needs only opentelemetry-api; the SDK and the OTLP exporter that `enable("console")` and
`enable("otlp")` build come with the `otel` extra.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import os
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from agent.events import ApprovalRequested, FinalAnswer, ModeDecided
from tools.execute import CallHooks, CallRequest, ToolResult
from tools.tool import Tool

if TYPE_CHECKING:
    from opentelemetry.trace import Span, Tracer, TracerProvider

    from agent.messages import Message, ModelRequest, ModelResponse, Usage

CONTENT_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
"""The GenAI instrumentations' switch for recording message contents; rein honours it too."""

_tracer: Tracer | None = None
_content = False
_NOTHING = contextlib.nullcontext()
_scenario: contextvars.ContextVar[tuple[str, int] | None] = contextvars.ContextVar("rein_scenario", default=None)
_conversation: contextvars.ContextVar[str | None] = contextvars.ContextVar("rein_conversation", default=None)
# Turn terminations that mean the turn failed (max_steps and interrupted are limits, not faults).
_FAILED = ("model_error", "tool_error", "too_many_errors")


def enable(
    exporter: Any = None,
    *,
    provider: TracerProvider | None = None,
    capture_content: bool | None = None,
) -> TracerProvider:
    """Start tracing; returns the tracer provider in use (flush or shut it down when done).

    exporter: "console" or "otlp" (OTLP over HTTP; the OTEL_EXPORTER_OTLP_* variables configure
    it), or an SDK SpanExporter. rein then builds an SDK provider for it and makes it the global
    one unless one is set already. provider: trace into this provider instead. Neither: the global
    provider, as the application configured it. capture_content: record message contents
    (default: the OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT variable)."""
    global _tracer, _content
    from opentelemetry import trace

    if provider is None and exporter is not None:
        provider = _sdk_provider(exporter)
        current = trace.get_tracer_provider()
        if isinstance(current, trace.ProxyTracerProvider):
            trace.set_tracer_provider(provider)
    if provider is None:
        provider = trace.get_tracer_provider()
    if capture_content is None:
        capture_content = os.environ.get(CONTENT_ENV, "").lower() in ("1", "true", "yes")
    _tracer = provider.get_tracer("rein")
    _content = capture_content
    return provider


def disable() -> None:
    """Stop tracing; hooks go back to doing nothing."""
    global _tracer
    _tracer = None


def enabled() -> bool:
    """Whether spans are being recorded."""
    return _tracer is not None


def _sdk_provider(exporter: Any) -> TracerProvider:
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import (
            BatchSpanProcessor,
            ConsoleSpanExporter,
            SimpleSpanProcessor,
        )
    except ImportError as exc:  # only the API is a core dependency
        raise ImportError("tracing to an exporter needs the OpenTelemetry SDK: pip install 'rein-runtime[otel]'") from exc
    provider = TracerProvider(resource=Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME", "rein")}))
    if exporter == "console":
        # One span per line as it ends, so a console trace reads in order.
        provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter(formatter=lambda s: s.to_json(indent=None) + "\n")))
    elif exporter == "otlp":
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        except ImportError as exc:
            raise ImportError("REIN_OTEL=otlp needs the OTLP exporter: pip install 'rein-runtime[otel]'") from exc
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    elif isinstance(exporter, str):
        raise ValueError(f"unknown trace exporter {exporter!r}; use console or otlp")
    else:
        provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider


def setup_from_env() -> None:
    """Turn tracing on when REIN_OTEL names an exporter (console or otlp)."""
    value = os.environ.get("REIN_OTEL", "").strip().lower()
    if value and value not in ("0", "off", "none", "false"):
        enable(value)


# --- spans ---------------------------------------------------------------------------------


def _span(
    operation: str, target: str | None, attributes: Mapping[str, Any], kind: str = "INTERNAL", *, make_current: bool = True
) -> Any:
    """The span of one GenAI operation: named `{operation} {target}` (`operation` alone without a
    target), carrying `gen_ai.operation.name`; made current on entry unless `make_current` is False."""
    from opentelemetry.trace import SpanKind

    assert _tracer is not None
    name = operation if target is None else f"{operation} {target}"
    options: dict[str, Any] = {"kind": getattr(SpanKind, kind), "attributes": {"gen_ai.operation.name": operation, **attributes}}
    return _tracer.start_as_current_span(name, **options) if make_current else _tracer.start_span(name, **options)


def _scenario_attributes() -> dict[str, Any]:
    """The scenario run the current turn belongs to, as span attributes (none outside one)."""
    found = _scenario.get()
    return {} if found is None else {"rein.scenario.id": found[0], "rein.scenario.trial": found[1]}


def _fail(span: Span, error_type: str, description: str | None = None) -> None:
    from opentelemetry.trace import Status, StatusCode

    span.set_attribute("error.type", error_type)
    span.set_status(Status(StatusCode.ERROR, description))


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


@contextlib.contextmanager
def scenario(scenario_id: str, trial: int = 0) -> Iterator[None]:
    """Mark the turns run inside as one scenario run: each turn carries its id and trial, and,
    while tracing, an `invoke_workflow {scenario}` span holds them all."""
    token = _scenario.set((scenario_id, trial))
    try:
        if _tracer is None:
            yield
        else:
            with _span("invoke_workflow", scenario_id, _scenario_attributes()):
                yield
    finally:
        _scenario.reset(token)


@contextlib.contextmanager
def conversation(thread_id: str) -> Iterator[None]:
    """Record the turns started inside under this conversation id instead of the checkpointer's.

    `rein serve` stores a client's thread `T` as `@TENANT/AGENT/T`, and a tenant that is one key
    carries that key's hash: traces name the thread as the client knows it.
    """
    token = _conversation.set(thread_id)
    try:
        yield
    finally:
        _conversation.reset(token)


def _conversation_id(thread_id: str) -> str:
    return _conversation.get() or thread_id


def start_turn(agent: str, thread_id: str, model: str) -> Span | None:
    """Start the span of one agent turn (`invoke_agent`); None while tracing is off. It is not
    made current here: the runtime makes it current only while the graph runs (`current`), so it
    never leaks into the code that consumes the turn's events.

    The conversation id is also the span's `session.id` (OpenInference's name, which Phoenix
    groups a conversation's turns by)."""
    if _tracer is None:
        return None
    conv = _conversation_id(thread_id)
    attributes = {"gen_ai.agent.name": agent, "gen_ai.conversation.id": conv, "session.id": conv, "gen_ai.request.model": model}
    return _span("invoke_agent", agent, {**attributes, **_scenario_attributes()}, make_current=False)


def current(span: Span | None) -> Any:
    """A context in which `span` is the current span (nothing when it is None)."""
    if span is None:
        return _NOTHING
    from opentelemetry.trace import use_span

    return use_span(span, end_on_exit=False)


def turn_event(span: Span, event: Any) -> None:
    """Note what a turn event says about the turn (its mode, how it ended) on the turn's span."""
    if isinstance(event, ModeDecided):
        span.set_attribute("rein.mode", event.mode)
    elif isinstance(event, FinalAnswer):
        span.set_attribute("rein.termination", event.termination)
        if event.termination in _FAILED:
            _fail(span, event.termination)
    elif isinstance(event, ApprovalRequested):
        span.set_attribute("rein.termination", "interrupted")


def end_turn(span: Span | None, exc: BaseException | None = None, error: str | None = None, usage: Usage | None = None) -> None:
    """End a turn's span: failed by `exc` when the turn raised; `error` is the turn's error detail;
    `usage` the whole turn's tokens (every model call, interventions and routing included)."""
    if span is None:
        return
    if usage is not None:
        span.set_attribute("gen_ai.usage.input_tokens", usage.input_tokens)
        span.set_attribute("gen_ai.usage.output_tokens", usage.output_tokens)
    if exc is not None:
        failed(span, exc)
    elif error:
        span.set_attribute("rein.error", error)
    span.end()


def mode_decided(parent: Span | None, mode: str, reason: str) -> None:
    """A zero-length `rein.mode` span for a mode known before the graph runs (forced or fixed)."""
    if parent is None:
        return
    with current(parent), mode_span() as span:
        mode_chosen(span, mode, reason)


def mode_span() -> Any:
    """The span of the mode decision."""
    if _tracer is None:
        return _NOTHING
    return _span("rein.mode", None, {})


def mode_chosen(span: Span | None, mode: str, reason: str, scores: Mapping[str, float] | None = None) -> None:
    """Put the decision on its span."""
    if span is None:
        return
    span.set_attribute("rein.mode", mode)
    span.set_attribute("rein.mode.reason", reason)
    for name, score in (scores or {}).items():
        span.set_attribute(f"rein.mode.score.{name}", float(score))


def intervention(name: str, turn_index: int) -> Any:
    """The span of one intervention's before_turn."""
    if _tracer is None:
        return _NOTHING
    return _span("rein.intervention", name, {"rein.intervention.name": name, "rein.turn": turn_index})


_DIAGNOSIS = ("error_type", "category", "recovery_tool", "confidence", "detector")


def intervened(span: Span | None, text: str | None, via: str | None, record: Mapping[str, Any]) -> None:
    """Put what the intervention found and planted on its span (text is None: it stayed quiet)."""
    if span is None:
        return
    span.set_attribute("rein.intervention.activated", text is not None)
    for key in _DIAGNOSIS:
        value = record.get(key)
        if isinstance(value, str | int | float | bool):
            span.set_attribute(f"rein.diagnosis.{key}", value)
    if text is None:
        return
    span.set_attribute("rein.plant.via", via or "")
    span.set_attribute("rein.plant.length", len(text))
    if _content:
        span.set_attribute("rein.plant.text", text)
        if isinstance(record.get("rationale"), str):
            span.set_attribute("rein.diagnosis.rationale", record["rationale"])


def guardrail(name: str, kind: str) -> Any:
    """The span of one guardrail check (`rein.guardrail {name}`)."""
    if _tracer is None:
        return _NOTHING
    return _span("rein.guardrail", name, {"rein.guardrail.name": name, "rein.guardrail.kind": kind})


def guarded(span: Span | None, action: str, reason: str, planted: bool, tool: str | None) -> None:
    """Put a guardrail's verdict on its span."""
    if span is None:
        return
    span.set_attribute("rein.guardrail.action", action)
    span.set_attribute("rein.guardrail.fired", action != "allow" or planted)
    span.set_attribute("rein.guardrail.planted", planted)
    if tool:
        span.set_attribute("gen_ai.tool.name", tool)
    if reason:
        span.set_attribute("rein.guardrail.reason", reason)


def retrieval(source: str, retriever: str, k: int, query: str) -> Any:
    """The span of one retrieval (GenAI `retrieval` operation)."""
    if _tracer is None:
        return _NOTHING
    attributes: dict[str, Any] = {"gen_ai.data_source.id": source, "gen_ai.request.top_k": k, "rein.retrieval.retriever": retriever}
    if _content:
        attributes["gen_ai.retrieval.query.text"] = query
    return _span("retrieval", source, attributes, "CLIENT")


def retrieved(span: Span | None, titles: list[str]) -> None:
    """Put what a retrieval found on its span."""
    if span is None:
        return
    span.set_attribute("rein.retrieval.hits", len(titles))
    span.set_attribute("rein.retrieval.titles", [str(t) for t in titles])


def chat(model: str, request: ModelRequest, thread_id: str | None, step: str) -> Any:
    """The span of one model call (`chat`)."""
    if _tracer is None:
        return _NOTHING
    provider = model.partition(":")[0] if ":" in model else "rein"
    attributes: dict[str, Any] = {"gen_ai.provider.name": provider, "gen_ai.request.model": model, "rein.step.kind": step}
    if thread_id:
        attributes["gen_ai.conversation.id"] = _conversation_id(thread_id)
    s = request.settings
    for key, value in (("temperature", s.temperature), ("max_tokens", s.max_tokens), ("seed", s.seed)):
        if value is not None:
            attributes[f"gen_ai.request.{key}"] = value
    if _content:
        system = [m for m in request.messages if m.role == "system"]
        if system:
            attributes["gen_ai.system_instructions"] = _json([{"type": "text", "content": m.text} for m in system])
        attributes["gen_ai.input.messages"] = _json([_message(m) for m in request.messages if m.role != "system"])
    return _span("chat", model, attributes, "CLIENT")


def answered(span: Span | None, response: ModelResponse) -> None:
    """Put the model's answer (model, usage, finish reason) on its chat span."""
    if span is None:
        return
    if response.model:
        span.set_attribute("gen_ai.response.model", response.model)
    span.set_attribute("gen_ai.usage.input_tokens", response.usage.input_tokens)
    span.set_attribute("gen_ai.usage.output_tokens", response.usage.output_tokens)
    span.set_attribute("gen_ai.response.finish_reasons", [response.finish_reason])
    if _content:
        out = _message(response.to_message())
        out["finish_reason"] = response.finish_reason
        span.set_attribute("gen_ai.output.messages", _json([out]))


def failed(span: Span | None, exc: BaseException) -> None:
    """Mark a span failed by an exception that the code handles (and so never reaches the span)."""
    if span is None:
        return
    span.record_exception(exc)
    _fail(span, type(exc).__name__, str(exc))


def _message(m: Message) -> dict[str, Any]:
    """A message in the GenAI conventions' shape: a role and typed parts."""
    parts: list[dict[str, Any]] = []
    if m.reasoning:
        parts.append({"type": "reasoning", "content": m.reasoning})
    if m.role == "tool":
        parts.append({"type": "tool_call_response", "id": m.tool_call_id, "response": m.text})
    elif m.text:
        parts.append({"type": "text", "content": m.text})
    for tc in m.tool_calls:
        parts.append({"type": "tool_call", "id": tc.id, "name": tc.name, "arguments": tc.arguments})
    return {"role": m.role, "parts": parts}


# --- tools ---------------------------------------------------------------------------------


def tool_hooks(inner: CallHooks) -> CallHooks:
    """Hooks for execute_calls that trace each call around `inner`'s; `inner` itself while off."""
    return inner if _tracer is None else _TracedCalls(inner)


class _TracedCalls(CallHooks):
    """An `execute_tool` span around each call that runs; everything else goes to the inner hooks."""

    def __init__(self, inner: CallHooks) -> None:
        self.inner = inner

    def running(self, call: CallRequest, tool: Tool) -> Any:
        attributes: dict[str, Any] = {
            "gen_ai.tool.name": call.name,
            "gen_ai.tool.call.id": call.id,
            "gen_ai.tool.type": "function",
            "gen_ai.tool.description": tool.description,
            "rein.tool.kind": str(tool.kind.value),
        }
        if _content:
            attributes["gen_ai.tool.call.arguments"] = call.arguments if isinstance(call.arguments, str) else _json(call.arguments)
        return _span("execute_tool", call.name, attributes)

    async def started(self, call: CallRequest, tool: Tool) -> None:
        await self.inner.started(call, tool)

    async def finished(self, call: CallRequest, result: ToolResult) -> None:
        from opentelemetry import trace

        # Called inside running()'s span, so the current span is this call's.
        span = trace.get_current_span()
        span.set_attribute("rein.tool.is_error", result.is_error)
        if result.is_error:
            _fail(span, result.error_kind or "error", result.content[:200])
        if _content:
            span.set_attribute("gen_ai.tool.call.result", result.content)
        await self.inner.finished(call, result)

    async def late(self, call: CallRequest, result: ToolResult) -> None:
        await self.inner.late(call, result)


setup_from_env()

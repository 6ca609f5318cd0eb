"""OpenTelemetry traces: the span tree and GenAI attributes of scripted runs, recorded by the SDK's
in-memory exporter; contents only on opt-in; nothing at all while tracing is off."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from agent import Agent, FunctionModel, ScriptedModel, tracing
from agent.models import call, calls, reply
from interventions import ReInIntervention, with_recovery_tools
from tools import ToolKind, tool
from tools.execute import CallHooks

REPO = Path(__file__).resolve().parents[2]


@tool(kind=ToolKind.READ)
def lookup(key: str) -> str:
    """Look a key up.

    Args:
        key: The key.
    """
    return f"value-of-{key}"


@tool
def broken(x: int) -> str:
    """A tool whose backend is down.

    Args:
        x: Anything.
    """
    raise RuntimeError("backend unavailable")


def tree(exporter: InMemorySpanExporter) -> tuple[ReadableSpan, dict[str, list[ReadableSpan]]]:
    """The one root span and every span's children by the parent's name."""
    finished = exporter.get_finished_spans()
    by_id = {s.context.span_id: s for s in finished}
    roots = [s for s in finished if s.parent is None]
    assert len(roots) == 1, [s.name for s in roots]
    children: dict[str, list[ReadableSpan]] = {}
    for s in finished:
        if s.parent is not None:
            assert s.parent.span_id in by_id, f"{s.name} has a parent outside the trace"
            assert s.context.trace_id == roots[0].context.trace_id
            children.setdefault(by_id[s.parent.span_id].name, []).append(s)
    return roots[0], children


def rein_agent(model: ScriptedModel) -> Agent:
    # The inception module is a scripted model too: it diagnoses a vague reference.
    inception = ScriptedModel([json.dumps({"error_type": "vague_reference", "rationale": "two orders fit"})])
    rein = ReInIntervention(detector="llm", model=inception)
    return Agent(model, with_recovery_tools([lookup, broken]), "You are a shop assistant.", interventions=[rein], checkpointer="memory")


def scripted() -> ScriptedModel:
    return ScriptedModel([calls(call("lookup", key="a"), call("broken", x=1)), reply("Which order do you mean?")])


async def test_a_turn_with_a_plant_a_tool_call_and_a_failing_tool(spans: InMemorySpanExporter) -> None:
    result = await rein_agent(scripted()).ainvoke("Cancel my order, the one from before.", "thread-7")
    assert result.termination == "agent_stop"

    root, children = tree(spans)
    assert root.name == "invoke_agent agent" and root.kind is SpanKind.INTERNAL
    assert dict(root.attributes or {}) == {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": "agent",
        "gen_ai.conversation.id": "thread-7",
        "session.id": "thread-7",  # what Phoenix groups a conversation's turns by
        "gen_ai.request.model": "scripted",
        "rein.mode": "agentic",
        "rein.termination": "agent_stop",
        # The whole turn's tokens: both model calls and the intervention's.
        "gen_ai.usage.input_tokens": result.ledger.usage.input_tokens,
        "gen_ai.usage.output_tokens": result.ledger.usage.output_tokens,
    }
    assert root.status.status_code is StatusCode.UNSET
    # Every step is a direct child of the turn, in the order it ran.
    under = sorted(children[root.name], key=lambda s: s.start_time or 0)
    assert [s.name for s in under] == [
        "rein.mode", "rein.intervention rein", "chat scripted", "execute_tool lookup", "execute_tool broken", "chat scripted",
    ]
    assert set(children) == {root.name}
    mode, plant, chat1, ok, failing, chat2 = under

    assert mode.attributes["rein.mode"] == "agentic" and mode.attributes["rein.mode.reason"] == "fixed"
    planted = result.interventions[0]
    assert plant.attributes["rein.intervention.activated"] is True
    assert plant.attributes["rein.diagnosis.error_type"] == "vague_reference"
    assert plant.attributes["rein.diagnosis.recovery_tool"] == planted["recovery_tool"]
    assert plant.attributes["rein.plant.via"] == "think_tool"
    assert plant.attributes["rein.plant.length"] == len(planted["text"]) > 0

    assert chat1.kind is SpanKind.CLIENT
    assert chat1.attributes["gen_ai.operation.name"] == "chat"
    assert chat1.attributes["gen_ai.request.model"] == chat1.attributes["gen_ai.response.model"] == "scripted"
    assert chat1.attributes["gen_ai.response.finish_reasons"] == ("tool_calls",)
    assert chat2.attributes["gen_ai.response.finish_reasons"] == ("stop",)
    booked = [e for e in result.ledger.entries if e.kind == "model" and e.label == "agent"]
    assert [c.attributes["gen_ai.usage.input_tokens"] for c in (chat1, chat2)] == [e.usage.input_tokens for e in booked]
    assert [c.attributes["gen_ai.usage.output_tokens"] for c in (chat1, chat2)] == [e.usage.output_tokens for e in booked]

    ids = [m.tool_call_id for m in result.messages if m.role == "tool" and m.name in ("lookup", "broken")]
    assert ok.attributes["gen_ai.tool.name"] == "lookup" and ok.attributes["gen_ai.tool.call.id"] == ids[0]
    assert ok.attributes["rein.tool.kind"] == "READ" and ok.attributes["rein.tool.is_error"] is False
    assert ok.status.status_code is StatusCode.UNSET
    assert failing.attributes["gen_ai.tool.call.id"] == ids[1]
    assert failing.attributes["rein.tool.is_error"] is True and failing.attributes["error.type"] == "execution"
    assert failing.status.status_code is StatusCode.ERROR

    # Contents are off by default: no prompt, answer, argument, result or planted text anywhere.
    content_keys = {"gen_ai.input.messages", "gen_ai.output.messages", "gen_ai.system_instructions",
                    "gen_ai.tool.call.arguments", "gen_ai.tool.call.result", "rein.plant.text", "rein.diagnosis.rationale"}
    for s in spans.get_finished_spans():
        assert not content_keys & set(s.attributes or {}), s.name
        assert "Cancel my order" not in json.dumps(dict(s.attributes or {}))


async def test_contents_are_recorded_when_opted_in(spans: InMemorySpanExporter) -> None:
    # Re-enabled into a provider of its own, with contents on.
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.enable(provider=provider, capture_content=True)
    await rein_agent(scripted()).ainvoke("Cancel my order, the one from before.", "t")
    _, children = tree(exporter)
    by_name = {s.name: s for s in children["invoke_agent agent"]}
    chat = next(s for s in children["invoke_agent agent"] if s.name == "chat scripted")
    sent = json.loads(chat.attributes["gen_ai.input.messages"])
    assert sent[0] == {"role": "user", "parts": [{"type": "text", "content": "Cancel my order, the one from before."}]}
    assert json.loads(chat.attributes["gen_ai.system_instructions"])[0]["content"] == "You are a shop assistant."
    out = json.loads(chat.attributes["gen_ai.output.messages"])[0]
    assert out["finish_reason"] == "tool_calls" and [p["name"] for p in out["parts"] if p["type"] == "tool_call"] == ["lookup", "broken"]
    assert json.loads(by_name["execute_tool lookup"].attributes["gen_ai.tool.call.arguments"]) == {"key": "a"}
    assert by_name["execute_tool lookup"].attributes["gen_ai.tool.call.result"] == "value-of-a"
    assert "backend unavailable" in by_name["execute_tool broken"].attributes["gen_ai.tool.call.result"]
    plant = by_name["rein.intervention rein"]
    assert len(plant.attributes["rein.plant.text"]) == plant.attributes["rein.plant.length"]
    assert plant.attributes["rein.diagnosis.rationale"] == "two orders fit"


async def test_a_model_error_fails_the_chat_span_and_the_turn(spans: InMemorySpanExporter) -> None:
    def down(request):  # noqa: ANN001
        raise ConnectionError("endpoint refused")

    result = await Agent(FunctionModel(down), [lookup], checkpointer="memory", name="helper").ainvoke("hi", "t")
    assert result.termination == "model_error"
    root, children = tree(spans)
    assert root.name == "invoke_agent helper"
    assert root.status.status_code is StatusCode.ERROR and root.attributes["error.type"] == "model_error"
    assert "endpoint refused" in root.attributes["rein.error"]
    chat = next(s for s in children[root.name] if s.name.startswith("chat "))
    assert chat.status.status_code is StatusCode.ERROR and chat.attributes["error.type"] == "ConnectionError"
    assert [e.name for e in chat.events] == ["exception"]


async def test_a_scenario_run_is_one_trace_with_the_scenario_id_on_each_turn(spans: InMemorySpanExporter) -> None:
    from scenarios.loading import load_scenarios
    from scenarios.orchestrator import RunOptions, run_scenario, script_model

    scenario = next(s for s in load_scenarios(REPO / "scenarios" / "examples" / "mock_create_task.yaml"))
    episode = await run_scenario(scenario, RunOptions(model=script_model))
    assert episode.trajectory.termination not in ("setup_error", "model_error")
    root, children = tree(spans)
    assert root.name == f"invoke_workflow {scenario.id}" and root.attributes["rein.scenario.id"] == scenario.id
    turns = children[root.name]
    assert turns and all(t.name == f"invoke_agent agent:{scenario.id}" for t in turns)
    assert len(turns) == sum(1 for m in episode.trajectory.messages if m.source == "user") - (episode.trajectory.termination == "user_stop")
    assert {t.attributes["rein.scenario.id"] for t in turns} == {scenario.id}
    assert len({t.attributes["gen_ai.conversation.id"] for t in turns}) == 1


async def test_nothing_is_recorded_while_tracing_is_off() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.enable(provider=provider)
    tracing.disable()
    assert not tracing.enabled()
    hooks = CallHooks()
    assert tracing.tool_hooks(hooks) is hooks  # the tools step runs with its own hooks, untouched
    assert tracing.start_turn("a", "t", "m") is None
    result = await rein_agent(scripted()).ainvoke("Cancel my order, the one from before.", "t")
    assert result.termination == "agent_stop"
    assert exporter.get_finished_spans() == ()


def test_rein_otel_console_prints_spans() -> None:
    code = (
        "from agent import Agent\nfrom agent.models import ScriptedModel, reply\n"
        "Agent(ScriptedModel([reply('hello')]), checkpointer='memory').invoke('hi', 'th')\n"
    )
    env = {**os.environ, "REIN_OTEL": "console", "PYTHONPATH": str(REPO)}
    env.pop(tracing.CONTENT_ENV, None)
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    printed = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert [s["name"] for s in printed] == ["rein.mode", "chat scripted", "invoke_agent agent"]
    assert printed[-1]["attributes"]["gen_ai.conversation.id"] == "th"
    assert printed[-1]["resource"]["attributes"]["service.name"] == "rein"


def test_an_unknown_exporter_is_named() -> None:
    with pytest.raises(ValueError, match="unknown trace exporter 'zipkin'; use console or otlp"):
        tracing.enable("zipkin")
    assert not tracing.enabled()

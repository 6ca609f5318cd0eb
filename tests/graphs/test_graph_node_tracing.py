"""The retrieval node traces each retrieval as a GenAI `retrieval` span inside its intervention span."""

from __future__ import annotations

from pathlib import Path

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agent import Agent, ScriptedModel, tracing
from agent.models import reply
from agent.plugins import load_intervention
from graphs.tool import retrieval_toolkit


async def test_retrieval_span_names_source_and_hits(saved_graph: Path) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.enable(provider=provider, capture_content=False)
    try:
        node = load_intervention("retrieve", graph_dir=str(saved_graph), retriever="bm25", k=2)
        agent = Agent(ScriptedModel([reply("ok")]), retrieval_toolkit(saved_graph, retriever="bm25"), interventions=[node], checkpointer="memory")
        result = await agent.ainvoke("Who founded the company?", "t")
    finally:
        tracing.disable()
    spans = {s.name: s for s in exporter.get_finished_spans()}
    found = spans[f"retrieval {saved_graph.name}"]
    assert spans["rein.intervention retrieve"].context.span_id == found.parent.span_id
    assert found.attributes["gen_ai.operation.name"] == "retrieval"
    assert found.attributes["gen_ai.request.top_k"] == 2 and found.attributes["rein.retrieval.retriever"] == "bm25"
    assert list(found.attributes["rein.retrieval.titles"]) == result.interventions[0]["passages"]
    assert found.attributes["rein.retrieval.hits"] == 2
    assert "gen_ai.retrieval.query.text" not in found.attributes  # a content: opt-in only
    planted = spans["rein.intervention retrieve"].attributes
    assert planted["rein.intervention.activated"] is True and planted["rein.plant.via"] == "tool_call"

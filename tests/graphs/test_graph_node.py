"""Retrieval as an agent graph node: passages planted as the agent's own retrieve call."""

from __future__ import annotations

import json
from pathlib import Path

from agent import Agent, ScriptedModel
from agent.models import reply
from agent.plugins import load_intervention
from graphs.tool import retrieval_toolkit


async def test_retrieval_node_plants_passages_with_provenance(saved_graph: Path) -> None:
    node = load_intervention("retrieve", graph_dir=str(saved_graph), retriever="bm25", k=2)
    model = ScriptedModel([reply("answered from the passages")])
    tools = retrieval_toolkit(saved_graph, retriever="bm25")
    agent = Agent(model, tools, "Answer from the knowledge base.", interventions=[node], checkpointer="memory")
    question = "Who founded the company?"
    result = await agent.ainvoke(question, "t")
    assert result.output == "answered from the passages"
    sent = model.requests[0].messages
    # system prompt untouched; then the user turn, then the planted call and its result
    assert sent[0].role == "system" and sent[0].text == "Answer from the knowledge base."
    assert [m.role for m in sent[1:]] == ["user", "assistant", "tool"]
    call = sent[2].tool_calls[0]
    assert call.name == "retrieve" and json.loads(call.arguments) == {"query": question, "k": 2}
    hits = json.loads(sent[3].text)
    assert len(hits) == 2 and {"title", "text", "score", "provenance"} <= set(hits[0])
    record = result.interventions[0]
    assert record["name"] == "retrieve" and record["activated"] and record["passages"] == [h["title"] for h in hits]

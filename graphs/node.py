"""Retrieval as a graph node of the agent: before each user turn, fetch passages for the user's
message and put them in the agent's context as a retrieve call it made, with provenance.

It plugs into the runtime's intervention slot (registered as the "retrieve" intervention), so an
agent spec can say `interventions: [{name: retrieve, options: {graph_dir: runs/mq}}]`. Give the
agent the `retrieval` toolkit too, so that the planted call names a tool it has and it can search
again with its own queries.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agent import tracing
from agent.plugin_api import InterventionContext, Plant
from graphs.tool import retrieval_toolkit


class RetrievalNode:
    """Retrieves for each user turn and plants the result as the agent's own retrieve call."""

    name = "retrieve"

    def __init__(
        self,
        graph_dir: str | Path | None = None,
        retriever: str = "gfm",
        k: int = 5,
        model: str | Path | None = None,
        max_chars: int = 1200,
        store: str | None = None,
    ) -> None:
        self.k = k
        self.retriever = retriever
        # Traces name the data source by the graph folder.
        self.source = Path(graph_dir).name if graph_dir else retriever
        self.tool = retrieval_toolkit(
            graph_dir, retriever=retriever, model=model, max_chars=max_chars, store=store
        )["retrieve"]

    async def before_turn(self, ctx: InterventionContext) -> Plant | None:
        """Retrieve for the latest user message; nothing when there is none."""
        query = next((m.text for m in reversed(ctx.dialogue) if m.role == "user"), "").strip()
        if not query:
            return None
        arguments: dict[str, Any] = {"query": query, "k": self.k}
        with tracing.retrieval(self.source, self.retriever, self.k, query) as span:
            hits = await self.tool.run(arguments)
            tracing.retrieved(span, [h["title"] for h in hits])
        return Plant(
            text=json.dumps(hits, ensure_ascii=False),
            via="tool_call",
            tool=self.tool.name,
            arguments=arguments,
            record={"retriever": self.retriever, "passages": [h["title"] for h in hits]},
        )

"""The GFM as a Retriever: passages ranked by the model, with the path that led to each."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from graphs.embedding import Embedder
from graphs.gfm.checkpoint import load_checkpoint
from graphs.gfm.model import GFM
from graphs.gfm.scorer import GFMScorer, ScoredQuery
from graphs.gfm.subgraph import SubgraphOptions
from graphs.provenance import trace_path
from graphs.quadgraph import Layer, QuadGraph
from graphs.retrieval import Provenance, Retriever

if TYPE_CHECKING:
    import numpy as np


def subgraph_options(model: GFM) -> SubgraphOptions:
    """The query-graph construction the model was trained with (defaults if unrecorded)."""
    recorded = model.config.training.get("subgraph") or {}
    known = set(SubgraphOptions.__dataclass_fields__)
    return SubgraphOptions(**{k: v for k, v in recorded.items() if k in known})


class GFMRetriever(Retriever):
    """Query-dependent GNN retrieval; the default checkpoint is the one shipped with rein."""

    name = "gfm"

    def __init__(
        self,
        qg: QuadGraph,
        embedder: Embedder,
        model: GFM | None = None,
        checkpoint: str | Path | None = None,
        full_graph: bool = False,
    ) -> None:
        self.qg = qg
        self.model = model if model is not None else load_checkpoint(checkpoint)
        options = subgraph_options(self.model)
        options.full_graph = full_graph or options.full_graph
        self.scorer = GFMScorer(qg, embedder, self.model, subgraph=options)
        self.passages = qg.passages()
        self.docs = qg.documents()

    def _score_with_context(self, query: str) -> tuple[np.ndarray, Any]:
        scored = self.scorer.score(self.scorer.prepare([query]))[0]
        return scored.doc_scores, scored

    def scores(self, query: str) -> np.ndarray:
        return self._score_with_context(query)[0]

    def top_nodes(self, query: str, k: int = 5, layer: Layer | str = Layer.ENTITY) -> list[tuple[str, str, float]]:
        """The k best-scored nodes of one layer in the query graph, as (node id, text, score)."""
        scored = self._score_with_context(query)[1]
        want = str(Layer(layer))
        ids = self.scorer.pg.node_ids
        nodes = [(ids[r], s) for r, s in scored.node_scores.items() if self.qg.g.nodes[ids[r]]["layer"] == want]
        nodes.sort(key=lambda t: (-t[1], t[0]))
        return [(n, self.qg.text(n), float(s)) for n, s in nodes[:k]]

    def explain(self, query: str, doc_index: int, context: Any) -> Provenance:
        scored: ScoredQuery = context
        row = self.scorer.row
        seeds = [s.node for s in scored.prepared.seeds]
        path = trace_path(
            self.qg, self.docs[doc_index], lambda n: scored.node_scores.get(row[n], float("-inf")), set(seeds)
        )
        inside = int(self.scorer.doc_rows[doc_index]) in scored.node_scores
        return Provenance(
            retriever=self.name,
            seeds=[self.qg.text(s) for s in seeds],
            path=path,
            evidence={"in_query_graph": inside, "query_graph_nodes": len(scored.prepared.graph.rows)},
        )

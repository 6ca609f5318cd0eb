"""Personalized PageRank from linked entities over the entity and document layers (HippoRAG style)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agent.extras import needs_extra

with needs_extra("graphs", "QuadGraph retrieval"):
    import networkx as nx

from graphs.embedding import Embedder
from graphs.linking import EntityLinker, LinkerOptions
from graphs.provenance import trace_path
from graphs.quadgraph import Layer, QuadGraph, RelationKind
from graphs.retrieval import Provenance, Retriever

if TYPE_CHECKING:
    import numpy as np


class PPRRetriever(Retriever):
    """Restart on the query's entities (weighted by link confidence / number of passages that
    mention them), walk facts, synonyms and mentions, rank passages by their PageRank mass."""

    name = "ppr"

    def __init__(
        self, qg: QuadGraph, embedder: Embedder, damping: float = 0.5, linker: LinkerOptions | None = None
    ) -> None:
        self.qg = qg
        self.embed = embedder
        self.damping = damping
        self.passages = qg.passages()
        self.linker = EntityLinker(qg, embedder, linker)
        self.docs = qg.documents()
        g = nx.Graph()
        g.add_nodes_from(n for n in qg.g.nodes if qg.layer(n) in (Layer.ENTITY, Layer.DOCUMENT))
        for u, v, d in qg.relations():
            if d["kind"] in (RelationKind.FACT, RelationKind.EQUIVALENT, RelationKind.MENTIONED_IN) and u != v:
                w = g[u][v]["weight"] + 1.0 if g.has_edge(u, v) else 1.0
                g.add_edge(u, v, weight=w)
        self.graph = g
        self.mentions = {
            e: max(1, sum(1 for n in qg.g.successors(e) if qg.layer(n) == Layer.DOCUMENT))
            for e in qg.nodes(Layer.ENTITY)
        }

    def _score_with_context(self, query: str) -> tuple[np.ndarray, Any]:
        import numpy as np

        qv = self.embed([query])[0]
        seeds = self.linker.link(query, qv)
        personalization = {s.node: s.weight / self.mentions.get(s.node, 1) for s in seeds}
        if not personalization:
            return np.zeros(len(self.docs), dtype=np.float32), ({}, [])
        pr = nx.pagerank(self.graph, alpha=self.damping, personalization=personalization, weight="weight", tol=1e-8)
        out = np.fromiter((pr.get(d, 0.0) for d in self.docs), dtype=np.float32, count=len(self.docs))
        return out, (pr, [s.node for s in seeds])

    def scores(self, query: str) -> np.ndarray:
        return self._score_with_context(query)[0]

    def explain(self, query: str, doc_index: int, context: Any) -> Provenance:
        pr, seeds = context
        path = trace_path(self.qg, self.docs[doc_index], lambda n: pr.get(n, 0.0), set(seeds))
        return Provenance(
            retriever=self.name,
            seeds=[self.qg.text(s) for s in seeds],
            path=path,
            evidence={"pagerank": float(pr.get(self.docs[doc_index], 0.0))},
        )

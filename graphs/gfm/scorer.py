"""Run a GFM over a QuadGraph: link the query, build its query graph, score, map back to passages."""

from __future__ import annotations

from dataclasses import dataclass

from agent.extras import needs_extra

with needs_extra("graphs", "QuadGraph retrieval"):
    import numpy as np
    import torch

from graphs.embedding import Embedder
from graphs.gfm.model import GFM
from graphs.gfm.subgraph import QueryGraph, QueryGraphSampler, SubgraphOptions
from graphs.linking import EntityLinker, LinkerOptions, Seed
from graphs.pyg import PygGraph, to_pyg
from graphs.quadgraph import LAYERS, Layer, QuadGraph

DOC_TYPE = LAYERS.index(Layer.DOCUMENT)
ENTITY_TYPE = LAYERS.index(Layer.ENTITY)


@dataclass
class PreparedQuery:
    """A query ready for the GFM."""

    text: str
    """The query."""
    vec: np.ndarray
    """Its text embedding."""
    seeds: list[Seed]
    """Linked start entities."""
    graph: QueryGraph
    """Its query graph."""


@dataclass
class ScoredQuery:
    """GFM output for one query."""

    doc_scores: np.ndarray
    """A score per passage, corpus order; passages outside the query graph rank below all inside."""
    node_scores: dict[int, float]
    """Score of every node in the query graph, by global row."""
    prepared: PreparedQuery
    """The input."""


class GFMScorer:
    """Everything needed to score queries on one graph with one model."""

    def __init__(
        self,
        qg: QuadGraph,
        embedder: Embedder,
        model: GFM | None = None,
        subgraph: SubgraphOptions | None = None,
        linker: LinkerOptions | None = None,
        pyg: PygGraph | None = None,
    ) -> None:
        self.qg = qg
        self.embed = embedder
        self.model = model
        self.pg = pyg or to_pyg(qg)
        self.sampler = QueryGraphSampler(self.pg, subgraph)
        self.linker = EntityLinker(qg, embedder, linker)
        self.row = {n: i for i, n in enumerate(self.pg.node_ids)}
        self.doc_rows = self.pg.doc_rows.numpy()
        self.doc_of_row = {int(r): i for i, r in enumerate(self.doc_rows)}

    def prepare(self, texts: list[str], vecs: np.ndarray | None = None) -> list[PreparedQuery]:
        """Embed (unless vecs are given), link and build query graphs."""
        if vecs is None:
            vecs = self.embed(texts)
        out = []
        for text, vec in zip(texts, vecs, strict=True):
            seeds = self.linker.link(text, vec)
            graph = self.sampler.query_graph(vec, {self.row[s.node]: s.weight for s in seeds})
            out.append(PreparedQuery(text, vec, seeds, graph))
        return out

    def score(self, prepared: list[PreparedQuery]) -> list[ScoredQuery]:
        """Run the model on prepared queries (in one batch)."""
        if self.model is None:
            raise ValueError("no GFM model loaded")
        batch = self.sampler.collate(np.stack([p.vec for p in prepared]), [p.graph for p in prepared])
        self.model.eval()
        with torch.no_grad():
            scores = self.model(batch).numpy()
        out = []
        offset = 0
        all_cos = self.pg.node_text.numpy()[self.doc_rows] @ np.stack([p.vec for p in prepared]).T
        for i, p in enumerate(prepared):
            n = len(p.graph.rows)
            s = scores[offset : offset + n]
            offset += n
            node_scores = dict(zip(p.graph.rows.tolist(), s.tolist(), strict=True))
            # Outside the query graph: below every inside passage, ordered by text similarity.
            floor = float(s.min()) - 10.0 if n else 0.0
            doc_scores = floor + all_cos[:, i].astype(np.float32)
            for j, r in enumerate(self.doc_rows):
                v = node_scores.get(int(r))
                if v is not None:
                    doc_scores[j] = v
            out.append(ScoredQuery(doc_scores, node_scores, p))
        return out

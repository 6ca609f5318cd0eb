"""Query graphs for the GFM: the whole graph, or a query-local subgraph around the start entities.

Message passing over the whole MuSiQue-100 graph (23k nodes, 146k directed edges) costs about a
second per query on a shared CPU, so by default each query gets the subgraph that its signal can
reach: a breadth-first expansion from the start entities over entity/document edges (hub
entities are not expanded), plus the passages nearest to the query by text similarity and their
neighbours, plus the attribute and community nodes attached to all of these. Training and
inference use the same construction; passages outside it rank below every passage inside it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from agent.extras import needs_extra

with needs_extra("graphs", "QuadGraph retrieval"):
    import numpy as np
    import torch
    from scipy.sparse import csr_matrix

from graphs.gfm.model import QueryBatch, relation_features
from graphs.pyg import PygGraph
from graphs.quadgraph import LAYERS, Layer

_ENTITY = LAYERS.index(Layer.ENTITY)
_DOCUMENT = LAYERS.index(Layer.DOCUMENT)


@dataclass
class SubgraphOptions:
    """How large a query's subgraph is."""

    full_graph: bool = False
    """Use the whole graph for every query (exact but slow)."""
    hops: int = 3
    """Breadth-first hops from the start entities over entity and document nodes."""
    max_expand_degree: int = 40
    """Nodes with more neighbours than this are included but not expanded (start nodes: 4x)."""
    dense_docs: int = 48
    """Passages nearest to the query by text similarity, always included with their neighbours."""
    max_nodes: int = 5000
    """Budget per query; beyond it, a hop keeps the nodes nearest to the query."""


@dataclass
class QueryGraph:
    """One query's graph: global rows and local edges."""

    rows: np.ndarray
    """Global node rows, sorted."""
    edge_index: np.ndarray
    """(2, e) local edge endpoints."""
    edge_type: np.ndarray
    """(e,) global relation ids."""
    seeds: np.ndarray
    """(len(rows),) start weights."""


class QueryGraphSampler:
    """Builds query graphs and stacks them into a QueryBatch."""

    def __init__(self, pg: PygGraph, options: SubgraphOptions | None = None) -> None:
        self.pg = pg
        self.options = options or SubgraphOptions()
        ei = pg.data.edge_index.numpy()
        self.src, self.dst = ei[0], ei[1]
        self.edge_type = pg.data.edge_type.numpy()
        n = pg.num_nodes
        self.node_type = pg.data.node_type.numpy()
        # Inverse edges are already in edge_index, so this adjacency is symmetric.
        self.adj = csr_matrix((np.ones(len(self.src), dtype=np.float32), (self.src, self.dst)), shape=(n, n))
        self.adj.sum_duplicates()
        self.degree = np.diff(self.adj.indptr)
        self.log_degree = torch.from_numpy(np.log1p(self.degree).astype(np.float32))
        self.walkable = np.isin(self.node_type, [_ENTITY, _DOCUMENT])
        self.doc_rows = pg.doc_rows.numpy()
        self.node_text = pg.node_text.numpy()
        self.relation_features = relation_features(pg.relation_text)

    def _neighbours(self, rows: np.ndarray) -> np.ndarray:
        if len(rows) == 0:
            return rows
        ptr, idx = self.adj.indptr, self.adj.indices
        return np.unique(np.concatenate([idx[ptr[r] : ptr[r + 1]] for r in rows]))

    def rows_for(self, query_vec: np.ndarray, seeds: dict[int, float]) -> np.ndarray:
        """Global rows of a query's subgraph."""
        opts = self.options
        n = self.pg.num_nodes
        if opts.full_graph:
            return np.arange(n)
        sim = None
        included = np.zeros(n, dtype=bool)
        seed_rows = np.fromiter(seeds, dtype=np.int64, count=len(seeds))
        included[seed_rows] = True
        frontier = seed_rows[self.degree[seed_rows] <= 4 * opts.max_expand_degree]
        for _ in range(opts.hops):
            nb = self._neighbours(frontier)
            nb = nb[self.walkable[nb] & ~included[nb]]
            room = opts.max_nodes - int(included.sum())
            if room <= 0:
                break
            if len(nb) > room:
                if sim is None:
                    sim = self.node_text @ query_vec
                nb = nb[np.argsort(-sim[nb])[:room]]
            included[nb] = True
            frontier = nb[self.degree[nb] <= opts.max_expand_degree]
        if opts.dense_docs:
            doc_sim = self.node_text[self.doc_rows] @ query_vec
            top = self.doc_rows[np.argsort(-doc_sim)[: opts.dense_docs]]
            included[top] = True
            nb = self._neighbours(top)
            included[nb[self.walkable[nb]]] = True
        # Attributes and communities of everything included (not expanded further).
        inside = np.flatnonzero(included)
        nb = self._neighbours(inside)
        included[nb[~self.walkable[nb]]] = True
        return np.flatnonzero(included)

    def query_graph(self, query_vec: np.ndarray, seeds: dict[int, float]) -> QueryGraph:
        """The query graph of one query; seeds maps global rows to start weights."""
        rows = self.rows_for(query_vec, seeds)
        local = np.full(self.pg.num_nodes, -1, dtype=np.int64)
        local[rows] = np.arange(len(rows))
        mask = (local[self.src] >= 0) & (local[self.dst] >= 0)
        seed_w = np.zeros(len(rows), dtype=np.float32)
        for r, w in seeds.items():
            if local[r] >= 0:
                seed_w[local[r]] = w
        return QueryGraph(
            rows=rows,
            edge_index=np.stack([local[self.src[mask]], local[self.dst[mask]]]),
            edge_type=self.edge_type[mask],
            seeds=seed_w,
        )

    def collate(self, queries: np.ndarray, graphs: Sequence[QueryGraph]) -> QueryBatch:
        """Stack query graphs into one batch."""
        offsets = np.cumsum([0] + [len(g.rows) for g in graphs])
        rows = np.concatenate([g.rows for g in graphs])
        return QueryBatch(
            query=torch.as_tensor(np.asarray(queries, dtype=np.float32)),
            node_text=self.pg.node_text.index_select(0, torch.from_numpy(rows)),
            node_type=self.pg.data.node_type.index_select(0, torch.from_numpy(rows)),
            batch=torch.from_numpy(np.repeat(np.arange(len(graphs)), [len(g.rows) for g in graphs])),
            seeds=torch.from_numpy(np.concatenate([g.seeds for g in graphs])),
            log_degree=self.log_degree.index_select(0, torch.from_numpy(rows)),
            edge_index=torch.from_numpy(
                np.concatenate([g.edge_index + off for g, off in zip(graphs, offsets, strict=False)], axis=1)
            ),
            edge_type=torch.from_numpy(np.concatenate([g.edge_type for g in graphs])),
            relation_features=self.relation_features,
        )

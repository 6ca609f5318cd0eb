"""The torch-geometric view of a QuadGraph: relation ids with inverse relations, node type ids, text features."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from agent.extras import needs_extra
from graphs.quadgraph import LAYERS, QuadGraph

if TYPE_CHECKING:
    import torch
    from torch_geometric.data import Data


@dataclass
class PygGraph:
    """A QuadGraph as tensors, plus the lookups needed to map scores back to nodes."""

    data: Data
    """edge_index (2, 2E), edge_type (2E,), node_type (N,), num_nodes; `num_relations` = 2R."""
    node_ids: list[str]
    """Node id of each row."""
    node_text: torch.Tensor
    """(N, D) float32 text embeddings of the nodes."""
    relation_texts: list[str]
    """Text of forward relation r (id r); its inverse has id r + R."""
    relation_text: torch.Tensor
    """(R, D) float32 text embeddings of the forward relations."""
    doc_rows: torch.Tensor
    """(n_docs,) rows of the document nodes, in corpus order."""

    @property
    def num_relations(self) -> int:
        """Forward plus inverse relation count (2R)."""
        return 2 * len(self.relation_texts)

    @property
    def num_nodes(self) -> int:
        """Node count N."""
        return len(self.node_ids)


def to_pyg(qg: QuadGraph) -> PygGraph:
    """Convert: each edge u→v of relation r also appears as v→u with relation r + R."""
    with needs_extra("graphs", "QuadGraph retrieval"):
        import numpy as np
        import torch
        from torch_geometric.data import Data

    if qg.embeddings is None:
        raise ValueError("the graph has no node embeddings; build or load it first")
    rel_texts = qg.relation_texts()
    missing = [t for t in rel_texts if t not in qg.relation_embeddings]
    if missing:
        raise ValueError(f"no embedding for relation text {missing[0]!r}; rebuild the graph")
    rel_id = {t: i for i, t in enumerate(rel_texts)}
    index = {n: i for i, n in enumerate(qg.node_ids)}
    n_rel = len(rel_texts)
    src, dst, typ = [], [], []
    for u, v, d in qg.g.edges(data=True):
        src.append(index[u])
        dst.append(index[v])
        typ.append(rel_id[d["text"]])
    src_t = torch.tensor(src, dtype=torch.long)
    dst_t = torch.tensor(dst, dtype=torch.long)
    typ_t = torch.tensor(typ, dtype=torch.long)
    edge_index = torch.stack([torch.cat([src_t, dst_t]), torch.cat([dst_t, src_t])])
    edge_type = torch.cat([typ_t, typ_t + n_rel])
    layer_id = {str(layer): i for i, layer in enumerate(LAYERS)}
    node_type = torch.tensor([layer_id[d["layer"]] for _, d in qg.g.nodes(data=True)], dtype=torch.long)
    data = Data(edge_index=edge_index, edge_type=edge_type, node_type=node_type, num_nodes=len(index))
    data.num_relations = 2 * n_rel
    rel_matrix = (
        np.stack([qg.relation_embeddings[t] for t in rel_texts]).astype(np.float32)
        if rel_texts
        else np.zeros((0, qg.embeddings.shape[1]), dtype=np.float32)
    )
    doc_rows = torch.tensor([index[n] for n in qg.documents()], dtype=torch.long)
    return PygGraph(
        data=data,
        node_ids=qg.node_ids,
        node_text=torch.from_numpy(np.ascontiguousarray(qg.embeddings, dtype=np.float32)),
        relation_texts=rel_texts,
        relation_text=torch.from_numpy(rel_matrix),
        doc_rows=doc_rows,
    )

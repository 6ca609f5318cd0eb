"""The GFM network: query-dependent, relation-conditioned message passing (NBFNet/ULTRA style) in torch-geometric.

The input is a batch of query graphs (one graph, or one query subgraph, per query, stacked
PyG-style with a `batch` vector). For each query:
- before message passing, start nodes (entities linked to the query) carry the projected query
  embedding, scaled by link confidence, and every node adds a fusion of its own text embedding
  with the query (elementwise product and cosine) and its log-degree;
- each layer turns relation text embeddings (with a direction flag for inverse edges) into
  relation vectors, modulates them by the query, and sends DistMult messages
  `state[source] * relation`, aggregated at the target and added back through a residual;
- after message passing, the final state, the initial state and the text–query fusion are scored
  by an MLP, plus a learned multiple of the query–node cosine.
One score per node comes out; callers filter by node type (documents for retrieval).
"""

from __future__ import annotations

from dataclasses import dataclass

from agent.extras import needs_extra

with needs_extra("graphs", "QuadGraph retrieval"):
    import torch
    from torch import Tensor, nn
    from torch_geometric.nn import MessagePassing

from graphs.gfm.config import GFMConfig


@dataclass
class QueryBatch:
    """Stacked query graphs: node rows of all queries, edges relabelled to those rows."""

    query: Tensor
    """(B, D) query text embeddings."""
    node_text: Tensor
    """(n, D) text embeddings of the stacked nodes."""
    node_type: Tensor
    """(n,) layer id of each stacked node."""
    batch: Tensor
    """(n,) which query each stacked node belongs to."""
    seeds: Tensor
    """(n,) start weight of each stacked node (0 for non-start nodes)."""
    log_degree: Tensor
    """(n,) log(1 + degree) of each node in the whole graph (hubs carry less specific signal)."""
    edge_index: Tensor
    """(2, e) edges between stacked rows, inverse edges included."""
    edge_type: Tensor
    """(e,) relation id (global; ids >= R are inverses)."""
    relation_features: Tensor
    """(2R, D + 1) relation text embedding plus a 0/1 inverse flag, for every relation id."""


def relation_features(relation_text: Tensor) -> Tensor:
    """(2R, D + 1): forward relations then their inverses, each with a direction flag."""
    r = relation_text
    flags = torch.cat([torch.zeros(len(r), 1), torch.ones(len(r), 1)])
    return torch.cat([torch.cat([r, r]), flags], dim=1)


class RelationalConv(MessagePassing):
    """One DistMult message-passing step with per-query relation vectors."""

    def __init__(self, dim: int, aggregation: str) -> None:
        super().__init__(aggr=aggregation, node_dim=0)
        self.update_lin = nn.Linear(2 * dim, dim)
        self.norm = nn.LayerNorm(dim)

    def forward(self, h: Tensor, edge_index: Tensor, edge_relation: Tensor, relations: Tensor) -> Tensor:
        """h: (n, d); relations: (K, d); edge_relation: (e,) row of `relations` per edge."""
        return self.propagate(edge_index, x=h, relations=relations, edge_relation=edge_relation)

    def message(self, x_j: Tensor, relations: Tensor, edge_relation: Tensor) -> Tensor:
        return x_j * relations.index_select(0, edge_relation)


class GFM(nn.Module):
    """Scores every node of each query graph."""

    def __init__(self, config: GFMConfig) -> None:
        super().__init__()
        self.config = config
        d, t = config.hidden_dim, config.text_dim
        self.query_proj = nn.Linear(t, d)
        self.text_proj = nn.Linear(t, d)
        self.type_embedding = nn.Embedding(4, d)
        self.fuse_in = nn.Linear(d + 3, d)
        self.relation_mlps = nn.ModuleList(
            nn.Sequential(nn.Linear(t + 1, config.relation_hidden), nn.ReLU(), nn.Linear(config.relation_hidden, d))
            for _ in range(config.num_layers)
        )
        self.relation_query = nn.ModuleList(nn.Linear(d, d) for _ in range(config.num_layers))
        self.convs = nn.ModuleList(RelationalConv(d, config.aggregation) for _ in range(config.num_layers))
        self.dropout = nn.Dropout(config.dropout)
        score_out = nn.Linear(config.score_hidden, 1)
        # Start as a dense retriever: the graph part contributes nothing until trained.
        nn.init.zeros_(score_out.weight)
        nn.init.zeros_(score_out.bias)
        self.score_mlp = nn.Sequential(nn.Linear(3 * d, config.score_hidden), nn.ReLU(), score_out)
        self.text_weight = nn.Parameter(torch.tensor(float(config.init_text_weight)))

    def forward(self, qb: QueryBatch) -> Tensor:
        """(n,) scores of the stacked nodes."""
        q_all = self.query_proj(qb.query)  # (B, d)
        q = q_all.index_select(0, qb.batch)  # (n, d)
        cos = (qb.node_text * qb.query.index_select(0, qb.batch)).sum(-1, keepdim=True)  # (n, 1)
        text = self.text_proj(qb.node_text) + self.type_embedding(qb.node_type)
        fused = text * q
        s = qb.seeds.unsqueeze(-1)
        h0 = s * q + self.fuse_in(torch.cat([fused, cos, s, qb.log_degree.unsqueeze(-1)], dim=-1))

        # Relation vectors only for relation ids present, one set per query.
        used, edge_rel = torch.unique(qb.edge_type, return_inverse=True)
        feats = qb.relation_features.index_select(0, used)  # (U, D + 1)
        n_used = used.numel()
        edge_query = qb.batch.index_select(0, qb.edge_index[0])
        edge_relation = edge_query * n_used + edge_rel
        h = h0
        for mlp, rq, conv in zip(self.relation_mlps, self.relation_query, self.convs, strict=True):
            assert isinstance(conv, RelationalConv)  # a ModuleList yields plain Modules to the checker
            rel = mlp(feats).unsqueeze(0) * (1 + torch.tanh(rq(q_all))).unsqueeze(1)  # (B, U, d)
            agg = conv(h, qb.edge_index, edge_relation, rel.reshape(-1, rel.shape[-1]))
            upd = torch.relu(conv.norm(conv.update_lin(torch.cat([h, agg], dim=-1))))
            h = h + self.dropout(upd)
        graph_score = self.score_mlp(torch.cat([h, h0, fused], dim=-1)).squeeze(-1)
        return graph_score + self.text_weight * cos.squeeze(-1)


def count_parameters(model: nn.Module) -> int:
    """Trainable parameter count."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)

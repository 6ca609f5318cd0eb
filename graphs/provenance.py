"""Explain a graph retrieval: walk back from a passage to a start node along the best-scored neighbours."""

from __future__ import annotations

from collections.abc import Callable, Collection

from graphs.quadgraph import Layer, QuadGraph
from graphs.retrieval import PathStep

_WALKABLE = (Layer.ENTITY, Layer.DOCUMENT, Layer.ATTRIBUTE)


def _edge_text(qg: QuadGraph, u: str, v: str) -> tuple[str, bool] | None:
    """Relation text between u and v, preferring a fact; bool says whether it runs u→v."""
    best: tuple[str, bool] | None = None
    for a, b, forward in ((u, v, True), (v, u, False)):
        data = qg.g.get_edge_data(a, b)
        if not data:
            continue
        for d in data.values():
            if d["kind"] == "fact":
                return str(d["text"]), forward
            if best is None:
                best = (str(d["text"]), forward)
    return best


def trace_path(
    qg: QuadGraph,
    doc_node: str,
    score: Callable[[str], float],
    seeds: Collection[str],
    max_hops: int = 3,
) -> list[PathStep]:
    """Steps from a seed (or the best-scored node reached in max_hops) to the passage, seed first.

    Each backward step moves to the highest-scoring unvisited neighbour in the entity, document
    or attribute layers (communities are skipped: they join everything and explain nothing).
    """
    chain = [doc_node]
    visited = {doc_node}
    current = doc_node
    for _ in range(max_hops):
        nbrs = {n for n in qg.g.predecessors(current)} | {n for n in qg.g.successors(current)}
        nbrs = {n for n in nbrs if n not in visited and qg.layer(n) in _WALKABLE}
        if not nbrs:
            break
        seeded = [n for n in nbrs if n in seeds]
        nxt = max(seeded or nbrs, key=lambda n: (score(n), n))
        chain.append(nxt)
        visited.add(nxt)
        current = nxt
        if nxt in seeds:
            break
    chain.reverse()
    steps: list[PathStep] = []
    for a, b in zip(chain, chain[1:], strict=False):
        found = _edge_text(qg, a, b)
        if found is None:
            continue
        text, forward = found
        steps.append(PathStep(qg.text(a)[:200], text if forward else f"inverse of {text}", qg.text(b)[:200]))
    return steps

"""Retrievers by name: bm25, dense, ppr, gfm."""

from __future__ import annotations

from pathlib import Path

from graphs.embedding import Embedder, resolve_embedder
from graphs.errors import GraphInputError
from graphs.quadgraph import QuadGraph
from graphs.retrieval import Retriever

RETRIEVERS: tuple[str, ...] = ("bm25", "dense", "ppr", "gfm")
"""Every retriever name, cheapest first."""


def make_retriever(
    name: str, qg: QuadGraph, embedder: Embedder | None = None, checkpoint: str | Path | None = None
) -> Retriever:
    """Build one retriever over a graph; `checkpoint` is the GFM weights (default: shipped)."""
    if name == "bm25":
        from graphs.bm25 import BM25Retriever

        return BM25Retriever(qg.passages())
    embed = embedder or resolve_embedder()
    if name == "dense":
        from graphs.dense import DenseRetriever

        return DenseRetriever(qg, embed)
    if name == "ppr":
        from graphs.ppr import PPRRetriever

        return PPRRetriever(qg, embed)
    if name == "gfm":
        from graphs.gfm.gfm_retriever import GFMRetriever

        return GFMRetriever(qg, embed, checkpoint=checkpoint)
    raise GraphInputError(f"unknown retriever {name!r}; choose from {', '.join(RETRIEVERS)}")

"""The retrieval toolkit for agents: a READ tool `retrieve(query, k)` over a saved QuadGraph.

Registered in tools/registry.py as "retrieval" → "graphs.tool:retrieval_toolkit".
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field

from graphs.errors import GraphInputError
from graphs.retriever_registry import RETRIEVERS, make_retriever
from graphs.store import load_graph
from tools.errors import ToolError
from tools.registry import Toolkit, toolkit_factory
from tools.tool import ToolKind, tool

MAX_K = 20


@toolkit_factory
def retrieval_toolkit(
    graph_dir: str | Path | None = None,
    retriever: str = "gfm",
    model: str | Path | None = None,
    max_chars: int = 1200,
    store: str | None = None,
) -> Toolkit:
    """A toolkit with one READ tool that retrieves passages, each with its provenance.

    graph_dir: a folder written by `rein graph build` (default: $REIN_GRAPH_DIR, so that agent
    specs can list the toolkit by name); retriever: bm25, dense, ppr or gfm; model: GFM
    checkpoint (default: the shipped one); max_chars: passage text cut for the model; store:
    where the embeddings are, a chromadb folder or a Chroma server URL (default: $REIN_GRAPH_STORE,
    else where the graph was built into).
    """
    graph_dir = graph_dir or os.environ.get("REIN_GRAPH_DIR")
    if not graph_dir:
        raise GraphInputError(
            "the retrieval toolkit needs a graph folder: pass graph_dir=... or set REIN_GRAPH_DIR "
            "(build one with `rein graph build`)"
        )
    if retriever not in RETRIEVERS:
        raise GraphInputError(f"unknown retriever {retriever!r}; choose from {', '.join(RETRIEVERS)}")
    qg = load_graph(graph_dir, store=store or os.environ.get("REIN_GRAPH_STORE") or None)
    engine = make_retriever(retriever, qg, checkpoint=model)

    @tool(kind=ToolKind.READ, timeout_s=60.0)
    def retrieve(query: str, k: Annotated[int, Field(ge=1, le=MAX_K)] = 5) -> list[dict[str, Any]]:
        """Search the knowledge base for passages relevant to a query. Each result has the passage
        title and text, its score, and its provenance: the entities the query was linked to and the
        relations that led to the passage.

        Args:
            query: What to look for, as a question or keywords.
            k: How many passages to return (1-20).
        """
        if not query.strip():
            raise ToolError("query is empty; say what to look for")
        if not 1 <= k <= MAX_K:
            raise ToolError(f"k must be between 1 and {MAX_K}")
        out = []
        for hit in engine.retrieve(query, k):
            d = hit.as_dict()
            if len(d["text"]) > max_chars:
                d["text"] = d["text"][:max_chars] + "…"
            out.append(d)
        return out

    return Toolkit([retrieve], name="retrieval")

"""QuadGraph retrieval: a four-layer knowledge graph, its builders, retrievers (BM25, dense, PPR, GFM) and tools.

Names are imported on first use, so `import graphs` never loads torch, chromadb or networkx.
"""

from __future__ import annotations

from agent.lazy import lazy_exports

_EXPORTS = {
    "QuadGraph": "graphs.quadgraph",
    "Layer": "graphs.quadgraph",
    "RelationKind": "graphs.quadgraph",
    "Passage": "graphs.corpus",
    "Question": "graphs.corpus",
    "Triple": "graphs.corpus",
    "DocTriples": "graphs.corpus",
    "load_corpus": "graphs.corpus",
    "load_questions": "graphs.corpus",
    "load_openie": "graphs.corpus",
    "BuildOptions": "graphs.build",
    "build_quadgraph": "graphs.build",
    "extract_offline": "graphs.extract",
    "extract_with_model": "graphs.llm_extract",
    "save_graph": "graphs.store",
    "load_graph": "graphs.store",
    "StoreLocation": "graphs.store",
    "to_pyg": "graphs.pyg",
    "Hit": "graphs.retrieval",
    "Provenance": "graphs.retrieval",
    "PathStep": "graphs.retrieval",
    "Retriever": "graphs.retrieval",
    "RETRIEVERS": "graphs.retriever_registry",
    "make_retriever": "graphs.retriever_registry",
    "retrieval_toolkit": "graphs.tool",
    "GraphInputError": "graphs.errors",
    "GraphStoreError": "graphs.errors",
    "CheckpointError": "graphs.errors",
}

__all__ = sorted(_EXPORTS)


__getattr__ = lazy_exports(__name__, _EXPORTS)

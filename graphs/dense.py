"""Dense retrieval: MiniLM query embedding against the document collection in chromadb."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from agent.extras import needs_extra
from graphs.embedding import Embedder
from graphs.quadgraph import Layer, QuadGraph
from graphs.retrieval import Provenance, Retriever
from graphs.store import open_collection

if TYPE_CHECKING:
    import numpy as np


class DenseRetriever(Retriever):
    """Cosine similarity of MiniLM embeddings, searched through chromadb.

    A graph loaded from a folder is searched in its persistent collection; an unsaved graph gets
    an in-memory chromadb collection of its document embeddings.
    """

    name = "dense"
    depth = 256
    """How many nearest passages chromadb returns per query; the others score -2."""

    def __init__(self, qg: QuadGraph, embedder: Embedder) -> None:
        with needs_extra("graphs", "QuadGraph retrieval"):
            import chromadb
            from chromadb.config import Settings

        self.qg = qg
        self.embed = embedder
        self.passages = qg.passages()
        self._row_of = {n: i for i, n in enumerate(qg.documents())}
        if qg.meta.get("folder"):
            self.collection = open_collection(qg, Layer.DOCUMENT)
        else:
            client = chromadb.EphemeralClient(settings=Settings(anonymized_telemetry=False))
            ids, vecs = qg.layer_matrix(Layer.DOCUMENT)
            self.collection = client.create_collection(
                f"dense_{uuid.uuid4().hex[:12]}", embedding_function=None, configuration={"hnsw": {"space": "cosine"}}
            )
            for start in range(0, len(ids), 2000):
                self.collection.add(ids=ids[start : start + 2000], embeddings=vecs[start : start + 2000])

    def _score_with_context(self, query: str) -> tuple[np.ndarray, Any]:
        import numpy as np

        qv = self.embed([query])[0]
        n = len(self.passages)
        # chromadb returns cosine distances of the nearest documents; the rest rank below them.
        got = self.collection.query(query_embeddings=[qv], n_results=min(n, self.depth), include=["distances"])
        out = np.full(n, -2.0, dtype=np.float32)
        for node, dist in zip(got["ids"][0], got["distances"][0], strict=True):
            out[self._row_of[node]] = 1.0 - float(dist)
        return out, out

    def scores(self, query: str) -> np.ndarray:
        return self._score_with_context(query)[0]

    def explain(self, query: str, doc_index: int, context: Any) -> Provenance:
        return Provenance(retriever=self.name, evidence={"cosine": round(float(context[doc_index]), 4)})

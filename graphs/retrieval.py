"""The retriever interface shared by BM25, dense, personalized PageRank and the GFM."""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from graphs.corpus import Passage

if TYPE_CHECKING:
    import numpy as np


@dataclass(frozen=True)
class PathStep:
    """One relation on the way from a start node to a retrieved passage."""

    source: str
    """Text of the node the step leaves."""
    relation: str
    """Relation text (an inverse relation reads `inverse of <text>`)."""
    target: str
    """Text of the node the step reaches."""


@dataclass
class Provenance:
    """Why a passage was retrieved."""

    retriever: str
    """Name of the retriever."""
    seeds: list[str] = field(default_factory=list)
    """Texts of the start nodes the query was linked to (graph retrievers)."""
    path: list[PathStep] = field(default_factory=list)
    """Nodes and relations leading from a start node to the passage (graph retrievers)."""
    evidence: dict[str, Any] = field(default_factory=dict)
    """Retriever-specific detail: matched terms, cosine similarity, node scores."""


@dataclass
class Hit:
    """One retrieved passage."""

    doc_index: int
    """Index of the passage in the corpus."""
    title: str
    """Passage title."""
    text: str
    """Passage body."""
    score: float
    """Retriever score; higher is better (not comparable across retrievers)."""
    provenance: Provenance
    """How the retriever got here."""

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        prov = self.provenance
        return {
            "doc_index": self.doc_index,
            "title": self.title,
            "text": self.text,
            "score": round(float(self.score), 6),
            "provenance": {
                "retriever": prov.retriever,
                "seeds": list(prov.seeds),
                "path": [{"source": s.source, "relation": s.relation, "target": s.target} for s in prov.path],
                "evidence": prov.evidence,
            },
        }


class Retriever(abc.ABC):
    """Ranks the passages of a corpus for a query."""

    name: str = "retriever"
    passages: list[Passage]

    @abc.abstractmethod
    def scores(self, query: str) -> np.ndarray:
        """A score for every passage, in corpus order (higher is better)."""

    def explain(self, query: str, doc_index: int, context: Any) -> Provenance:
        """Provenance of one hit; `context` is what `_score_with_context` returned."""
        return Provenance(retriever=self.name)

    def _score_with_context(self, query: str) -> tuple[np.ndarray, Any]:
        return self.scores(query), None

    def retrieve(self, query: str, k: int = 5) -> list[Hit]:
        """The k best passages, best first, each with provenance."""
        import numpy as np

        if not isinstance(query, str) or not query.strip():
            raise ValueError("query must be a non-empty string")
        if k < 1:
            raise ValueError("k must be at least 1")
        scores, context = self._score_with_context(query)
        k = min(k, len(scores))
        # Stable tie-break on corpus index keeps rankings deterministic.
        order = np.lexsort((np.arange(len(scores)), -scores))[:k]
        hits = []
        for i in order:
            p = self.passages[int(i)]
            hits.append(
                Hit(int(i), p.title, p.text, float(scores[i]), self.explain(query, int(i), context))
            )
        return hits

    def rank(self, query: str, k: int) -> list[int]:
        """Corpus indices of the top k passages, without provenance (for evaluation)."""
        import numpy as np

        scores = self.scores(query)
        return [int(i) for i in np.lexsort((np.arange(len(scores)), -scores))[:k]]

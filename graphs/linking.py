"""Link a query to start entities: exact name matches, then embedding matches of its mentions and of the whole query."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from graphs.embedding import Embedder
from graphs.extract import find_mentions
from graphs.quadgraph import Layer, QuadGraph
from graphs.text import normalize_entity

if TYPE_CHECKING:
    import numpy as np

_STOP = set(
    ["a", "an", "the", "of", "in", "on", "at", "to", "for", "by", "with", "from", "as", "is", "was", "were", "are", "be", "been", "what", "which", "who", "whom", "whose", "when", "where", "why", "how", "that", "this", "these", "those", "it", "its", "his", "her", "their", "and", "or", "not", "did", "does", "do", "first", "last", "one", "two", "three", "many", "much"]
)


@dataclass(frozen=True)
class Seed:
    """A start entity for a query."""

    node: str
    """Entity node id."""
    weight: float
    """Link confidence in (0, 1]."""
    how: str
    """`exact` (name appears in the query), `mention` (a query mention's nearest name) or `query` (nearest to the whole query)."""


@dataclass
class LinkerOptions:
    """Knobs of query–entity linking."""

    max_ngram: int = 8
    """Longest query n-gram tried as an exact entity name."""
    mention_threshold: float = 0.8
    """Minimum cosine between a query mention and an entity name."""
    query_top_k: int = 3
    """Entities nearest to the whole query that are always added."""
    query_weight: float = 0.5
    """Scale of those whole-query links (they are less certain)."""
    max_seeds: int = 10
    """Cap on seeds per query."""


class EntityLinker:
    """Finds the entities a query talks about."""

    def __init__(self, qg: QuadGraph, embedder: Embedder, options: LinkerOptions | None = None) -> None:
        self.qg = qg
        self.embed = embedder
        self.options = options or LinkerOptions()
        self.ids, self.matrix = qg.layer_matrix(Layer.ENTITY)
        self.by_key = {qg.g.nodes[e].get("key", normalize_entity(qg.text(e))): e for e in self.ids}

    def link(self, query: str, query_vec: np.ndarray | None = None) -> list[Seed]:
        """Seeds for a query, strongest first."""
        import numpy as np

        opts = self.options
        seeds: dict[str, Seed] = {}

        def put(seed: Seed) -> None:
            old = seeds.get(seed.node)
            if old is None or seed.weight > old.weight:
                seeds[seed.node] = seed

        words = query.split()
        norm = [normalize_entity(w) for w in words]
        covered = [False] * len(words)
        for n in range(min(opts.max_ngram, len(words)), 0, -1):
            for i in range(len(words) - n + 1):
                if any(covered[i : i + n]):
                    continue
                key = normalize_entity(" ".join(words[i : i + n]))
                if not key or key in _STOP or key not in self.by_key:
                    continue
                # Common nouns ("the country") name too many things; a span must look like a name.
                content = [w for w, k in zip(words[i : i + n], norm[i : i + n], strict=True) if k not in _STOP]
                if not any(w[:1].isupper() or w[:1].isdigit() for w in content):
                    continue
                put(Seed(self.by_key[key], 1.0, "exact"))
                covered[i : i + n] = [True] * n

        if len(self.ids):
            spans = [s for _, _, s in find_mentions(query) if normalize_entity(s) not in self.by_key]
            texts = spans + ([query] if query_vec is None else [])
            vecs = self.embed(texts) if texts else np.zeros((0, self.matrix.shape[1]), dtype=np.float32)
            qv = query_vec if query_vec is not None else vecs[-1]
            if spans:
                sims = vecs[: len(spans)] @ self.matrix.T
                for row in sims:
                    j = int(row.argmax())
                    if row[j] >= opts.mention_threshold:
                        put(Seed(self.ids[j], float(row[j]), "mention"))
            qs = self.matrix @ qv
            k = min(opts.query_top_k, len(self.ids))
            for j in np.argsort(-qs)[:k]:
                put(Seed(self.ids[int(j)], float(max(qs[j], 0.0)) * opts.query_weight, "query"))
        ranked = sorted(seeds.values(), key=lambda s: (-s.weight, s.node))
        return [s for s in ranked if s.weight > 0][: opts.max_seeds]

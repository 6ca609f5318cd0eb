"""Build a QuadGraph from a corpus and per-passage extractions (given OpenIE, an LLM, or offline)."""

from __future__ import annotations

import re
import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from agent.extras import needs_extra

with needs_extra("graphs", "QuadGraph retrieval"):
    import networkx as nx

from graphs.corpus import DocTriples, Passage
from graphs.embedding import Embedder, resolve_embedder
from graphs.quadgraph import (
    Layer,
    QuadGraph,
    RelationKind,
    attribute_id,
    community_id,
    doc_id,
    entity_id,
)
from graphs.text import normalize_entity, normalize_predicate

if TYPE_CHECKING:
    import numpy as np

GRAPH_FORMAT_VERSION = 1
_YEAR = re.compile(r"^\d{3,4}s?$")
_DATE = re.compile(
    r"\b(january|february|march|april|may|june|july|august|september|october|november|december)\b.*\d"
    r"|\d.*\b(january|february|march|april|may|june|july|august|september|october|november|december)\b"
)
_NUMBER = re.compile(r"^[\d.,]+(?: [a-z%]+)*$")


@dataclass
class BuildOptions:
    """Knobs of graph construction."""

    synonym_threshold: float = 0.85
    """Cosine similarity of entity-name embeddings at or above which an `equivalent` edge is added."""
    synonym_top_k: int = 5
    """At most this many synonym edges per entity (the nearest ones)."""
    communities: bool = True
    """Add the community layer (Louvain over entities and documents)."""
    community_resolution: float = 1.0
    """Louvain resolution; higher gives more, smaller communities."""
    min_community_size: int = 3
    """Smaller clusters get no community node."""
    community_text_entities: int = 8
    """How many member entities (by degree) name a community in its text."""
    kind_attributes: bool = True
    """Give year/date/number entities a `kind` attribute node."""
    seed: int = 0
    """Seed of the Louvain clustering."""


def _kind(key: str) -> str | None:
    if _YEAR.match(key):
        return "year"
    if _DATE.search(key):
        return "date"
    if _NUMBER.match(key):
        return "number"
    return None


def build_quadgraph(
    corpus: Sequence[Passage],
    extractions: Sequence[DocTriples],
    embedder: Embedder | None = None,
    options: BuildOptions | None = None,
    extractor: str = "given",
) -> QuadGraph:
    """Assemble the four layers, embed every node's text, add synonym edges and communities.

    extractions[i] holds the entities and triples of corpus[i]; `extractor` names their source
    (recorded in the graph's metadata).
    """
    if len(extractions) != len(corpus):
        raise ValueError(f"{len(extractions)} extractions for {len(corpus)} passages")
    opts = options or BuildOptions()
    embed = resolve_embedder(embedder)
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    qg = QuadGraph(meta={"format_version": GRAPH_FORMAT_VERSION, "extractor": extractor, "options": asdict(opts)})

    surfaces: dict[str, Counter[str]] = defaultdict(Counter)
    for doc in extractions:
        for name in [*doc.entities, *(x for t in doc.triples for x in (t.subject, t.object))]:
            key = normalize_entity(name)
            if key:
                surfaces[key][name.strip()] += 1

    titles: dict[str, str] = {}
    for i, passage in enumerate(corpus):
        d = qg.add_document(i, passage)
        if passage.title.strip():
            a = qg.add_node(attribute_id("title", passage.title), Layer.ATTRIBUTE, f"title: {passage.title}")
            qg.add_relation(d, a, RelationKind.HAS_ATTRIBUTE, "has title")
            titles.setdefault(normalize_entity(passage.title), a)

    def ent(name: str) -> str | None:
        key = normalize_entity(name)
        if not key:
            return None
        node = entity_id(key)
        if node not in qg.g:
            qg.add_node(node, Layer.ENTITY, surfaces[key].most_common(1)[0][0], key=key)
        return node

    for i, doc in enumerate(extractions):
        d = doc_id(i)
        for name in doc.entities:
            e = ent(name)
            if e:
                qg.add_relation(e, d, RelationKind.MENTIONED_IN)
        for t in doc.triples:
            s, o, p = ent(t.subject), ent(t.object), normalize_predicate(t.predicate)
            if s is None or o is None or not p:
                continue
            qg.add_relation(s, d, RelationKind.MENTIONED_IN)
            qg.add_relation(o, d, RelationKind.MENTIONED_IN)
            if s != o:
                qg.add_relation(s, o, RelationKind.FACT, p, doc=i)

    for e in list(qg.nodes(Layer.ENTITY)):
        key = qg.g.nodes[e]["key"]
        if key in titles:
            qg.add_relation(e, titles[key], RelationKind.HAS_ATTRIBUTE, "is the title of a passage")
        kind = _kind(key) if opts.kind_attributes else None
        if kind:
            a = qg.add_node(attribute_id("kind", kind), Layer.ATTRIBUTE, f"kind: {kind}")
            qg.add_relation(e, a, RelationKind.HAS_ATTRIBUTE, "has kind")
    timings["structure_s"] = time.perf_counter() - t0

    t1 = time.perf_counter()
    ent_ids = list(qg.nodes(Layer.ENTITY))
    ent_vecs = embed([qg.text(e) for e in ent_ids]) if ent_ids else None
    timings["embed_entities_s"] = time.perf_counter() - t1

    t2 = time.perf_counter()
    if ent_vecs is not None and opts.synonym_threshold < 1.0:
        add_synonym_edges(qg, ent_ids, ent_vecs, opts.synonym_threshold, opts.synonym_top_k)
    timings["synonyms_s"] = time.perf_counter() - t2

    t3 = time.perf_counter()
    if opts.communities:
        add_communities(qg, opts)
    timings["communities_s"] = time.perf_counter() - t3

    t4 = time.perf_counter()
    import numpy as np

    rest = [n for n in qg.node_ids if qg.layer(n) != Layer.ENTITY]
    rest_vecs = embed([qg.text(n) for n in rest])
    dim = rest_vecs.shape[1] if len(rest) else (ent_vecs.shape[1] if ent_vecs is not None else 384)
    matrix = np.zeros((qg.g.number_of_nodes(), dim), dtype=np.float32)
    for ids, vecs in ((ent_ids, ent_vecs), (rest, rest_vecs)):
        if ids and vecs is not None:
            matrix[[qg.index_of(n) for n in ids]] = vecs
    qg.embeddings = matrix
    rel_texts = qg.relation_texts()
    qg.relation_embeddings = dict(zip(rel_texts, embed(rel_texts), strict=True)) if rel_texts else {}
    timings["embed_rest_s"] = time.perf_counter() - t4
    timings["total_s"] = time.perf_counter() - t0
    qg.meta["build_timings"] = timings
    qg.meta["stats"] = qg.stats()
    return qg


def add_synonym_edges(qg: QuadGraph, ids: list[str], vecs: np.ndarray, threshold: float, top_k: int) -> int:
    """Link entity pairs whose name embeddings reach `threshold` (each pair once); returns the count."""
    import numpy as np

    added = 0
    n = len(ids)
    block = 1024
    for start in range(0, n, block):
        sims = vecs[start : start + block] @ vecs.T
        for r in range(sims.shape[0]):
            sims[r, start + r] = -1.0
        k = min(top_k, n - 1)
        if k <= 0:
            break
        top = np.argpartition(-sims, k - 1, axis=1)[:, :k]
        for r, cols in enumerate(top):
            i = start + r
            for j in cols:
                if sims[r, j] >= threshold and not _linked(qg, ids[i], ids[j]) and not _linked(qg, ids[j], ids[i]):
                    qg.add_relation(ids[i], ids[j], RelationKind.EQUIVALENT)
                    added += 1
    return added


def _linked(qg: QuadGraph, u: str, v: str) -> bool:
    return qg.g.has_edge(u, v, f"{RelationKind.EQUIVALENT}:is equivalent to")


def add_communities(qg: QuadGraph, opts: BuildOptions) -> int:
    """Cluster entities and documents with Louvain; each cluster becomes a described community node."""
    und = nx.Graph()
    for u, v, data in qg.relations():
        if data["kind"] in (RelationKind.FACT, RelationKind.MENTIONED_IN, RelationKind.EQUIVALENT):
            und.add_edge(u, v)
    if und.number_of_edges() == 0:
        return 0
    parts = nx.community.louvain_communities(und, resolution=opts.community_resolution, seed=opts.seed)
    parts = sorted((sorted(p) for p in parts if len(p) >= opts.min_community_size), key=lambda p: (-len(p), p[0]))
    for ci, members in enumerate(parts):
        ents = sorted((m for m in members if qg.layer(m) == Layer.ENTITY), key=lambda m: (-und.degree(m), m))
        docs = [m for m in members if qg.layer(m) == Layer.DOCUMENT]
        names = ", ".join(qg.text(e) for e in ents[: opts.community_text_entities])
        doc_titles = "; ".join(dict.fromkeys(qg.g.nodes[d].get("title", "") for d in docs[:3]))
        text = f"community of {len(ents)} entities and {len(docs)} passages: {names}"
        if doc_titles:
            text += f" (passages: {doc_titles})"
        c = qg.add_node(community_id(ci), Layer.COMMUNITY, text, size=len(members))
        for m in members:
            qg.add_relation(m, c, RelationKind.BELONGS_TO)
    return len(parts)


def graph_summary(qg: QuadGraph) -> dict[str, Any]:
    """Stats plus build metadata, for the CLI."""
    return {"stats": qg.stats(), "extractor": qg.meta.get("extractor"), "timings": qg.meta.get("build_timings", {})}

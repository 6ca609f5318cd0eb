"""The QuadGraph: typed nodes in four layers and typed, text-bearing relations on a networkx MultiDiGraph."""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from agent.extras import needs_extra

with needs_extra("graphs", "QuadGraph retrieval"):
    import networkx as nx

from graphs.corpus import Passage

if TYPE_CHECKING:
    import numpy as np


class Layer(enum.StrEnum):
    """The four node layers of a QuadGraph."""

    ATTRIBUTE = "attribute"
    ENTITY = "entity"
    DOCUMENT = "document"
    COMMUNITY = "community"


class RelationKind(enum.StrEnum):
    """Relation families; FACT edges carry their own predicate text, the others a fixed text."""

    FACT = "fact"
    MENTIONED_IN = "mentioned_in"
    HAS_ATTRIBUTE = "has_attribute"
    BELONGS_TO = "belongs_to"
    EQUIVALENT = "equivalent"


LAYERS: tuple[Layer, ...] = tuple(Layer)
RELATION_TEXT: dict[RelationKind, str] = {
    RelationKind.MENTIONED_IN: "is mentioned in",
    RelationKind.HAS_ATTRIBUTE: "has attribute",
    RelationKind.BELONGS_TO: "belongs to community",
    RelationKind.EQUIVALENT: "is equivalent to",
}
"""Text of the structural relations (FACT edges use their predicate)."""


def doc_id(index: int) -> str:
    """Node id of corpus passage `index`."""
    return f"doc:{index}"


def entity_id(key: str) -> str:
    """Node id of the entity with normalised name `key`."""
    return f"ent:{key}"


def attribute_id(name: str, value: str) -> str:
    """Node id of the attribute `name = value`."""
    return f"attr:{name}={value}"


def community_id(index: int) -> str:
    """Node id of community `index`."""
    return f"com:{index}"


class QuadGraph:
    """A four-layer knowledge graph over a corpus; node and edge data always include `text`.

    Node data: `layer`, `text`, plus `doc_index`/`title` for documents. Edge data: `kind`,
    `text`, plus `docs` (passage indices that state the fact) for FACT edges. Embeddings, when
    present, are float32 rows aligned with `node_ids`.
    """

    def __init__(self, graph: nx.MultiDiGraph | None = None, meta: dict[str, Any] | None = None) -> None:
        self.g: nx.MultiDiGraph = graph if graph is not None else nx.MultiDiGraph()
        self.meta: dict[str, Any] = dict(meta or {})
        self.embeddings: np.ndarray | None = None
        self.relation_embeddings: dict[str, np.ndarray] = {}
        self._docs: list[str] | None = None
        self._index: dict[str, int] | None = None

    # --- building -------------------------------------------------------------------------
    def add_node(self, node_id: str, layer: Layer, text: str, **data: Any) -> str:
        """Add a node (an existing id keeps its data); returns the id."""
        if node_id not in self.g:
            self.g.add_node(node_id, layer=str(layer), text=text, **data)
            self._docs = self._index = None
        return node_id

    def add_document(self, index: int, passage: Passage) -> str:
        """Add the document node of corpus passage `index`."""
        return self.add_node(
            doc_id(index), Layer.DOCUMENT, passage.key, doc_index=index, title=passage.title
        )

    def add_relation(
        self, src: str, dst: str, kind: RelationKind, text: str | None = None, doc: int | None = None
    ) -> None:
        """Add a typed edge; repeats of the same (src, dst, kind, text) merge their source docs."""
        if src not in self.g or dst not in self.g:
            raise KeyError(f"relation {src!r} -> {dst!r}: both nodes must exist")
        rel_text = text if text is not None else RELATION_TEXT[kind]
        key = f"{kind}:{rel_text}"
        if self.g.has_edge(src, dst, key):
            data = self.g.edges[src, dst, key]
        else:
            self.g.add_edge(src, dst, key=key, kind=str(kind), text=rel_text)
            data = self.g.edges[src, dst, key]
        if doc is not None:
            docs = data.setdefault("docs", [])
            if doc not in docs:
                docs.append(doc)

    # --- reading --------------------------------------------------------------------------
    @property
    def node_ids(self) -> list[str]:
        """All node ids, in insertion order (the order of embedding rows)."""
        return list(self.g.nodes)

    def index_of(self, node_id: str) -> int:
        """Row of a node in `node_ids` and `embeddings`."""
        if self._index is None:
            self._index = {n: i for i, n in enumerate(self.g.nodes)}
        return self._index[node_id]

    def layer(self, node_id: str) -> Layer:
        """The layer of a node."""
        return Layer(self.g.nodes[node_id]["layer"])

    def text(self, node_id: str) -> str:
        """The text of a node."""
        return str(self.g.nodes[node_id]["text"])

    def nodes(self, layer: Layer | None = None) -> Iterator[str]:
        """Node ids, optionally of one layer."""
        for n, data in self.g.nodes(data=True):
            if layer is None or data["layer"] == layer:
                yield n

    def documents(self) -> list[str]:
        """Document node ids ordered by corpus index."""
        if self._docs is None:
            docs = [(d["doc_index"], n) for n, d in self.g.nodes(data=True) if d["layer"] == Layer.DOCUMENT]
            self._docs = [n for _, n in sorted(docs)]
        return self._docs

    def passages(self) -> list[Passage]:
        """The corpus, rebuilt from document nodes in index order."""
        out = []
        for n in self.documents():
            data = self.g.nodes[n]
            title = data.get("title", "")
            text = data["text"]
            out.append(Passage(title=title, text=text[len(title) + 1 :]))
        return out

    def relations(self, kind: RelationKind | None = None) -> Iterable[tuple[str, str, dict[str, Any]]]:
        """Edges as (src, dst, data), optionally of one kind."""
        for u, v, data in self.g.edges(data=True):
            if kind is None or data["kind"] == kind:
                yield u, v, data

    def relation_texts(self) -> list[str]:
        """Distinct relation texts, sorted; position = relation id in the PyG view."""
        return sorted({str(d["text"]) for _, _, d in self.g.edges(data=True)})

    def stats(self) -> dict[str, Any]:
        """Node counts per layer and edge counts per relation kind."""
        layers = Counter(d["layer"] for _, d in self.g.nodes(data=True))
        kinds = Counter(d["kind"] for _, _, d in self.g.edges(data=True))
        return {
            "nodes": {str(layer): layers.get(layer, 0) for layer in LAYERS},
            "relations": {str(k): kinds.get(k, 0) for k in RelationKind},
            "relation_texts": len({d["text"] for _, _, d in self.g.edges(data=True)}),
        }

    def embedding(self, node_id: str) -> np.ndarray:
        """The text embedding of one node."""
        if self.embeddings is None:
            raise ValueError("this graph has no embeddings; build it with an embedder or load it from a folder")
        return self.embeddings[self.index_of(node_id)]

    def layer_matrix(self, layer: Layer) -> tuple[list[str], np.ndarray]:
        """Ids and embedding rows of every node of one layer."""
        import numpy as np

        ids = self.documents() if layer == Layer.DOCUMENT else list(self.nodes(layer))
        if self.embeddings is None:
            raise ValueError("this graph has no embeddings")
        rows = np.fromiter((self.index_of(n) for n in ids), dtype=np.int64, count=len(ids))
        return ids, self.embeddings[rows]

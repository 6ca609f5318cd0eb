"""Save and load a QuadGraph as a folder: the graph as gzipped JSON, embeddings in persistent chromadb.

Folder layout:
- `manifest.json`: format version, node/edge counts per layer, embedding size, sha256 of the graph file.
- `graph.json.gz`: nodes and edges with all their data, plus the graph's metadata.
- `chroma/`: a persistent chromadb database with one collection per layer (`quadgraph_<layer>`),
  ids = node ids, explicit embeddings (chromadb's default embedder is never used), metadata
  `row` = the node's row in the graph.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import networkx as nx

from graphs.errors import GraphStoreError
from graphs.quadgraph import LAYERS, Layer, QuadGraph

MANIFEST = "manifest.json"
GRAPH_FILE = "graph.json.gz"
CHROMA_DIR = "chroma"
FORMAT_VERSION = 1
_BATCH = 2000
RELATION_COLLECTION = "quadgraph_relations"


def collection_name(layer: Layer | str) -> str:
    """Name of the chromadb collection that holds one layer's embeddings."""
    return f"quadgraph_{layer}"


def chroma_client(path: str | Path) -> Any:
    """A persistent chromadb client with telemetry off."""
    import chromadb
    from chromadb.config import Settings

    return chromadb.PersistentClient(path=str(path), settings=Settings(anonymized_telemetry=False, allow_reset=True))


def _forget_client(path: Path) -> None:
    # chromadb caches one system per path; a rewritten folder must not be served from a stale one.
    try:
        from chromadb.api.shared_system_client import SharedSystemClient
    except ImportError:  # other chromadb versions: nothing cached to forget
        return
    cache = getattr(SharedSystemClient, "_identifier_to_system", None)
    if isinstance(cache, dict):
        cache.pop(str(path), None)


def save_graph(qg: QuadGraph, folder: str | Path, overwrite: bool = False) -> Path:
    """Write the graph folder; an existing graph folder is replaced only with overwrite=True."""
    import numpy as np

    if qg.embeddings is None:
        raise GraphStoreError("the graph has no embeddings to save; build it with an embedder")
    out = Path(folder)
    if out.exists():
        if not out.is_dir():
            raise GraphStoreError(f"{out} exists and is not a folder")
        if any(out.iterdir()):
            if not (out / MANIFEST).is_file():
                raise GraphStoreError(f"{out} is a non-empty folder that is not a graph folder; choose another path")
            if not overwrite:
                raise GraphStoreError(f"{out} already holds a graph; pass overwrite=True (--overwrite) to replace it")
            _forget_client((out / CHROMA_DIR).resolve())
            shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)

    payload = {
        "format_version": FORMAT_VERSION,
        "meta": qg.meta,
        "nodes": [[n, d] for n, d in qg.g.nodes(data=True)],
        "edges": [[u, v, k, d] for u, v, k, d in qg.g.edges(keys=True, data=True)],
    }
    raw = gzip.compress(json.dumps(payload, ensure_ascii=False).encode("utf-8"), compresslevel=6, mtime=0)
    (out / GRAPH_FILE).write_bytes(raw)

    client = chroma_client((out / CHROMA_DIR).resolve())
    counts: dict[str, int] = {}
    for layer in LAYERS:
        ids = list(qg.nodes(layer))
        counts[str(layer)] = len(ids)
        col = client.get_or_create_collection(
            collection_name(layer), embedding_function=None, configuration={"hnsw": {"space": "cosine"}}
        )
        for start in range(0, len(ids), _BATCH):
            chunk = ids[start : start + _BATCH]
            rows = [qg.index_of(n) for n in chunk]
            col.add(
                ids=chunk,
                embeddings=qg.embeddings[rows],
                metadatas=[{"row": r} for r in rows],
                documents=[qg.text(n)[:2000] for n in chunk],
            )
    rel_texts = qg.relation_texts()
    missing = [t for t in rel_texts if t not in qg.relation_embeddings]
    if missing:
        raise GraphStoreError(f"the graph lacks embeddings for {len(missing)} relation texts (e.g. {missing[0]!r})")
    col = client.get_or_create_collection(
        RELATION_COLLECTION, embedding_function=None, configuration={"hnsw": {"space": "cosine"}}
    )
    for start in range(0, len(rel_texts), _BATCH):
        chunk = rel_texts[start : start + _BATCH]
        col.add(
            ids=[f"rel:{start + i}" for i in range(len(chunk))],
            embeddings=np.stack([qg.relation_embeddings[t] for t in chunk]),
            documents=chunk,
        )
    manifest = {
        "format_version": FORMAT_VERSION,
        "nodes": qg.g.number_of_nodes(),
        "edges": qg.g.number_of_edges(),
        "layers": counts,
        "relations": len(rel_texts),
        "embedding_dim": int(qg.embeddings.shape[1]),
        "graph_sha256": hashlib.sha256(raw).hexdigest(),
    }
    (out / MANIFEST).write_text(json.dumps(manifest, indent=2), encoding="utf-8")
    qg.meta["folder"] = str(out.resolve())
    return out


def _read_manifest(folder: Path) -> dict[str, Any]:
    if not folder.exists():
        raise GraphStoreError(f"graph folder not found: {folder} (build one with `rein graph build`)")
    if not folder.is_dir():
        raise GraphStoreError(f"{folder} is not a graph folder")
    path = folder / MANIFEST
    if not path.is_file():
        raise GraphStoreError(f"{folder} is not a graph folder: {MANIFEST} is missing")
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise GraphStoreError(f"{path} is corrupted: {exc}") from None
    if not isinstance(manifest, dict) or manifest.get("format_version") != FORMAT_VERSION:
        raise GraphStoreError(
            f"{path}: unsupported graph format {manifest.get('format_version') if isinstance(manifest, dict) else '?'}; "
            f"this rein reads version {FORMAT_VERSION}; rebuild the graph"
        )
    return manifest


def load_graph(folder: str | Path) -> QuadGraph:
    """Read a graph folder written by save_graph; a missing or corrupted part raises GraphStoreError."""
    import numpy as np

    root = Path(folder)
    manifest = _read_manifest(root)
    gpath = root / GRAPH_FILE
    if not gpath.is_file():
        raise GraphStoreError(f"{root}: {GRAPH_FILE} is missing; rebuild the graph")
    raw = gpath.read_bytes()
    if hashlib.sha256(raw).hexdigest() != manifest.get("graph_sha256"):
        raise GraphStoreError(f"{gpath} is corrupted (checksum mismatch); rebuild the graph")
    try:
        payload = json.loads(gzip.decompress(raw).decode("utf-8"))
        g = nx.MultiDiGraph()
        for n, d in payload["nodes"]:
            g.add_node(n, **d)
        for u, v, k, d in payload["edges"]:
            g.add_edge(u, v, key=k, **d)
    except (OSError, EOFError, ValueError, KeyError, TypeError) as exc:
        raise GraphStoreError(f"{gpath} is corrupted: {exc}") from None
    qg = QuadGraph(g, meta=payload.get("meta", {}))
    if g.number_of_nodes() != manifest.get("nodes") or g.number_of_edges() != manifest.get("edges"):
        raise GraphStoreError(f"{root}: graph file and manifest disagree on node/edge counts; rebuild the graph")

    cdir = root / CHROMA_DIR
    if not cdir.is_dir():
        raise GraphStoreError(f"{root}: the embedding store {CHROMA_DIR}/ is missing; rebuild the graph")
    dim = int(manifest.get("embedding_dim", 0))
    matrix = np.zeros((g.number_of_nodes(), dim), dtype=np.float32)
    seen = 0
    try:
        client = chroma_client(cdir.resolve())
        for layer in LAYERS:
            want = manifest["layers"].get(str(layer), 0)
            col = client.get_collection(collection_name(layer), embedding_function=None)
            got = col.get(include=["embeddings"])
            if len(got["ids"]) != want:
                raise GraphStoreError(
                    f"{root}: layer {layer} has {len(got['ids'])} embeddings for {want} nodes; rebuild the graph"
                )
            if want:
                rows = [qg.index_of(n) for n in got["ids"]]
                matrix[rows] = np.asarray(got["embeddings"], dtype=np.float32)
            seen += want
        col = client.get_collection(RELATION_COLLECTION, embedding_function=None)
        got = col.get(include=["embeddings", "documents"])
        if len(got["ids"]) != manifest.get("relations"):
            raise GraphStoreError(f"{root}: relation embeddings are incomplete; rebuild the graph")
        qg.relation_embeddings = {
            t: np.asarray(v, dtype=np.float32) for t, v in zip(got["documents"], got["embeddings"], strict=True)
        }
        if set(qg.relation_embeddings) != set(qg.relation_texts()):
            raise GraphStoreError(f"{root}: relation embeddings do not match the graph's relations; rebuild the graph")
    except GraphStoreError:
        raise
    except KeyError as exc:
        raise GraphStoreError(f"{root}: embedding store lists a node the graph lacks ({exc})") from None
    except Exception as exc:  # chromadb raises many types for damaged databases
        raise GraphStoreError(f"{root}: the embedding store is unreadable ({type(exc).__name__}: {exc})") from None
    if seen != g.number_of_nodes():
        raise GraphStoreError(f"{root}: {seen} embeddings for {g.number_of_nodes()} nodes; rebuild the graph")
    qg.embeddings = matrix
    qg.meta["folder"] = str(root.resolve())
    return qg

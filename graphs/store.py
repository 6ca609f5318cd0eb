"""Save and load a QuadGraph as a folder: the graph as gzipped JSON, embeddings in chromadb.

Folder layout:
- `manifest.json`: format version, node/edge counts per layer, embedding size, sha256 of the graph file,
  and (when not the folder's own) where the embeddings are stored.
- `graph.json.gz`: nodes and edges with all their data, plus the graph's metadata.
- `chroma/`: a persistent chromadb database with one collection per layer (`quadgraph_<layer>`),
  ids = node ids, explicit embeddings (chromadb's default embedder is never used), metadata
  `row` = the node's row in the graph.

The embeddings can live elsewhere instead of `chroma/`: in another chromadb folder or on a Chroma
server (`chroma run`), chosen by a StoreLocation. There, several graphs share one database, so
their collections are named per graph (`quadgraph_<name>_<layer>`) and each carries the sha256 of
the graph file it belongs to.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import re
import shutil
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from agent.extras import needs_extra

with needs_extra("graphs", "QuadGraph retrieval"):
    import networkx as nx

from graphs.errors import GraphStoreError
from graphs.quadgraph import LAYERS, Layer, QuadGraph

MANIFEST = "manifest.json"
GRAPH_FILE = "graph.json.gz"
CHROMA_DIR = "chroma"
FORMAT_VERSION = 1
_BATCH = 2000
DEFAULT_PREFIX = "quadgraph"
RELATION_COLLECTION = f"{DEFAULT_PREFIX}_relations"
TOKEN_ENV = "REIN_CHROMA_TOKEN"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,62}$")


@dataclass
class StoreLocation:
    """Where a graph's embeddings live: a chromadb folder on disk, or a Chroma server."""

    path: Path | None = None
    """Folder of an embedded (persistent) chromadb; None for a server."""
    url: str | None = None
    """http(s) URL of a Chroma server, e.g. http://127.0.0.1:8001 (credentials go in `token`/`headers`)."""
    token: str | None = None
    """Bearer token for a server started with token auth (default: $REIN_CHROMA_TOKEN)."""
    headers: dict[str, str] = field(default_factory=dict)
    """Extra HTTP headers sent with every server request."""
    connect_timeout_s: float = 5.0
    """How long to wait for the server to accept a connection before giving up."""
    request_timeout_s: float = 120.0
    """How long one server request may take."""

    @property
    def is_server(self) -> bool:
        """True for a Chroma server, False for an embedded folder."""
        return self.url is not None

    def describe(self) -> str:
        """The location as a user wrote it (never includes the token)."""
        return self.url if self.url is not None else str(self.path)

    def endpoint(self) -> tuple[str, int, bool]:
        """Host, port and whether TLS is used (servers only)."""
        if self.url is None:
            raise ValueError("an embedded store has no endpoint")
        parts = urlsplit(self.url)
        ssl = parts.scheme == "https"
        return parts.hostname or "localhost", parts.port or (443 if ssl else 8000), ssl


def parse_store(value: str | Path | StoreLocation) -> StoreLocation:
    """A StoreLocation from a path or an http(s) URL (as given to `--store`)."""
    if isinstance(value, StoreLocation):
        return value
    text = str(value).strip()
    if not text:
        raise GraphStoreError("the store location is empty: give a folder or an http(s) URL")
    scheme = urlsplit(text).scheme.lower() if "://" in text else ""
    if not scheme:
        return StoreLocation(path=Path(text).expanduser().resolve())
    if scheme not in ("http", "https"):
        raise GraphStoreError(f"store {text!r}: use a folder or an http(s) URL of a Chroma server")
    parts = urlsplit(text)
    if parts.username or parts.password:
        raise GraphStoreError(f"store {parts.hostname}: put credentials in ${TOKEN_ENV}, not in the URL")
    if not parts.hostname:
        raise GraphStoreError(f"store {text!r} names no host")
    try:
        parts.port  # noqa: B018 - raises on a port that is not a number
    except ValueError as exc:
        raise GraphStoreError(f"store {text!r}: {exc}") from None
    return StoreLocation(url=f"{parts.scheme}://{parts.netloc}".rstrip("/"), token=os.environ.get(TOKEN_ENV) or None)


def collection_name(layer: Layer | str, prefix: str = DEFAULT_PREFIX) -> str:
    """Name of the chromadb collection that holds one layer's embeddings."""
    return f"{prefix}_{layer}"


def graph_name(folder: str | Path) -> str:
    """The default name of a graph in a shared store: its folder name, cut to what chromadb accepts."""
    name = re.sub(r"[^A-Za-z0-9_-]+", "-", Path(folder).resolve().name).strip("-_")[:63]
    return name or "graph"


def chroma_client(path: str | Path) -> Any:
    """A persistent chromadb client with telemetry off."""
    with needs_extra("graphs", "QuadGraph retrieval"):
        import chromadb
        from chromadb.config import Settings

    return chromadb.PersistentClient(path=str(path), settings=Settings(anonymized_telemetry=False, allow_reset=True))


def store_client(store: StoreLocation) -> Any:
    """A chromadb client for a location; an unreachable server raises GraphStoreError within the connect timeout."""
    if not store.is_server:
        assert store.path is not None
        return chroma_client(store.path)
    with needs_extra("graphs", "QuadGraph retrieval"):
        import chromadb
        from chromadb.config import Settings

    host, port, ssl = store.endpoint()
    # chromadb's HTTP client waits forever on connect; probe first so a dead address fails fast.
    try:
        socket.create_connection((host, port), timeout=store.connect_timeout_s).close()
    except OSError as exc:
        raise GraphStoreError(
            f"cannot reach the Chroma server at {store.describe()} ({exc}); start one with "
            f"`chroma run --path DIR --host {host} --port {port}` or check --store"
        ) from None
    headers = dict(store.headers)
    if store.token:
        headers.setdefault("Authorization", f"Bearer {store.token}")
    try:
        client = chromadb.HttpClient(
            host=host, port=port, ssl=ssl, headers=headers or None, settings=Settings(anonymized_telemetry=False)
        )
    except Exception as exc:  # chromadb reports a refused or rejected connection as ValueError and others
        raise GraphStoreError(f"the Chroma server at {store.describe()} refused the client: {exc}") from None
    session = getattr(getattr(client, "_server", None), "_session", None)
    if session is not None:
        import httpx

        session.timeout = httpx.Timeout(store.request_timeout_s, connect=store.connect_timeout_s)
    return client


def graph_store(qg: QuadGraph) -> tuple[StoreLocation, str]:
    """The store and collection prefix of a graph loaded from (or saved to) a folder."""
    store = qg.meta.get("store")
    prefix = qg.meta.get("collections", DEFAULT_PREFIX)
    if isinstance(store, StoreLocation):
        return store, str(prefix)
    folder = qg.meta.get("folder")
    if not folder:
        raise GraphStoreError("this graph was never saved, so it has no embedding store")
    return StoreLocation(path=Path(folder) / CHROMA_DIR), DEFAULT_PREFIX


def open_collection(qg: QuadGraph, layer: Layer) -> Any:
    """The chromadb collection of one layer of a saved graph, in whichever store holds it."""
    store, prefix = graph_store(qg)
    name = collection_name(layer, prefix)
    try:
        return store_client(store).get_collection(name, embedding_function=None)
    except GraphStoreError:
        raise
    except Exception as exc:
        raise GraphStoreError(f"store {store.describe()}: collection {name} is unavailable ({exc})") from None


def _forget_client(path: Path) -> None:
    # chromadb caches one system per path; a rewritten folder must not be served from a stale one.
    try:
        from chromadb.api.shared_system_client import SharedSystemClient
    except ImportError:  # other chromadb versions: nothing cached to forget
        return
    cache = getattr(SharedSystemClient, "_identifier_to_system", None)
    if isinstance(cache, dict):
        cache.pop(str(path), None)


def _prefix_names(prefix: str) -> list[str]:
    return [collection_name(layer, prefix) for layer in LAYERS] + [collection_name("relations", prefix)]


def _claim_collections(client: Any, store: StoreLocation, prefix: str, name: str, overwrite: bool) -> None:
    # A shared store may already hold this graph name (a rebuild, or another folder of the same name).
    existing = {getattr(c, "name", c) for c in client.list_collections()}
    taken = [n for n in _prefix_names(prefix) if n in existing]
    if taken and not overwrite:
        raise GraphStoreError(
            f"store {store.describe()} already holds a graph named {name!r}; pass overwrite=True (--overwrite) "
            "to replace it, or choose another name (--store-name)"
        )
    for n in taken:
        client.delete_collection(n)


def save_graph(
    qg: QuadGraph,
    folder: str | Path,
    overwrite: bool = False,
    store: str | Path | StoreLocation | None = None,
    name: str | None = None,
) -> Path:
    """Write the graph folder; an existing graph folder is replaced only with overwrite=True.

    store: where the embeddings go (default: the folder's own `chroma/`); a path or an http(s) URL
    of a Chroma server. name: the graph's name there (default: the folder name); collections are
    `quadgraph_<name>_<layer>`, so several graphs share one store.
    """
    import numpy as np

    if qg.embeddings is None:
        raise GraphStoreError("the graph has no embeddings to save; build it with an embedder")
    out = Path(folder)
    location = parse_store(store) if store is not None else None
    if name is not None and not _NAME.match(name):
        raise GraphStoreError(f"graph name {name!r}: use up to 63 letters, digits, '-' or '_'")
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

    # Where a loaded graph lives is not part of the graph: re-saving elsewhere must not carry it along.
    meta = {k: v for k, v in qg.meta.items() if k not in ("folder", "store", "collections")}
    payload = {
        "format_version": FORMAT_VERSION,
        "meta": meta,
        "nodes": [[n, d] for n, d in qg.g.nodes(data=True)],
        "edges": [[u, v, k, d] for u, v, k, d in qg.g.edges(keys=True, data=True)],
    }
    raw = gzip.compress(json.dumps(payload, ensure_ascii=False).encode("utf-8"), compresslevel=6, mtime=0)
    sha = hashlib.sha256(raw).hexdigest()
    (out / GRAPH_FILE).write_bytes(raw)

    if location is None:
        chroma_path = (out / CHROMA_DIR).resolve()
        location, prefix = StoreLocation(path=chroma_path), DEFAULT_PREFIX
        client = chroma_client(chroma_path)
    else:
        gname = name or graph_name(out)
        prefix = f"{DEFAULT_PREFIX}_{gname}"
        client = store_client(location)
        _claim_collections(client, location, prefix, gname, overwrite)
    space = {"hnsw": {"space": "cosine"}}
    owner = {"graph_sha256": sha}
    counts: dict[str, int] = {}
    try:
        for layer in LAYERS:
            ids = list(qg.nodes(layer))
            counts[str(layer)] = len(ids)
            col = client.get_or_create_collection(
                collection_name(layer, prefix), embedding_function=None, configuration=space, metadata=owner
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
            collection_name("relations", prefix), embedding_function=None, configuration=space, metadata=owner
        )
        for start in range(0, len(rel_texts), _BATCH):
            chunk = rel_texts[start : start + _BATCH]
            col.add(
                ids=[f"rel:{start + i}" for i in range(len(chunk))],
                embeddings=np.stack([qg.relation_embeddings[t] for t in chunk]),
                documents=chunk,
            )
    except GraphStoreError:
        raise
    except Exception as exc:  # a server that goes away mid-write, a full disk
        raise GraphStoreError(f"writing embeddings to {location.describe()} failed ({type(exc).__name__}: {exc})") from None
    manifest: dict[str, Any] = {
        "format_version": FORMAT_VERSION,
        "nodes": qg.g.number_of_nodes(),
        "edges": qg.g.number_of_edges(),
        "layers": counts,
        "relations": len(rel_texts),
        "embedding_dim": int(qg.embeddings.shape[1]),
        "graph_sha256": sha,
    }
    if prefix != DEFAULT_PREFIX:
        manifest["store"] = {"location": location.describe(), "collections": prefix}
    (out / MANIFEST).write_text(json.dumps(manifest, indent=2), encoding="utf-8")
    qg.meta["folder"] = str(out.resolve())
    qg.meta["store"], qg.meta["collections"] = location, prefix
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


def load_graph(folder: str | Path, store: str | Path | StoreLocation | None = None) -> QuadGraph:
    """Read a graph folder written by save_graph; a missing or corrupted part raises GraphStoreError.

    store: where to read the embeddings (default: where save_graph put them, as the manifest says);
    give it when the server moved or needs a token or headers.
    """
    import numpy as np

    root = Path(folder)
    manifest = _read_manifest(root)
    gpath = root / GRAPH_FILE
    if not gpath.is_file():
        raise GraphStoreError(f"{root}: {GRAPH_FILE} is missing; rebuild the graph")
    raw = gpath.read_bytes()
    sha = hashlib.sha256(raw).hexdigest()
    if sha != manifest.get("graph_sha256"):
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

    recorded = manifest.get("store") if isinstance(manifest.get("store"), dict) else None
    prefix = str(recorded["collections"]) if recorded else DEFAULT_PREFIX
    if store is not None:
        location = parse_store(store)
    elif recorded:
        location = parse_store(str(recorded["location"]))
    else:
        cdir = root / CHROMA_DIR
        if not cdir.is_dir():
            raise GraphStoreError(f"{root}: the embedding store {CHROMA_DIR}/ is missing; rebuild the graph")
        location = StoreLocation(path=cdir.resolve())
    where = location.describe() if location.is_server or recorded else str(root)
    dim = int(manifest.get("embedding_dim", 0))
    matrix = np.zeros((g.number_of_nodes(), dim), dtype=np.float32)
    seen = 0
    client = store_client(location)
    try:
        for layer in LAYERS:
            want = manifest["layers"].get(str(layer), 0)
            col = _owned_collection(client, collection_name(layer, prefix), sha, where, root)
            got = col.get(include=["embeddings"])
            if len(got["ids"]) != want:
                raise GraphStoreError(
                    f"{where}: layer {layer} has {len(got['ids'])} embeddings for {want} nodes; rebuild the graph"
                )
            if want:
                rows = [qg.index_of(n) for n in got["ids"]]
                matrix[rows] = np.asarray(got["embeddings"], dtype=np.float32)
            seen += want
        col = _owned_collection(client, collection_name("relations", prefix), sha, where, root)
        got = col.get(include=["embeddings", "documents"])
        if len(got["ids"]) != manifest.get("relations"):
            raise GraphStoreError(f"{where}: relation embeddings are incomplete; rebuild the graph")
        qg.relation_embeddings = {
            t: np.asarray(v, dtype=np.float32) for t, v in zip(got["documents"], got["embeddings"], strict=True)
        }
        if set(qg.relation_embeddings) != set(qg.relation_texts()):
            raise GraphStoreError(f"{where}: relation embeddings do not match the graph's relations; rebuild the graph")
    except GraphStoreError:
        raise
    except KeyError as exc:
        raise GraphStoreError(f"{where}: embedding store lists a node the graph lacks ({exc})") from None
    except Exception as exc:  # chromadb raises many types for damaged databases
        raise GraphStoreError(f"{where}: the embedding store is unreadable ({type(exc).__name__}: {exc})") from None
    if seen != g.number_of_nodes():
        raise GraphStoreError(f"{where}: {seen} embeddings for {g.number_of_nodes()} nodes; rebuild the graph")
    qg.embeddings = matrix
    qg.meta["folder"] = str(root.resolve())
    qg.meta["store"], qg.meta["collections"] = location, prefix
    return qg


def _owned_collection(client: Any, name: str, sha: str, where: str, root: Path) -> Any:
    try:
        col = client.get_collection(name, embedding_function=None)
    except Exception as exc:
        if "does not exist" not in str(exc) and type(exc).__name__ not in ("NotFoundError", "InvalidCollectionException"):
            raise
        raise GraphStoreError(
            f"{where} has no collection {name} for graph {root}; build it there "
            f"(`rein graph build ... --store {where}`) or pass the --store it was built into"
        ) from None
    # A shared store may hold a newer build under the same name; stale embeddings must not be mixed in.
    owner = (col.metadata or {}).get("graph_sha256")
    if owner is not None and owner != sha:
        raise GraphStoreError(
            f"{where}: collection {name} belongs to another build of this graph name; rebuild {root} into it"
        )
    return col

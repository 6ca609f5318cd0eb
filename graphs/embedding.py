"""Text embeddings for the graph: rein's MiniLM embedder behind an optional on-disk cache.

Embedding a corpus on two CPU cores takes minutes, so vectors are cached in SQLite, keyed by the
model name and the sha1 of the text; a second build of the same corpus embeds nothing.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

Embedder = Callable[[list[str]], "np.ndarray"]
"""A function from texts to a float32 (n, dim) array of L2-normalised rows."""

MODEL_TAG = "all-MiniLM-L6-v2"


def minilm_embedder() -> Embedder:
    """rein's bundled MiniLM embedder (`agent.embeddings.embed_texts`)."""
    from agent.embeddings import embed_texts

    return embed_texts


def default_cache_path() -> Path:
    """`$REIN_EMBED_CACHE`, or ~/.cache/rein/embeddings.sqlite."""
    env = os.environ.get("REIN_EMBED_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "rein" / "embeddings.sqlite"


class CachedEmbedder:
    """Wraps an embedder with a SQLite cache of vectors (one row per distinct text)."""

    def __init__(self, embedder: Embedder | None = None, path: str | Path | None = None, tag: str = MODEL_TAG) -> None:
        self._embedder = embedder
        self.path = Path(path) if path is not None else default_cache_path()
        self.tag = tag
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def _connect(self) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        con = sqlite3.connect(self.path, timeout=30)
        con.execute("PRAGMA journal_mode=WAL")
        con.execute("CREATE TABLE IF NOT EXISTS vec (key TEXT PRIMARY KEY, dim INTEGER, data BLOB)")
        return con

    def _key(self, text: str) -> str:
        return hashlib.sha1(f"{self.tag}\0{text}".encode()).hexdigest()

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        import numpy as np

        texts = list(texts)
        if not texts:
            return np.zeros((0, 384), dtype=np.float32)
        keys = [self._key(t) for t in texts]
        found: dict[str, np.ndarray] = {}
        with self._lock:
            con = self._connect()
            try:
                unique = list(dict.fromkeys(keys))
                for start in range(0, len(unique), 500):
                    chunk = unique[start : start + 500]
                    marks = ",".join("?" * len(chunk))
                    for key, dim, blob in con.execute(f"SELECT key, dim, data FROM vec WHERE key IN ({marks})", chunk):
                        vec = np.frombuffer(blob, dtype=np.float32)
                        if vec.shape[0] == dim:
                            found[key] = vec
                missing = [i for i, k in enumerate(keys) if k not in found]
                todo = list(dict.fromkeys(texts[i] for i in missing))
                self.hits += len(texts) - len(missing)
                self.misses += len(todo)
                if todo:
                    embedder = self._embedder or minilm_embedder()
                    vecs = np.asarray(embedder(todo), dtype=np.float32)
                    rows = [(self._key(t), int(v.shape[0]), v.tobytes()) for t, v in zip(todo, vecs, strict=True)]
                    con.executemany("INSERT OR REPLACE INTO vec VALUES (?, ?, ?)", rows)
                    con.commit()
                    for (key, _, _), v in zip(rows, vecs, strict=True):
                        found[key] = v
            finally:
                con.close()
        return np.stack([found[k] for k in keys]).astype(np.float32, copy=False)


def resolve_embedder(embedder: Embedder | None = None, cache: str | Path | bool | None = True) -> Embedder:
    """The embedder to use: a given one as is, else MiniLM cached on disk (unless cache is False/None)."""
    if embedder is not None:
        return embedder
    if cache is False or cache is None:
        return minilm_embedder()
    return CachedEmbedder(None, None if cache is True else cache)

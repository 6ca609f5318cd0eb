"""The offline router: a softmax classifier over MiniLM embeddings and content features.

The weights ship with the package (`agent/routing/data/offline_router.npz`) and are rebuilt by
`python -m agent.routing.train`. Nothing is read from outside the package at run time.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agent.errors import UserFacingError
from agent.extras import needs_extra
from agent.plugin_api import MODES, InterventionContext, Mode, ModeDecision
from agent.routing.features import FEATURE_NAMES, query_features

if TYPE_CHECKING:  # numpy is the local extra's; SelfRouter imports this module in the core
    import numpy as np

DATA_DIR = Path(__file__).resolve().parent / "data"
DEFAULT_WEIGHTS = DATA_DIR / "offline_router.npz"


@dataclass
class RouterWeights:
    """A trained linear router: logits = [embedding · embed_scale, standardised features] @ W + b."""

    W: np.ndarray
    """Weights, shape (embedding_dim + n_features, 3), columns in MODES order."""
    b: np.ndarray
    """Biases, shape (3,)."""
    feature_mean: np.ndarray
    """Training mean of each hand-built feature."""
    feature_std: np.ndarray
    """Training standard deviation of each hand-built feature (zeros replaced by 1)."""
    embed_scale: float = 1.0
    """Multiplier on the embedding block (0 means the router uses features only)."""
    embedding_dim: int = 384
    """Width of the embedding block."""
    meta: dict[str, Any] = field(default_factory=dict)
    """Training provenance: data files, sizes, hyperparameters, dev accuracy."""

    def inputs(self, embeddings: np.ndarray, features: np.ndarray) -> np.ndarray:
        """The classifier's input rows."""
        import numpy as np

        z = (features - self.feature_mean) / self.feature_std
        if self.embedding_dim == 0:
            return z.astype(np.float32)
        return np.concatenate([embeddings * self.embed_scale, z], axis=1).astype(np.float32)

    def proba(self, embeddings: np.ndarray, features: np.ndarray) -> np.ndarray:
        """Per-mode probabilities (n, 3)."""
        import numpy as np

        logits = self.inputs(embeddings, features) @ self.W + self.b
        logits -= logits.max(axis=1, keepdims=True)
        e = np.exp(logits)
        return e / e.sum(axis=1, keepdims=True)

    def save(self, path: str | Path) -> None:
        """Write the weights as a compressed npz (metadata as JSON text)."""
        import numpy as np

        np.savez_compressed(
            path,
            W=self.W.astype(np.float32),
            b=self.b.astype(np.float32),
            feature_mean=self.feature_mean.astype(np.float32),
            feature_std=self.feature_std.astype(np.float32),
            embed_scale=np.float32(self.embed_scale),
            embedding_dim=np.int32(self.embedding_dim),
            meta=np.array(json.dumps(self.meta)),
        )

    @classmethod
    def load(cls, path: str | Path) -> RouterWeights:
        """Read and check weights written by `save`."""
        with needs_extra("local", "the offline mode router"):
            import numpy as np

        path = Path(path)
        if not path.is_file():
            raise UserFacingError(f"router weights not found: {path} (rebuild with `python -m agent.routing.train`)")
        try:
            with np.load(path, allow_pickle=False) as data:
                weights = cls(
                    W=data["W"],
                    b=data["b"],
                    feature_mean=data["feature_mean"],
                    feature_std=data["feature_std"],
                    embed_scale=float(data["embed_scale"]),
                    embedding_dim=int(data["embedding_dim"]),
                    meta=json.loads(str(data["meta"])),
                )
        except (OSError, ValueError, KeyError, json.JSONDecodeError) as exc:
            raise UserFacingError(f"router weights {path} are unreadable: {exc}") from None
        n_features = len(FEATURE_NAMES)
        expected = (weights.embedding_dim + n_features, len(MODES))
        if weights.W.shape != expected or weights.b.shape != (len(MODES),):
            raise UserFacingError(
                f"router weights {path} have shape {weights.W.shape}, expected {expected}; "
                "they were trained for other features (rebuild with `python -m agent.routing.train`)"
            )
        if weights.meta.get("features") not in (None, list(FEATURE_NAMES)):
            raise UserFacingError(f"router weights {path} were trained on other features; rebuild them")
        if weights.feature_mean.shape != (n_features,) or weights.feature_std.shape != (n_features,):
            raise UserFacingError(f"router weights {path} have a malformed feature scaler")
        return weights


def last_user_text(ctx: InterventionContext) -> str:
    """The text a router reads: the latest user message of the dialogue."""
    for m in reversed(ctx.dialogue):
        if m.role == "user":
            return m.text
    return ""


class OfflineRouter:
    """Routes a query with the shipped classifier; returns per-mode probabilities."""

    name = "offline"

    def __init__(self, weights: str | Path | RouterWeights | None = None) -> None:
        self.weights = weights if isinstance(weights, RouterWeights) else RouterWeights.load(weights or DEFAULT_WEIGHTS)

    def predict_proba(self, queries: Sequence[str]) -> np.ndarray:
        """Probabilities (n, 3) in MODES order: instant, reasoning, agentic."""
        import numpy as np

        queries = list(queries)
        if not queries:
            return np.zeros((0, len(MODES)), dtype=np.float32)
        features = query_features(queries)
        if self.weights.embedding_dim:
            from agent.embeddings import embed_texts

            embeddings = embed_texts(queries)
        else:
            embeddings = np.zeros((len(queries), 0), dtype=np.float32)
        return self.weights.proba(embeddings, features)

    def scores(self, query: str) -> dict[str, float]:
        """Per-mode probabilities of one query."""
        row = self.predict_proba([query])[0]
        return {m: round(float(p), 4) for m, p in zip(MODES, row, strict=True)}

    def route_sync(self, query: str) -> ModeDecision:
        """The most probable mode of a query."""
        scores = self.scores(query)
        mode: Mode = max(MODES, key=lambda m: scores[m])
        return ModeDecision(mode, reason="offline router", scores=scores)

    async def route(self, query: str) -> ModeDecision:
        """route_sync off the event loop (embedding is CPU-bound)."""
        return await asyncio.to_thread(self.route_sync, query)

    async def decide(self, ctx: InterventionContext) -> ModeDecision:
        """Pick the mode of the current turn from its latest user message."""
        return await self.route(last_user_text(ctx))


__all__ = ["DEFAULT_WEIGHTS", "OfflineRouter", "RouterWeights", "last_user_text"]

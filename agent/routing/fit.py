"""Fitting the offline router: augmentation by neutral reframings, softmax regression, accuracy.

Shared by the source-label trainer (agent/routing/train.py) and the oracle-label trainer
(agent/routing/oracle_train.py).

Why augmentation: in the routing data each mode comes from one source with its own surface style,
so a classifier can score near 100% by recognising the style. Every training query is therefore
also shown under framings drawn from one common pool (a story prefix, a service-desk frame, first
person instead of second, a terse noun phrase), applied to all three modes alike, so that framing
carries no label information and the classifier has to use the content.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from agent.plugin_api import MODES
from agent.routing.features import FEATURE_NAMES, query_features
from agent.routing.offline import RouterWeights
from agent.routing.router_eval import LabeledQuery, score_routes
from agent.softmax import fit_adam

SEED = 20250601

# Framings shared by all modes. They were written for augmentation and deliberately differ from
# the probe set's wording, so probe accuracy is not inflated by template overlap.
_STORY_PREFIXES = (
    "I was going through some old notes from a class I took years ago and found this written in the margin.",
    "A friend sent this to our group chat last night and nobody could settle it.",
    "We were on a long bus ride with the kids and started quizzing each other to pass the time.",
    "I'm helping my nephew with a pile of homework this weekend and we got stuck on one.",
    "This came up while I was waiting in line at the post office this morning.",
    "My coworker and I made a small bet about this during lunch today.",
)
_FRAMES = (
    "You want to know the answer to this: {q}",
    "You are contacting the help desk and ask: {q}",
    "Hello, I hope you can help me. {q}",
    "I need a hand with something. {q}",
    "Quick one: {q}",
)
_SECOND_TO_FIRST = (
    (r"\bYou are\b", "I am"), (r"\byou are\b", "I am"), (r"\bYou're\b", "I'm"), (r"\byou're\b", "I'm"),
    (r"\bYour\b", "My"), (r"\byour\b", "my"), (r"\byourself\b", "myself"),
    (r"\bYou\b", "I"), (r"\byou\b", "I"),
)
_WH_HEAD = re.compile(r"^(?:what|who|which|where|when)\s+(?:is|was|are|were|did|does|do)\s+(?:the\s+)?", re.I)


def _first_person(q: str) -> str | None:
    out = q
    for pattern, repl in _SECOND_TO_FIRST:
        out = re.sub(pattern, repl, out)
    return out if out != q else None


def _terse(q: str, mode: str) -> str | None:
    # A word problem cut to its last sentence loses the numbers it needs, so it is never shortened.
    if mode == "reasoning":
        return None
    first = re.split(r"(?<=[.?!])\s+", q.strip(), maxsplit=1)[0]
    short = _WH_HEAD.sub("", first)
    if short != first:
        return short[:1].upper() + short[1:]
    return first if first != q.strip() else None


def augment(rows: list[LabeledQuery], copies: int, seed: int = SEED) -> list[LabeledQuery]:
    """Each row plus up to `copies` reframed versions with the same label."""
    rng = random.Random(seed)
    out = list(rows)
    for row in rows:
        q, mode = row.query, row.mode
        candidates = [
            f"{rng.choice(_STORY_PREFIXES)} {q}",
            rng.choice(_FRAMES).format(q=q),
            _first_person(q),
            _terse(q, mode),
        ]
        options = [c for c in candidates if c]
        rng.shuffle(options)
        out.extend(LabeledQuery(c, mode, {"augmented": True}) for c in options[:copies])
    return out


@dataclass(frozen=True)
class RouterTrainConfig:
    """Hyperparameters of one training run."""

    use_embeddings: bool = True
    """Include the MiniLM block."""
    use_features: bool = True
    """Include the hand-built content features (when False their weights are fixed at zero)."""
    augment_copies: int = 2
    """Reframed copies per training query (0: no augmentation)."""
    embed_scale: float = 4.0
    """Multiplier on the embedding block: larger lets the embedding dominate under the same L2."""
    l2: float = 1e-3
    """L2 penalty on the weights."""
    epochs: int = 600
    """Full-batch Adam steps."""
    lr: float = 0.05
    """Adam learning rate."""


def fit(rows: list[LabeledQuery], embeddings: np.ndarray, config: RouterTrainConfig) -> RouterWeights:
    """Full-batch softmax regression with L2, by Adam (agent.softmax.fit_adam)."""
    features = query_features([r.query for r in rows])
    mean = features.mean(axis=0)
    std = features.std(axis=0)
    std[std < 1e-6] = 1.0
    dim = embeddings.shape[1] if config.use_embeddings else 0
    weights = RouterWeights(
        W=np.zeros((dim + len(FEATURE_NAMES), len(MODES)), dtype=np.float32),
        b=np.zeros(len(MODES), dtype=np.float32),
        feature_mean=mean,
        feature_std=std,
        embed_scale=config.embed_scale if config.use_embeddings else 0.0,
        embedding_dim=dim,
    )
    X = weights.inputs(embeddings[:, :dim], features).astype(np.float64)
    y = np.array([MODES.index(r.mode) for r in rows])
    mask = np.ones(X.shape[1])
    if not config.use_features:
        mask[dim:] = 0.0
    W = np.zeros(weights.W.shape)
    b = np.zeros(len(MODES))
    # fit_adam's l2 is the penalty's gradient coefficient; this loss is l2 · ‖W‖².
    fit_adam([(W, b)], X, y, epochs=config.epochs, lr=config.lr, l2=2 * config.l2, input_mask=mask)
    weights.W = W.astype(np.float32)
    weights.b = b.astype(np.float32)
    return weights


def accuracy(weights: RouterWeights, rows: list[LabeledQuery], embed: Any) -> dict[str, Any]:
    """Accuracy overall and per mode of `weights` on `rows`, embedding with `embed`."""
    queries = [r.query for r in rows]
    emb = embed(queries)[:, : weights.embedding_dim]
    proba = weights.proba(emb, query_features(queries))
    predicted = [MODES[i] for i in proba.argmax(axis=1)]
    report = score_routes([r.mode for r in rows], predicted)
    return {"accuracy": report.accuracy, "per_mode": {m: report.per_mode[m]["accuracy"] for m in MODES}}

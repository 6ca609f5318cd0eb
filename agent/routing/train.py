"""Train the offline router and write the shipped weights.

    python -m agent.routing.train            # rebuild agent/routing/data/offline_router.npz
    python -m agent.routing.train --ablation # also report the variants (no features, no augmentation…)
    python -m agent.routing.train --labels labels.jsonl   # on oracle labels: agent/routing/data/oracle_router.npz

With --labels it trains on the oracle labels of a labelling run instead (agent/routing/oracle_train.py).

Reads `routing_train.jsonl` (and `routing_dev.jsonl` for the report) from ../shared/data/routing
relative to the repository, or from --data-dir. Only this script reads those files; the router
reads the weights file alone.

Why augmentation: in the routing data each mode comes from one source with its own surface style,
so a classifier can score near 100% by recognising the style. Every training query is therefore
also shown under framings drawn from one common pool (a story prefix, a service-desk frame, first
person instead of second, a terse noun phrase), applied to all three modes alike, so that framing
carries no label information and the classifier has to use the content.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agent.plugin_api import MODES
from agent.routing.features import FEATURE_NAMES, query_features
from agent.routing.offline import DATA_DIR, DEFAULT_WEIGHTS, RouterWeights
from agent.routing.router_eval import LabeledQuery, load_labeled, score_routes
from agent.softmax import fit_adam

SEED = 20250601
REPO = Path(__file__).resolve().parents[2]
DEFAULT_DATA_DIR = (REPO / ".." / "shared" / "data" / "routing").resolve()
PROBE = DATA_DIR / "probe.jsonl"

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


def _accuracy(weights: RouterWeights, rows: list[LabeledQuery], embed: Any) -> dict[str, Any]:
    queries = [r.query for r in rows]
    emb = embed(queries)[:, : weights.embedding_dim]
    proba = weights.proba(emb, query_features(queries))
    predicted = [MODES[i] for i in proba.argmax(axis=1)]
    report = score_routes([r.mode for r in rows], predicted)
    return {"accuracy": report.accuracy, "per_mode": {m: report.per_mode[m]["accuracy"] for m in MODES}}


def train(data_dir: Path, config: RouterTrainConfig, probe: Path | None = PROBE) -> tuple[RouterWeights, dict[str, Any]]:
    """Train on routing_train.jsonl; report accuracy on train, dev and the probe set."""
    from agent.embeddings import embed_texts

    train_rows = load_labeled(data_dir / "routing_train.jsonl")
    rows = augment(train_rows, config.augment_copies) if config.augment_copies else train_rows
    embeddings = embed_texts([r.query for r in rows])
    weights = fit(rows, embeddings, config)
    results: dict[str, Any] = {"train": _accuracy(weights, train_rows, embed_texts)}
    dev_path = data_dir / "routing_dev.jsonl"
    if dev_path.is_file():
        results["dev"] = _accuracy(weights, load_labeled(dev_path), embed_texts)
    if probe is not None and probe.is_file():
        results["probe"] = _accuracy(weights, load_labeled(probe), embed_texts)
    weights.meta = {
        "trained_on": "routing_train.jsonl",
        "train_queries": len(train_rows),
        "training_rows": len(rows),
        "features": list(FEATURE_NAMES),
        "modes": list(MODES),
        "config": config.__dict__,
        "seed": SEED,
        "results": results,
    }
    return weights, results


ABLATIONS: dict[str, RouterTrainConfig] = {
    "shipped (embeddings + features + augmentation)": RouterTrainConfig(),
    "embeddings only, no augmentation": RouterTrainConfig(use_features=False, augment_copies=0),
    "embeddings + features, no augmentation": RouterTrainConfig(augment_copies=0),
    "embeddings + augmentation, no features": RouterTrainConfig(use_features=False),
    "features only + augmentation": RouterTrainConfig(use_embeddings=False),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m agent.routing.train", description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR, help="folder with routing_train.jsonl")
    parser.add_argument("--out", type=Path, default=DEFAULT_WEIGHTS, help="where to write the weights")
    parser.add_argument("--ablation", action="store_true", help="also train and report the variants (not saved)")
    parser.add_argument("--labels", type=Path, default=None,
                        help="train on this oracle labels file instead (writes agent/routing/data/oracle_router.npz)")
    parser.add_argument("--model", default=None, help="with --labels: whose rows (default: the file's only model)")
    parser.add_argument("--none", choices=("drop", "cheapest"), default="drop",
                        help="with --labels: tasks no mode solved are dropped (default) or labelled with the cheapest mode")
    args = parser.parse_args(argv)
    if args.labels is not None:
        return _main_labels(args, parser)
    if not (args.data_dir / "routing_train.jsonl").is_file():
        print(f"routing_train.jsonl not found in {args.data_dir}; pass --data-dir", file=sys.stderr)
        return 2
    configs = ABLATIONS if args.ablation else {"shipped (embeddings + features + augmentation)": RouterTrainConfig()}
    summary: dict[str, Any] = {}
    for name, config in configs.items():
        weights, results = train(args.data_dir, config)
        summary[name] = results
        if config == RouterTrainConfig():
            weights.save(args.out)
            summary[name]["saved"] = str(args.out)
    print(json.dumps(summary, indent=2))
    return 0


def _main_labels(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from agent.errors import UserFacingError
    from agent.routing.oracle_train import ORACLE_WEIGHTS, train_on_labels

    if args.ablation:
        parser.error("--ablation is for the source-label router; leave it out with --labels")
    out = args.out if args.out != DEFAULT_WEIGHTS else ORACLE_WEIGHTS  # never overwrite the source-label router
    try:
        weights, meta = train_on_labels(args.labels, args.model, args.none)
    except UserFacingError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    out.parent.mkdir(parents=True, exist_ok=True)
    weights.save(out)
    print(json.dumps({**{k: meta[k] for k in ("model", "none", "train_rows", "train_queries", "label_counts",
                                               "validation_rows", "success", "success_counts", "mode_costs",
                                               "results")}, "saved": str(out)}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Train the offline router and write the shipped weights.

    python -m agent.routing.train            # rebuild agent/routing/data/offline_router.npz
    python -m agent.routing.train --ablation # also report the variants (no features, no augmentation…)
    python -m agent.routing.train --labels labels.jsonl   # on oracle labels: agent/routing/data/oracle_router.npz
    python -m agent.routing.train --labels labels.jsonl --target frontier   # on the frontier routing's modes

With --labels it trains on the oracle labels of a labelling run instead (agent/routing/oracle_train.py).

Reads `routing_train.jsonl` (and `routing_dev.jsonl` for the report) from ../shared/data/routing
relative to the repository, or from --data-dir. Only this script reads those files; the router
reads the weights file alone.

The fitting itself (augmentation, softmax regression) is in agent/routing/fit.py.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from agent.plugin_api import MODES
from agent.routing.features import FEATURE_NAMES
from agent.routing.fit import SEED, RouterTrainConfig, accuracy, augment, fit
from agent.routing.offline import DATA_DIR, DEFAULT_WEIGHTS, RouterWeights
from agent.routing.router_eval import load_labeled

REPO = Path(__file__).resolve().parents[2]
DEFAULT_DATA_DIR = (REPO / ".." / "shared" / "data" / "routing").resolve()
PROBE = DATA_DIR / "probe.jsonl"


def train(data_dir: Path, config: RouterTrainConfig, probe: Path | None = PROBE) -> tuple[RouterWeights, dict[str, Any]]:
    """Train on routing_train.jsonl; report accuracy on train, dev and the probe set."""
    from agent.embeddings import embed_texts

    train_rows = load_labeled(data_dir / "routing_train.jsonl")
    rows = augment(train_rows, config.augment_copies) if config.augment_copies else train_rows
    embeddings = embed_texts([r.query for r in rows])
    weights = fit(rows, embeddings, config)
    results: dict[str, Any] = {"train": accuracy(weights, train_rows, embed_texts)}
    dev_path = data_dir / "routing_dev.jsonl"
    if dev_path.is_file():
        results["dev"] = accuracy(weights, load_labeled(dev_path), embed_texts)
    if probe is not None and probe.is_file():
        results["probe"] = accuracy(weights, load_labeled(probe), embed_texts)
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
                        help="train on this oracle labels file instead (writes agent/routing/data/oracle_router.npz for "
                        "the 1.5B's labels, oracle_router.<model>.npz for another model's)")
    parser.add_argument("--model", default=None, help="with --labels: whose rows (default: the file's only model)")
    parser.add_argument("--none", choices=("drop", "cheapest"), default="drop",
                        help="with --labels: tasks no mode solved are dropped (default) or labelled with the cheapest mode")
    parser.add_argument("--target", choices=("oracle", "frontier"), default="oracle",
                        help="with --labels: learn the oracle label (default) or each task's mode in the frontier routing")
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
    from agent.routing.oracle_train import oracle_weights_path, train_on_labels

    if args.ablation:
        parser.error("--ablation is for the source-label router; leave it out with --labels")
    try:
        weights, meta = train_on_labels(args.labels, args.model, args.none, target=args.target)
    except UserFacingError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    # Never the source-label router's file: by default, the labelled model's own oracle router.
    out = args.out if args.out != DEFAULT_WEIGHTS else oracle_weights_path(meta["model"])
    out.parent.mkdir(parents=True, exist_ok=True)
    weights.save(out)
    print(json.dumps({**{k: meta[k] for k in ("model", "target", "none", "train_rows", "train_queries", "label_counts",
                                               "validation_rows", "success", "success_counts", "mode_costs", "threshold",
                                               "results")}, "saved": str(out)}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

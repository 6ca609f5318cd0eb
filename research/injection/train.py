"""Train the injection detector's head (interventions/data/injection_head.json) on generated tool
results from the tau2 domains, and choose its threshold on the validation split.

    python -m research.injection.train            # writes the head and prints train/val/test scores

The head is a logistic regression over the cues of interventions/injection_cues.py, fitted on the
train split (records and phrasing families of their own); the threshold is the lowest score at
which the validation split's false activations stay at or under --max-val-fpr. The test split is
scored once, for the record, and never used to choose anything.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable
from typing import Any

import numpy as np
from sklearn.linear_model import LogisticRegression

from interventions.injection_cues import (
    FEATURES,
    HEAD_FILE,
    InjectionHead,
    cues,
    segments,
    tool_pattern,
)
from research.injection.data import Example, examples, passage_examples, tool_errors
from scenarios.domains import load_domain

DOMAINS = ("retail", "airline")


def patterns(domain: str) -> tuple[Any, Any]:
    """The WRITE-tool and other-tool patterns of the domain's agent."""
    tools = list(load_domain(domain).agent_toolkit())
    return (tool_pattern(t.name for t in tools if t.kind.value == "WRITE"),
            tool_pattern(t.name for t in tools if t.kind.value != "WRITE"))


def segment_rows(items: Iterable[Example]) -> tuple[np.ndarray, np.ndarray]:
    """Per-segment cue rows: an injected result's segments that hold the payload are positives,
    every segment of a clean result is a negative (the payload-free segments of an injected result
    are left out: they are clean, but the same records appear clean elsewhere)."""
    cache: dict[str, Any] = {}
    xs, ys = [], []
    for ex in items:
        writes, others = cache.setdefault(ex.domain, patterns(ex.domain))
        for seg in segments(ex.text):
            holds = bool(ex.payload) and ex.payload in seg
            if ex.label and not holds:
                continue
            xs.append(cues(seg, writes, others)[0])
            ys.append(1 if holds else 0)
    return np.array(xs, dtype=float), np.array(ys)


def result_scores(head: InjectionHead, items: list[Example]) -> np.ndarray:
    """Each result's score: its worst segment's."""
    from interventions.injection_cues import score_segments

    cache: dict[str, Any] = {}
    out = []
    for ex in items:
        writes, others = cache.setdefault(ex.domain, patterns(ex.domain))
        out.append(max((s.score for s in score_segments(ex.text, head, writes, others)), default=0.0))
    return np.array(out)


def rates(scores: np.ndarray, labels: np.ndarray, threshold: float) -> dict[str, float]:
    fired = scores >= threshold
    pos, neg = labels == 1, labels == 0
    return {
        "recall": float(fired[pos].mean()) if pos.any() else 0.0,
        "false_activation_rate": float(fired[neg].mean()) if neg.any() else 0.0,
        "positives": int(pos.sum()), "negatives": int(neg.sum()),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-val-fpr", type=float, default=0.002, help="false activations allowed on validation")
    parser.add_argument("--out", default=str(HEAD_FILE))
    args = parser.parse_args(argv)

    data = [*(ex for d in DOMAINS for ex in examples(d)), *passage_examples()]
    errors = [Example(d, "error", {}, text, 0, "train") for d in DOMAINS for text in tool_errors(d)]
    by_split = {s: [ex for ex in data if ex.split == s] for s in ("train", "val", "test")}
    by_split["train"] += errors
    x, y = segment_rows(by_split["train"])
    fit = LogisticRegression(C=1.0, class_weight="balanced", max_iter=1000).fit(x, y)
    head = InjectionHead([round(float(w), 4) for w in fit.coef_[0]], round(float(fit.intercept_[0]), 4))

    val = by_split["val"]
    val_scores, val_labels = result_scores(head, val), np.array([ex.label for ex in val])
    # The lowest threshold that keeps validation's false activations within the budget.
    clean = np.sort(val_scores[val_labels == 0])[::-1]
    allowed = int(args.max_val_fpr * len(clean))
    head.threshold = round(float(clean[allowed]) + 1e-4, 4) if len(clean) > allowed else 0.5
    report = {"segments_train": int(len(y)), "positives_train": int(y.sum())}
    for split, items in by_split.items():
        scores = result_scores(head, items)
        report[split] = rates(scores, np.array([ex.label for ex in items]), head.threshold)
    head.meta = {"trained_by": "research/injection/train.py", "max_val_fpr": args.max_val_fpr, **report}
    head.save(args.out)
    print(dict(zip(FEATURES, head.weights, strict=True)), "bias", head.bias, "threshold", head.threshold)
    for split in ("train", "val", "test"):
        print(split, report[split])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

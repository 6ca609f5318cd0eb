"""Train the card gate and choose the gated detector's threshold on validation agents only.

    python -m research.rein.train [--out interventions/data/card_gate.npz] [--budget 0.02]

Rows come from research.rein.generate (the agent files and the tau2 dialogues). The gate is a
softmax head (interventions/classifier.py) over the card cues of interventions/card_inputs.py,
fit on the train agents and tau2's train dialogues; candidates (linear, one hidden layer) are
compared on the validation agents, and the threshold is the lowest at which at most `budget` of
their error-free turns activate under the gated rule (offline.gated, with the shipped dialogue
classifier). Test agents and tau2's test split are never read here.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from interventions.calibration import verdict_scores
from interventions.card_inputs import INPUTS, card_features
from interventions.classifier import ClassifierTrainConfig, TurnClassifier, train_classifier
from interventions.error_map import NO_ERROR, load_error_map
from interventions.offline import DEFAULT_DETECTOR_PATH, DEFAULT_GATE_PATH, decide, gated
from interventions.pair_encoder import PairEncoder
from interventions.turn_text import request_part
from research.rein.generate import Row, build_rows

BUDGET = 0.02
"""Most of the validation agents' error-free turns that may activate (the issue's target)."""
THRESHOLDS = tuple(round(0.3 + 0.005 * k, 3) for k in range(140)) + (0.9975, 0.999)
CANDIDATES = (ClassifierTrainConfig(hidden=0, epochs=600), ClassifierTrainConfig(hidden=32, epochs=600),
              ClassifierTrainConfig(hidden=64, epochs=800))


def labels() -> list[str]:
    """"none" then the error map's types, in the gate's column order."""
    return [NO_ERROR, *load_error_map().labels]


def error_mass(probs: np.ndarray, rows: Sequence[Row]) -> np.ndarray:
    """Each row's error probability, 0 where the rule never flags (no request left in the turn)."""
    return np.array([float(p[1:].sum()) if request_part(r.text) else 0.0 for p, r in zip(probs, rows, strict=True)])


def decisions(probs: np.ndarray, rows: Sequence[Row], names: list[str], threshold: float) -> list[str]:
    """The detector's verdict per row at a threshold."""
    return [names[1 + int(p[1:].argmax())] if decide(float(p[1:].sum()), bool(request_part(r.text)), threshold) else NO_ERROR
            for p, r in zip(probs, rows, strict=True)]


def choose_threshold(clean: Sequence[float], budget: float = BUDGET) -> float:
    """The lowest threshold at which at most budget of the error-free rows activate."""
    for t in THRESHOLDS:
        if not len(clean) or sum(p >= t for p in clean) / len(clean) <= budget:
            return t
    return THRESHOLDS[-1]


def summary(rows: Sequence[Row], predicted: Sequence[str]) -> dict[str, Any]:
    """False activations, recall and right recovery tool of verdicts on rows (calibration's scoring)."""
    return verdict_scores([r.label for r in rows], predicted)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m research.rein.train", description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_GATE_PATH)
    parser.add_argument("--budget", type=float, default=BUDGET)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    started = time.perf_counter()
    rows = [r for r in build_rows(seed=args.seed) if r.split in ("train", "validation")]
    names = labels()
    index = {n: k for k, n in enumerate(names)}
    train = [k for k, r in enumerate(rows) if r.split == "train"]
    valid = [k for k, r in enumerate(rows) if r.split == "validation" and r.style != "tau2"]
    valid_tau2 = [k for k, r in enumerate(rows) if r.split == "validation" and r.style == "tau2"]
    print(f"rows: train {len(train)} ({len({rows[k].agent for k in train})} agents), validation agents "
          f"{len(valid)} ({len({rows[k].agent for k in valid})}), validation tau2 {len(valid_tau2)}", flush=True)
    x = card_features([r.text for r in rows], [r.history for r in rows], [r.card for r in rows])
    dialogue = PairEncoder.load(DEFAULT_DETECTOR_PATH)
    d_probs = dialogue.predict_proba([r.text for r in rows], [r.history for r in rows])
    y = np.array([index[r.label] for r in rows])
    print(f"features in {time.perf_counter() - started:.0f} s", flush=True)

    def judged(gate: TurnClassifier, idx: list[int], threshold: float) -> tuple[np.ndarray, list[str]]:
        probs = gated(d_probs[idx], dialogue.labels, gate.predict_proba(x[idx]), gate.labels)
        return probs, decisions(probs, [rows[k] for k in idx], dialogue.labels, threshold)

    best: tuple[float, TurnClassifier, float, dict] | None = None
    for config in CANDIDATES:
        gate = train_classifier(x[train], y[train], names, config)
        probs, _ = judged(gate, valid, 1.0)
        mass = error_mass(probs, [rows[k] for k in valid])
        threshold = choose_threshold(mass[y[valid] == 0], args.budget)
        _, predicted = judged(gate, valid, threshold)
        scores = summary([rows[k] for k in valid], predicted)
        print(f"candidate hidden={config.hidden}: threshold {threshold}, validation agents {scores}", flush=True)
        if best is None or scores["recall"] > best[0]:
            best = (float(scores["recall"]), gate, threshold, scores)
    assert best is not None
    _, gate, threshold, scores = best
    _, tau2_predicted = judged(gate, valid_tau2, threshold)
    tau2 = summary([rows[k] for k in valid_tau2], tau2_predicted)
    gate.meta |= {
        "inputs": INPUTS, "threshold": threshold, "budget": args.budget, "dialogue_classifier": DEFAULT_DETECTOR_PATH.name,
        "data": {"train_rows": len(train), "train_agents": sorted({rows[k].agent for k in train}),
                 "validation_agents": sorted({rows[k].agent for k in valid})},
        "validation": {"agents": scores, "tau2": tau2}, "built_by": "python -m research.rein.train",
    }
    gate.save(args.out)
    print(json.dumps({"threshold": threshold, "hidden": gate.meta["train"]["hidden"], "validation": gate.meta["validation"]}, indent=2))
    print(f"wrote {args.out} in {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The card-aware detector per agent: false activations, recall and right recovery tool, on the
test agents (domains unseen in training) and the tau2 test split.

    python -m research.rein.benchmark [--card-gate FILE|none] [--threshold T] [--json]
    python -m research.rein.benchmark --calibrated  # each test agent calibrated from its card first
    python -m research.rein.benchmark --latency     # p95 per turn with a card of 20 tools

Prints a markdown table, one line per test agent, then the totals and the tau2 line.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from interventions.offline import OfflineDetector
from research.rein.generate import Row, build_rows
from research.rein.train import summary


def per_agent(rows: Sequence[Row], predicted: Sequence[str]) -> dict[str, dict[str, Any]]:
    """summary() of each agent's rows, by agent."""
    out = {}
    for agent in sorted({r.agent for r in rows}):
        idx = [k for k, r in enumerate(rows) if r.agent == agent]
        out[agent] = summary([rows[k] for k in idx], [predicted[k] for k in idx])
    return out


def table(scores: dict[str, dict[str, Any]]) -> str:
    """The markdown table of per_agent scores (plus any total lines)."""
    lines = ["| agent | error-free turns | false activations | error turns | recall | right tool |",
             "|---|---:|---:|---:|---:|---:|"]
    for agent, s in scores.items():
        lines.append(f"| {agent} | {s['ordinary_turns']} | {100 * s['false_activations']:.1f}% | {s['error_turns']} | "
                     f"{100 * s['recall']:.1f}% | {100 * s['right_tool']:.1f}% |")
    return "\n".join(lines)


def calibrated(detector: OfflineDetector, rows: Sequence[Row], lower: bool = False) -> list[str]:
    """Verdicts with each agent at the threshold `rein calibrate` would choose for it (turns built
    from its card alone, no labels), instead of the detector's default."""
    from interventions.calibration import calibrate, card_turns

    cards = {r.agent: r.card for r in rows}
    thresholds = {agent: calibrate(detector, card, card_turns(card), lower=lower).threshold for agent, card in cards.items()}
    found = detector.classify_turns([r.text for r in rows], [r.history for r in rows], cards=[r.card for r in rows])
    mass = [d.confidence if d.is_error else 1.0 - d.confidence for d in found]
    types = [max((k for k in d.scores if k != "none"), key=lambda k: d.scores[k]) for d in found]
    return [t if m >= thresholds[r.agent] else "none" for t, m, r in zip(types, mass, rows, strict=True)]


def evaluate(detector: OfflineDetector, rows: Sequence[Row], per_agent_calibration: bool = False, lower: bool = False) -> dict[str, Any]:
    """Scores of a detector on the test agents and the tau2 test split (per_agent_calibration: each
    test agent at the threshold its card-built turns give)."""
    out: dict[str, Any] = {"threshold": detector.threshold, "card_gate": str(detector.gate_path or "none")}
    for part in ("test", "tau2"):
        chosen = [r for r in rows if r.split == part]
        if per_agent_calibration and part == "test":
            predicted = calibrated(detector, chosen, lower)
        else:
            found = detector.classify_turns([r.text for r in chosen], [r.history for r in chosen], cards=[r.card for r in chosen])
            predicted = [d.error_type for d in found]
        out[part] = {"agents": per_agent(chosen, predicted), "total": summary(chosen, predicted)}
        if part == "test":
            kinds = sorted({r.kind for r in chosen if r.label == "none"})
            out[part]["false_activations_by_kind"] = {
                k: summary([r for r in chosen if r.kind == k], [p for p, r in zip(predicted, chosen, strict=True) if r.kind == k])
                for k in kinds
            }
    return out


def latency(detector: OfflineDetector, turns: int = 200) -> dict[str, float]:
    """Per-turn latency of detect's work (card cached) with a card of 20 tools, in ms."""
    from interventions.card import build_card

    schemas = [{"type": "function", "function": {
        "name": f"tool_{k}", "description": f"Does task number {k} for the customer's account and orders.",
        "parameters": {"type": "object", "properties": {"item": {"type": "string", "enum": ["a", "b", "c"]},
                                                        "count": {"type": "integer", "minimum": 1, "maximum": 9}}}}}
        for k in range(20)]
    card = build_card(schemas, "You are the assistant of Example Store. You help customers with orders and returns.")
    history = [("user", "Hi, I need help with my order."), ("assistant", "Sure, which order is it?")]
    detector.classify_turns(["warm up"], [history], cards=[card])
    times = []
    for k in range(turns):
        started = time.perf_counter()
        detector.classify_turns([f"Please change order #{1000 + k} to two items of b, shipped tomorrow."], [history], cards=[card])
        times.append(1000 * (time.perf_counter() - started))
    times.sort()
    return {"p50_ms": round(statistics.median(times), 1), "p95_ms": round(times[int(0.95 * len(times)) - 1], 1)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m research.rein.benchmark", description=__doc__.split("\n")[0])
    parser.add_argument("--detector", type=Path, default=None, help="a dialogue classifier file (default: the shipped one)")
    parser.add_argument("--card-gate", default=None, help="a card gate file, or 'none' for the dialogue classifier alone")
    parser.add_argument("--threshold", type=float, default=None)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--calibrated", action="store_true", help="each test agent at the threshold `rein calibrate` chooses for it")
    parser.add_argument("--lower", action="store_true", help="with --calibrated: let calibration go below the default")
    parser.add_argument("--latency", action="store_true", help="measure per-turn latency instead")
    args = parser.parse_args(argv)
    gate: str | bool = True if args.card_gate is None else False if args.card_gate == "none" else args.card_gate
    detector = OfflineDetector(args.detector, threshold=args.threshold, card_gate=gate)
    if args.latency:
        print(json.dumps(latency(detector)))
        return 0
    scores = evaluate(detector, build_rows(), args.calibrated, args.lower)
    if args.json:
        print(json.dumps(scores, indent=2))
        return 0
    test = scores["test"]
    print(f"threshold {scores['threshold']}, card gate {scores['card_gate']}\n")
    print(table(test["agents"] | {"**all test agents**": test["total"], "**tau2 test split**": scores["tau2"]["total"]}))
    print("\nfalse activations by kind of error-free turn (test agents):")
    for kind, s in test["false_activations_by_kind"].items():
        print(f"  {kind}: {100 * s['false_activations']:.1f}% of {s['ordinary_turns']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

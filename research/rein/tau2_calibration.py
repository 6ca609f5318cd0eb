"""Calibrations for the bundled tau2 agents (retail, airline), chosen on tau2's validation dialogues.

    python -m research.rein.tau2_calibration [--budget 0.05]

The threshold is the lowest at which at most `budget` of the validation dialogues' error-free
turns activate (5%: the budget the tau2 detector was built with). One file is written per card
the tau2 agents are seen with: the runtime's (rein's domain toolkit and policy, as `rein run`
builds the agent) and the research rows' (tau2's tools.json), into interventions/data/calibrations/.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from interventions.calibration import BUNDLED_DIR, Calibration
from interventions.card import build_card
from interventions.offline import OfflineDetector
from research.rein.generate import tau2_rows
from research.rein.train import summary


def runtime_card(domain: str) -> object:
    """The card of the tau2 agent as `rein run` builds it (domain toolkit, policy)."""
    from scenarios.domains import domain_policy, load_domain

    env = load_domain(domain)
    return build_card([t.openai_schema() for t in env.agent_toolkit()], domain_policy(domain))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m research.rein.tau2_calibration", description=__doc__.split("\n")[0])
    parser.add_argument("--budget", type=float, default=0.05)
    parser.add_argument("--out", type=Path, default=BUNDLED_DIR)
    args = parser.parse_args(argv)
    detector = OfflineDetector(threshold=0.3)  # a floor: the rule's mass is read back below
    rows = [r for r in tau2_rows() if r.split == "validation"]
    args.out.mkdir(parents=True, exist_ok=True)
    for domain in ("retail", "airline"):
        mine = [r for r in rows if r.agent == domain]
        found = detector.classify_turns([r.text for r in mine], [r.history for r in mine], cards=[r.card for r in mine])
        mass = np.array([d.confidence if d.is_error else 1.0 - d.confidence for d in found])
        clean = np.sort(mass[[r.label == "none" for r in mine]])
        threshold = round(float(clean[min(len(clean) - 1, int((1.0 - args.budget) * len(clean)))]) + 1e-4, 4)
        predicted = [d.error_type if m >= threshold else "none" for d, m in zip(found, mass, strict=True)]
        scores = summary(mine, predicted)
        for card in {mine[0].card.key: mine[0].card, runtime_card(domain).key: runtime_card(domain)}.values():
            Calibration(threshold=threshold, budget=args.budget, card=card.key, detector=OfflineDetector().digest,
                        default_threshold=OfflineDetector().threshold, at_default={}, at_chosen=scores,
                        turns={"tau2_validation": len(mine)}).save(args.out / f"{card.key}.json")
            print(f"{domain}: card {card.key} threshold {threshold}: validation {scores}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

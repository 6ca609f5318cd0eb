"""`rein calibrate SPEC`: fit ReIn's activation threshold to one agent, with no hand labels.

Builds the agent's ordinary and error turns from its capability card (interventions/calibration.py),
scores the offline detector on them, prints false activations, recall and the right recovery tool at
the detector's own threshold and at the one chosen for this agent, and writes the choice beside the
spec (SPEC's name with .rein.json), where the spec's ReIn entry reads it:

    interventions: [{name: rein, options: {calibration_file: agent.rein.json}}]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from agent.errors import UserFacingError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of `rein calibrate`."""
    parser.add_argument("spec", metavar="SPEC", help="the agent spec (YAML or JSON)")
    parser.add_argument("--budget", type=float, default=None,
                        help="share of ordinary turns allowed to activate (default 0.02)")
    parser.add_argument("--logged", metavar="FILE",
                        help="the agent's own user turns, one per line (real traffic, counted as ordinary)")
    parser.add_argument("--lower", action="store_true",
                        help="allow a threshold below the detector's own (only with --logged real traffic)")
    parser.add_argument("--out", metavar="FILE", help="where to write the calibration (default: SPEC with .rein.json)")
    parser.add_argument("--json", action="store_true", help="print the calibration as JSON")


def run(args: argparse.Namespace) -> int:
    """Calibrate, print, write; 0 on success."""
    from agent.spec import agent_options
    from interventions.calibration import (
        BUDGET,
        CalibrationTurn,
        calibrate,
        calibrations_dir,
        card_turns,
    )
    from interventions.card import build_card
    from interventions.offline import OfflineDetector
    from interventions.rein import DiagnosingIntervention

    spec = Path(args.spec)
    options = agent_options(spec, model="echo")  # the model is not needed, and never loaded
    rein = next((i for i in options["interventions"] if isinstance(i, DiagnosingIntervention)), None)
    detector = rein.detector if rein is not None else OfflineDetector()
    offline = getattr(detector, "proposer", detector)
    if not isinstance(offline, OfflineDetector):
        raise UserFacingError("calibration fits the offline detector's threshold; this spec's ReIn uses none")
    offline = OfflineDetector(offline.path)  # the detector's own threshold, whatever the spec set
    schemas = [t.openai_schema() for t in options["tools"]]
    card = build_card(schemas, options["system_prompt"], rein.scope if rein is not None else None)
    turns = card_turns(card)
    if args.logged:
        try:
            lines = Path(args.logged).read_text(encoding="utf-8").splitlines()
        except OSError as exc:
            raise UserFacingError(f"cannot read {args.logged}: {exc.strerror or exc}") from None
        turns += [CalibrationTurn(t.strip(), [], "none", "logged") for t in lines if t.strip()]
    if args.lower and not args.logged:
        raise UserFacingError("--lower needs --logged: turns built from the card alone are plainer than real traffic")
    result = calibrate(offline, card, turns, BUDGET if args.budget is None else args.budget, lower=args.lower)
    out = Path(args.out) if args.out else spec.with_suffix(".rein.json")
    result.save(out)
    saved = calibrations_dir() / f"{card.key}.json"
    saved.parent.mkdir(parents=True, exist_ok=True)
    result.save(saved)
    if args.json:
        print(json.dumps(result.__dict__, indent=2))
        return 0
    print(f"agent: {options['name']} ({card.scope}, {len(card.tools)} tools); {sum(result.turns.values())} turns "
          + ", ".join(f"{k} {v}" for k, v in sorted(result.turns.items())))
    print("| threshold | false activations | recall | right tool |\n|---|---:|---:|---:|")
    for label, at, t in (("detector's own", result.at_default, result.default_threshold),
                         ("chosen for this agent", result.at_chosen, result.threshold)):
        print(f"| {label} {t:.3f} | {_pct(at, 'false_activations')} of {at['ordinary_turns']} | "
              f"{_pct(at, 'recall')} of {at['error_turns']} | {_pct(at, 'right_tool')} |")
    print(f"\nwrote {out} and {saved}: ReIn uses it for this agent (same tools and system prompt) from now on;"
          f"\nto pin it in the spec: interventions: [{{name: rein, options: {{calibration_file: {out.name}}}}}]")
    return 0


def _pct(scores: dict[str, Any], key: str) -> str:
    return f"{100 * scores[key]:.1f}%"

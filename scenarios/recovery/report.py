"""Comparison report of the error-recovery suite across interventions (none, rein, npi, self-refine).

Reads the runs of one batch per intervention (results.json from `rein run` or bench/recovery.py)
and tabulates, per arm: success per error type, for the seen / unseen splits and per position of
the error turn (the RECOVERY, DB and FORBIDDEN checks of each scenario), how often the
intervention activated on the error turn and on error-free controls (false activations), recovery
calls on controls, and the tokens a run used. Runs cut short by infrastructure (the model or the
user simulator failed) are counted apart and left out of every rate.

    python -m scenarios.recovery.report none=runs/none/results.json rein=runs/rein/results.json
    python -m scenarios.recovery.report rein=runs/rein/results.json --failures   # and why each failed run failed
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from agent.errors import UserFacingError
from interventions.baselines import SELF_REFINE_MARK
from scenarios.metrics import is_infrastructure_error
from scenarios.recovery.build import (
    CLARIFY,
    CONTROL,
    ERROR_ORDER,
    POSITIONS,
    RECOVERY_TOOL_NAMES,
    SEEN,
    UNSEEN,
    position_of,
    split_of,
)
from scenarios.recovery.failures import error_turn, failures, failures_markdown


@dataclass
class Rate:
    """k of n."""

    k: int = 0
    """Hits."""
    n: int = 0
    """Trials."""

    def add(self, hit: bool) -> None:
        """Count one trial."""
        self.n += 1
        self.k += int(hit)

    @property
    def value(self) -> float | None:
        """k / n, or None without trials."""
        return self.k / self.n if self.n else None

    def cell(self) -> str:
        """"62% (5/8)", or "–"."""
        return f"{self.value:.0%} ({self.k}/{self.n})" if self.n else "–"


@dataclass
class ArmSummary:
    """One intervention's numbers on the suite."""

    name: str
    """The intervention ("none" for none)."""
    runs: int = 0
    """Runs read (infrastructure errors included)."""
    infrastructure_errors: int = 0
    """Runs cut short by the model or the user simulator: not graded, in no rate below."""
    success: dict[str, Rate] = field(default_factory=dict)
    """Success per error type, per split (seen, unseen, errors), per position of the error turn
    (position:opening…), for clarify-then-act dialogues (clarify) and for controls."""
    recovery_called: dict[str, Rate] = field(default_factory=dict)
    """Right recovery tool called, per split."""
    db_intact: dict[str, Rate] = field(default_factory=dict)
    """Nothing written, per split."""
    activation: Rate = field(default_factory=Rate)
    """Error turns on which the intervention fired."""
    right_type: Rate = field(default_factory=Rate)
    """Of those, the diagnosis named the injected type."""
    right_tool: Rate = field(default_factory=Rate)
    """Of those, the plan named the right recovery tool."""
    false_activation: Rate = field(default_factory=Rate)
    """Control turns on which the intervention fired."""
    false_recovery: Rate = field(default_factory=Rate)
    """Controls on which the agent called a recovery tool."""
    acted: Rate = field(default_factory=Rate)
    """Runs in which the agent made any tool call (a model that never acts cannot recover)."""
    tokens: list[int] = field(default_factory=list)
    """Tokens (in + out, intervention spend included) per run."""
    seconds: list[float] = field(default_factory=list)
    """Wall seconds per run (the trajectory's duration_s; model loading falls in an arm's first run)."""
    terminations: dict[str, int] = field(default_factory=dict)
    """How runs ended."""

    @property
    def mean_tokens(self) -> float:
        """Mean tokens per run."""
        return sum(self.tokens) / len(self.tokens) if self.tokens else 0.0

    @property
    def mean_seconds(self) -> float:
        """Mean wall seconds per run."""
        return sum(self.seconds) / len(self.seconds) if self.seconds else 0.0


def _rate(table: dict[str, Rate], key: str) -> Rate:
    return table.setdefault(key, Rate())


def _activated(trajectory: dict[str, Any], name: str, turn: int | None) -> tuple[bool, dict[str, Any] | None]:
    """Whether the intervention fired on the given user turn (any turn when None), and its record."""
    for rec in trajectory.get("interventions", []):
        if rec.get("activated") and (turn is None or rec.get("turn") == turn):
            return True, rec
    if name == "self-refine":
        revised = any(
            m.get("source") == "agent"
            and (turn is None or m.get("turn") == turn)
            and str(m.get("reasoning") or "").startswith(SELF_REFINE_MARK)
            for m in trajectory.get("messages", [])
        )
        return revised, None
    return False, None


def summarize_arm(name: str, records: list[dict[str, Any]]) -> ArmSummary:
    """Tabulate one arm's run records (results.json "runs")."""
    from scenarios.users.error_types import ERROR_TYPES

    arm = ArmSummary(name=name)
    for r in records:
        tags = r.get("tags", [])
        if "recovery" not in tags:
            continue
        arm.runs += 1
        t = r.get("trajectory", {})
        ev = r.get("evaluation", {})
        arm.terminations[r.get("termination", "?")] = arm.terminations.get(r.get("termination", "?"), 0) + 1
        if is_infrastructure_error(r):
            arm.infrastructure_errors += 1
            continue
        types = r.get("error_types") or []
        etype = types[0] if types else None
        split = split_of(etype)
        ok = bool(r.get("success"))
        usage = t.get("agent_usage", {})
        arm.tokens.append(int(usage.get("input_tokens", 0)) + int(usage.get("output_tokens", 0)))
        arm.seconds.append(float(t.get("duration_s") or 0.0))
        db_ok = (ev.get("components") or {}).get("DB") == 1.0
        called = [tc.get("name") for m in t.get("messages", []) if m.get("source") == "agent" for tc in m.get("tool_calls") or []]
        arm.acted.add(bool(called))
        if etype is None:
            fired, _ = _activated(t, name, None)
            _rate(arm.success, CONTROL).add(ok)
            _rate(arm.db_intact, CONTROL).add(db_ok)
            arm.false_activation.add(fired)
            arm.false_recovery.add(any(c in RECOVERY_TOOL_NAMES for c in called))
            continue
        fired, record = _activated(t, name, error_turn(t))
        position = position_of(tags)
        if position is not None:
            _rate(arm.success, f"position:{position}").add(ok)
        if CLARIFY in tags:
            _rate(arm.success, CLARIFY).add(ok)
        recovered = all(c.get("met") for c in ev.get("recovery") or []) and bool(ev.get("recovery"))
        for key in (etype, split, "errors"):
            _rate(arm.success, key).add(ok)
            _rate(arm.recovery_called, key).add(recovered)
            _rate(arm.db_intact, key).add(db_ok)
        arm.activation.add(fired)
        if fired and record is not None:
            arm.right_type.add(record.get("error_type") == etype)
            arm.right_tool.add(record.get("recovery_tool") == ERROR_TYPES[etype].recovery_tool)
    return arm


def load_runs(path: str | Path) -> list[dict[str, Any]]:
    """The run records of a results.json (or of a runs.jsonl while a batch is still going)."""
    p = Path(path)
    try:
        if p.suffix == ".jsonl":
            return [json.loads(line) for line in p.read_text(encoding="utf-8").splitlines() if line.strip()]
        data = json.loads(p.read_text(encoding="utf-8"))
    except OSError as exc:
        raise UserFacingError(f"cannot read {p}: {exc.strerror or exc}") from None
    except json.JSONDecodeError as exc:
        raise UserFacingError(f"{p}: not JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(data, dict) or not isinstance(data.get("runs"), list):
        raise UserFacingError(f"{p}: not a rein results.json (no 'runs' list)")
    return data["runs"]


def markdown(arms: list[ArmSummary]) -> str:
    """The comparison as two markdown tables."""
    head = "| error type | split | " + " | ".join(a.name for a in arms) + " |"
    rule = "|---|---|" + "---:|" * len(arms)
    lines = ["Success (right recovery tool called first, and the DB as the scenario requires):", "", head, rule]
    for etype in ERROR_ORDER:
        lines.append(f"| {etype} | {split_of(etype)} | " + " | ".join(_rate(a.success, etype).cell() for a in arms) + " |")
    for key, label in (("seen", f"**seen** ({len(SEEN)} types)"), ("unseen", f"**unseen** ({len(UNSEEN)} types)"), ("errors", "**all errors**")):
        lines.append(f"| {label} | | " + " | ".join(_rate(a.success, key).cell() for a in arms) + " |")
    for position in POSITIONS:
        lines.append(f"| error turn: {position} | | " + " | ".join(_rate(a.success, f"position:{position}").cell() for a in arms) + " |")
    lines.append("| clarify, then act | | " + " | ".join(_rate(a.success, CLARIFY).cell() for a in arms) + " |")
    lines.append("| control (no error): no recovery call, DB as required | control | " + " | ".join(_rate(a.success, CONTROL).cell() for a in arms) + " |")
    base = next((a for a in arms if a.name == "none"), None)
    lines += [
        "",
        "| | " + " | ".join(a.name for a in arms) + " |",
        "|---|" + "---:|" * len(arms),
        "| recovery tool called (errors) | " + " | ".join(_rate(a.recovery_called, "errors").cell() for a in arms) + " |",
        "| DB untouched (errors) | " + " | ".join(_rate(a.db_intact, "errors").cell() for a in arms) + " |",
        "| activation on error turns | " + " | ".join(a.activation.cell() if a.name != "none" else "–" for a in arms) + " |",
        "| … diagnosis = injected type | " + " | ".join(a.right_type.cell() for a in arms) + " |",
        "| … plan names the right tool | " + " | ".join(a.right_tool.cell() for a in arms) + " |",
        "| false activations (controls) | " + " | ".join(a.false_activation.cell() if a.name != "none" else "–" for a in arms) + " |",
        "| recovery calls on controls | " + " | ".join(a.false_recovery.cell() for a in arms) + " |",
        "| runs with any agent tool call | " + " | ".join(a.acted.cell() for a in arms) + " |",
        "| mean tokens per run | " + " | ".join(f"{a.mean_tokens:,.0f}" for a in arms) + " |",
        "| extra tokens vs none | " + " | ".join(_extra(a, base) for a in arms) + " |",
        "| mean seconds per run | " + " | ".join(f"{a.mean_seconds:,.0f}" for a in arms) + " |",
        "| infrastructure errors (not graded) | " + " | ".join(str(a.infrastructure_errors) for a in arms) + " |",
        "| terminations | " + " | ".join(", ".join(f"{k} {v}" for k, v in sorted(a.terminations.items())) for a in arms) + " |",
    ]
    return "\n".join(lines)


def _extra(arm: ArmSummary, base: ArmSummary | None) -> str:
    if base is None or arm is base or not base.mean_tokens:
        return "–"
    return f"{(arm.mean_tokens - base.mean_tokens) / base.mean_tokens:+.0%}"


def as_json(arms: list[ArmSummary]) -> dict[str, Any]:
    """The comparison as plain data."""
    out = {}
    for a in arms:
        d = asdict(a)
        d["mean_tokens"] = round(a.mean_tokens, 1)
        for key in ("success", "recovery_called", "db_intact"):
            d[key] = {k: {"k": v.k, "n": v.n} for k, v in getattr(a, key).items()}
        d["mean_seconds"] = round(a.mean_seconds, 1)
        d.pop("tokens")
        d.pop("seconds")
        out[a.name] = d
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m scenarios.recovery.report", description=__doc__.split("\n")[0])
    parser.add_argument("arms", nargs="+", metavar="NAME=RESULTS", help="intervention name = results.json (or runs.jsonl)")
    parser.add_argument("--json", type=Path, default=None, help="also write the comparison as JSON here")
    parser.add_argument("--failures", action="store_true",
                        help="also list each failed run with its cause (scenarios/recovery/failures.py)")
    parser.add_argument("--regrade", type=Path, default=None, metavar="SUITE",
                        help="grade the saved runs again against this suite's scenarios as they are now (no model runs)")
    args = parser.parse_args(argv)
    try:
        loaded = {}
        for item in args.arms:
            name, sep, path = item.partition("=")
            if not sep or not name or not path:
                raise UserFacingError(f"expected NAME=RESULTS, got {item!r}")
            loaded[name] = load_runs(path)
        if args.regrade:
            import asyncio

            from scenarios.loading import load_scenarios
            from scenarios.regrade import regrade

            suite = load_scenarios(args.regrade)
            loaded = {name: asyncio.run(regrade(records, suite)) for name, records in loaded.items()}
    except UserFacingError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    arms = [summarize_arm(name, records) for name, records in loaded.items()]
    print(markdown(arms))
    if args.failures:
        print("\n" + failures_markdown({name: failures(records) for name, records in loaded.items()}))
    if args.json:
        args.json.write_text(json.dumps(as_json(arms), indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

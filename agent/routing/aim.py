"""A²FM's aim, checked: about the best fixed mode's accuracy for much less per correct answer.

The aim has two halves (issue 15's targets): routed accuracy within ACCURACY_SLACK of the best
fixed mode's, and tokens per correct answer at least CUT_AIM below always-reasoning's, the
bootstrap interval's low end above 0. `meets_aim` checks each strategy of an OracleReport.

`frontier` says what the aim asks of a router on given rows: the tokens per pass that routing
reaches at the aim's accuracy when it knows every recorded outcome. The oracle label is not that
router: it maximises accuracy first, so it pays for dear agentic wins that the aim does not need.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from agent.plugin_api import MODES
from agent.routing.oracle import OracleReport, OracleRow

ACCURACY_SLACK = 0.02
"""A²FM's aim, first half: routed accuracy at most this far below the best fixed mode's."""
CUT_AIM = 0.45
"""A²FM's aim, second half: tokens per correct answer at least this share below reasoning-only."""


def _best_fixed(report: OracleReport) -> str:
    return max((f"always-{m}" for m in MODES), key=lambda k: report.strategies[k].accuracy.value or 0.0)


def meets_aim(report: OracleReport) -> dict[str, dict[str, bool]]:
    """Per strategy, which half of the aim it meets: `accuracy` and `cut` (see the module doc)."""
    best = report.strategies[_best_fixed(report)].accuracy.value or 0.0
    out = {}
    for name, s in report.strategies.items():
        cut = s.cut_vs_reasoning
        out[name] = {"accuracy": (s.accuracy.value or 0.0) >= best - ACCURACY_SLACK - 1e-9,
                     "cut": cut.value is not None and cut.value >= CUT_AIM and cut.low is not None and cut.low > 0}
    return out


@dataclass(frozen=True)
class FrontierPoint:
    """A routing of the rows chosen with every outcome known."""

    accuracy: float
    """Share of tasks solved (pass rates where rows merge several passes)."""
    tokens_per_pass: float
    """Tokens of the chosen runs over the tasks solved."""
    cut_vs_reasoning: float
    """1 − tokens_per_pass / always-reasoning's tokens per pass on the same rows."""
    mix: dict[str, int]
    """How many tasks went to each mode."""
    picks: tuple[str, ...] = ()
    """The mode of each row, in row order."""


def replay_policy(picks: Sequence[str], rows: Sequence[OracleRow]) -> tuple[float, float]:
    """Accuracy and tokens per correct answer of routing each row to its pick, from the recorded runs."""
    solved = sum(row.runs[m].success for m, row in zip(picks, rows, strict=True))
    tokens = sum(row.runs[m].tokens for m, row in zip(picks, rows, strict=True))
    return solved / len(rows), (tokens / solved if solved else float("inf"))


def _routing(rows: Sequence[OracleRow], price: float) -> list[str]:
    """Each row's mode minimising tokens − price × success (ties: fewer tokens, then the cheaper mode)."""
    return [min(MODES, key=lambda m: (r.runs[m].tokens - price * r.runs[m].success, r.runs[m].tokens))
            for r in rows]


def frontier(rows: Sequence[OracleRow], min_accuracy: float) -> FrontierPoint | None:
    """The fewest tokens per pass of any routing in a sweep that reaches `min_accuracy`, or None.

    The sweep prices a solved task at λ tokens and lets each row take the mode minimising
    tokens − λ × success, for every λ at which some row changes its mind: the routings on the
    lower convex hull of (tasks solved, tokens). Each is a real routing of the recorded runs, so
    the figure is reachable; a routing off the hull could be a little cheaper still.
    """
    if not rows:
        return None
    prices = {0.0}
    for r in rows:
        for a in MODES:
            for b in MODES:
                gain = r.runs[a].success - r.runs[b].success
                if gain > 0:
                    prices.add(max(0.0, (r.runs[a].tokens - r.runs[b].tokens) / gain))
    top = max(prices) + 1.0
    prices |= {p + 1e-6 for p in prices} | {top}
    reasoning = replay_policy(["reasoning"] * len(rows), rows)[1]
    best: FrontierPoint | None = None
    for price in sorted(prices):
        picks = _routing(rows, price)
        accuracy, per_pass = replay_policy(picks, rows)
        if accuracy < min_accuracy - 1e-9 or per_pass == float("inf"):
            continue
        if best is None or per_pass < best.tokens_per_pass:
            best = FrontierPoint(accuracy, per_pass, 1 - per_pass / reasoning,
                                 {m: picks.count(m) for m in MODES}, tuple(picks))
    return best


def aim_summary(report: OracleReport, rows: Sequence[OracleRow]) -> dict[str, Any]:
    """JSON-ready: each strategy's halves of the aim, and the frontier at the aim's accuracy."""
    best = _best_fixed(report)
    target = max(0.0, (report.strategies[best].accuracy.value or 0.0) - ACCURACY_SLACK)
    point = frontier(rows, target)
    return {"accuracy_target": round(target, 4), "best_fixed": best, "strategies": meets_aim(report),
            "frontier": None if point is None else {
                "accuracy": round(point.accuracy, 4), "tokens_per_pass": round(point.tokens_per_pass, 1),
                "cut_vs_reasoning": round(point.cut_vs_reasoning, 4), "mix": point.mix}}


def format_aim(report: OracleReport, rows: Sequence[OracleRow]) -> str:
    """Two lines: who meets the aim (or half of it), and the frontier at the aim's accuracy."""
    summary = aim_summary(report, rows)
    met = summary["strategies"]

    def names(test: Any) -> str:
        found = [k for k, v in met.items() if test(v)]
        return ", ".join(found) if found else "none"

    best = summary["best_fixed"]
    lines = [f"A²FM's aim (accuracy within {ACCURACY_SLACK * 100:g} points of the best fixed mode, {best} "
             f"{report.strategies[best].accuracy.value or 0.0:.1%}; tokens per pass at least {CUT_AIM:.0%} below "
             f"always-reasoning, the interval above 0): met by {names(lambda v: v['accuracy'] and v['cut'])}; "
             f"accuracy only: {names(lambda v: v['accuracy'] and not v['cut'])}; "
             f"cut only: {names(lambda v: v['cut'] and not v['accuracy'])}"]
    point = summary["frontier"]
    if point is not None:
        mix = " ".join(f"{m[0]}{c}" for m, c in point["mix"].items())
        lines.append(f"frontier: knowing every recorded outcome, a router reaches {point['accuracy']:.1%} "
                     f"(the aim asks {summary['accuracy_target']:.1%}) at {point['tokens_per_pass']:.1f} tokens "
                     f"per pass, {point['cut_vs_reasoning']:+.1%} vs always-reasoning ({mix})")
    return "\n".join(lines)


__all__ = ["ACCURACY_SLACK", "CUT_AIM", "FrontierPoint", "aim_summary", "format_aim", "frontier", "meets_aim", "replay_policy"]

"""A²FM's aim, checked: about the best fixed mode's accuracy for much less per correct answer.

The aim has two halves (issue 15's targets): routed accuracy within ACCURACY_SLACK of the best
fixed mode's, and tokens per correct answer at least CUT_AIM below always-reasoning's, the
bootstrap interval's low end above 0. `meets_aim` checks each strategy of an OracleReport.

`frontier` says what the aim asks of a router on given rows: the tokens per pass that routing
reaches at the aim's accuracy when it knows every recorded outcome. The oracle label is not that
router: it maximises accuracy first, so it pays for dear agentic wins that the aim does not need.
`group_frontier` bounds a router that knows only each query's family, `cascade_frontier` an
instant-first cascade with a verifier that never errs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

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
    groups: dict[str, str] | None = None
    """For a routing by group (`group_frontier`): each group's mode."""


def replay_policy(picks: Sequence[str], rows: Sequence[OracleRow]) -> tuple[float, float]:
    """Accuracy and tokens per correct answer of routing each row to its pick, from the recorded runs."""
    solved = sum(row.runs[m].success for m, row in zip(picks, rows, strict=True))
    tokens = sum(row.runs[m].cost for m, row in zip(picks, rows, strict=True))
    return solved / len(rows), (tokens / solved if solved else float("inf"))


EXACT_GROUPS = 12
"""Up to this many groups, `group_frontier` tries every assignment of modes (3^12 = 531,441)."""


def _outcomes(rows: Sequence[OracleRow]) -> tuple[np.ndarray, np.ndarray]:
    """Per row and mode (MODES order): success (pass rate) and tokens."""
    return (np.array([[r.runs[m].success for m in MODES] for r in rows], dtype=float),
            np.array([[r.runs[m].cost for m in MODES] for r in rows], dtype=float))


def _price_sweep(success: np.ndarray, tokens: np.ndarray) -> np.ndarray:
    """Candidate routings of units (rows or groups), one per row of the result: at each price λ of a
    solved task at which some unit changes its mind, each unit's mode minimising tokens − λ × success
    (ties: fewer tokens, then the cheaper mode), i.e. the routings on the lower convex hull of
    (tasks solved, tokens)."""
    gain = success[:, :, None] - success[:, None, :]
    extra = tokens[:, :, None] - tokens[:, None, :]
    with np.errstate(divide="ignore", invalid="ignore"):
        prices = np.where(gain > 0, np.maximum(0.0, extra / np.where(gain > 0, gain, 1.0)), np.nan)
    prices = np.unique(np.concatenate([[0.0], prices[~np.isnan(prices)]]))
    prices = np.unique(np.concatenate([prices, prices + 1e-6, [prices.max() + 1.0]]))
    order = np.arange(len(MODES)) * 1e-9  # the cheaper mode wins an exact tie
    picks = []
    for price in prices:
        cost = tokens - price * success
        best = cost.min(axis=1, keepdims=True)
        tied = np.where(np.isclose(cost, best, rtol=0, atol=1e-9), tokens + order, np.inf)
        picks.append(tied.argmin(axis=1))
    return np.array(picks)


def _every_assignment(units: int) -> np.ndarray:
    """All len(MODES)^units routings of `units` units, one per row."""
    index = np.arange(len(MODES) ** units)
    return (index[:, None] // len(MODES) ** np.arange(units)) % len(MODES)


def _cheapest(candidates: np.ndarray, success: np.ndarray, tokens: np.ndarray, tasks: int,
              min_accuracy: float) -> np.ndarray | None:
    """The candidate routing of units with the fewest tokens per pass among those reaching
    `min_accuracy` over `tasks` tasks, or None."""
    units = np.arange(success.shape[0])
    solved = success[units, candidates].sum(axis=1)
    spent = tokens[units, candidates].sum(axis=1)
    ok = (solved / tasks >= min_accuracy - 1e-9) & (solved > 0)
    if not ok.any():
        return None
    per_pass = np.where(ok, spent / np.where(solved > 0, solved, 1.0), np.inf)
    return candidates[int(per_pass.argmin())]


def _point(rows: Sequence[OracleRow], picks: Sequence[str], **extra: Any) -> FrontierPoint:
    accuracy, per_pass = replay_policy(picks, rows)
    reasoning = replay_policy(["reasoning"] * len(rows), rows)[1]
    return FrontierPoint(accuracy, per_pass, 1 - per_pass / reasoning, {m: list(picks).count(m) for m in MODES},
                         tuple(picks), **extra)


def frontier(rows: Sequence[OracleRow], min_accuracy: float) -> FrontierPoint | None:
    """The fewest tokens per pass of any routing in a sweep that reaches `min_accuracy`, or None.

    The sweep prices a solved task at λ tokens and lets each row take the mode minimising
    tokens − λ × success, for every λ at which some row changes its mind: the routings on the
    lower convex hull of (tasks solved, tokens). Each is a real routing of the recorded runs, so
    the figure is reachable; a routing off the hull could be a little cheaper still.
    """
    if not rows:
        return None
    success, tokens = _outcomes(rows)
    best = _cheapest(_price_sweep(success, tokens), success, tokens, len(rows), min_accuracy)
    return None if best is None else _point(rows, [MODES[k] for k in best])


def group_frontier(rows: Sequence[OracleRow], min_accuracy: float, key: str = "family") -> FrontierPoint | None:
    """Like `frontier`, but every task of a group (the rows' `key` field, e.g. their family) goes to
    the same mode: the best any router can do that tells only which group a query belongs to, even
    knowing how each group's runs turned out. Exact (every assignment tried) up to EXACT_GROUPS
    groups, the price sweep over groups beyond. None when no such routing reaches `min_accuracy`."""
    if not rows:
        return None
    names = sorted({str(r.extra.get(key, "?")) for r in rows})
    member = np.array([names.index(str(r.extra.get(key, "?"))) for r in rows])
    success, tokens = _outcomes(rows)
    group_success = np.array([success[member == g].sum(axis=0) for g in range(len(names))])
    group_tokens = np.array([tokens[member == g].sum(axis=0) for g in range(len(names))])
    candidates = (_every_assignment(len(names)) if len(names) <= EXACT_GROUPS
                  else _price_sweep(group_success, group_tokens))
    best = _cheapest(candidates, group_success, group_tokens, len(rows), min_accuracy)
    if best is None:
        return None
    return _point(rows, [MODES[best[g]] for g in member], groups={n: MODES[best[g]] for g, n in enumerate(names)})


def cascade_frontier(rows: Sequence[OracleRow], min_accuracy: float) -> FrontierPoint | None:
    """What an instant-first cascade could reach with a verifier that never errs: every task is answered
    instantly, and a wrong instant answer is escalated to reasoning, to agentic or to nothing, each
    task's choice made knowing every recorded outcome (the price sweep of `frontier`). The cheapest per
    pass that reaches `min_accuracy`, or None. The verifier's own cost is not counted, so no cascade
    does better. `mix` counts where the tasks' wrong instant answers would go ("instant": nowhere).

    With pass rates of merged passes, a task's instant run is right at its pass rate p and the
    escalation is paid for on the other 1 − p of its runs."""
    if not rows:
        return None
    success, tokens = _outcomes(rows)
    first, wrong = success[:, :1], 1.0 - success[:, :1]
    # choice k: escalate to MODES[k] (k = 0, instant, is no escalation at all)
    cascade_success = np.concatenate([first, first + wrong * success[:, 1:]], axis=1)
    cascade_tokens = np.concatenate([tokens[:, :1], tokens[:, :1] + wrong * tokens[:, 1:]], axis=1)
    best = _cheapest(_price_sweep(cascade_success, cascade_tokens), cascade_success, cascade_tokens, len(rows),
                     min_accuracy)
    if best is None:
        return None
    units = np.arange(len(rows))
    solved, spent = cascade_success[units, best].sum(), cascade_tokens[units, best].sum()
    reasoning = replay_policy(["reasoning"] * len(rows), rows)[1]
    picks = tuple(MODES[k] for k in best)
    return FrontierPoint(float(solved / len(rows)), float(spent / solved), float(1 - spent / solved / reasoning),
                         {m: picks.count(m) for m in MODES}, picks)


def family_policy(rows: Sequence[OracleRow], key: str = "family") -> dict[str, str] | None:
    """Each group's mode, chosen on `rows` as `group_frontier` chooses it at the aim's accuracy on them
    (the best fixed mode's less ACCURACY_SLACK). Chosen on one split (validation) and applied to another,
    it is a router that tells a query's group without error and has learnt nothing finer. None when no
    routing by group keeps up on `rows`."""
    if not rows:
        return None
    best = replay_policy([best_fixed_mode(rows)] * len(rows), rows)[0]
    point = group_frontier(rows, max(0.0, best - ACCURACY_SLACK), key)
    return None if point is None else point.groups


def best_fixed_mode(rows: Sequence[OracleRow]) -> str:
    """The mode that solves most of the rows when every row goes to it (ties: MODES order)."""
    return max(MODES, key=lambda m: sum(r.runs[m].success for r in rows))


def _point_json(point: FrontierPoint | None) -> dict[str, Any] | None:
    if point is None:
        return None
    out = {"accuracy": round(point.accuracy, 4), "tokens_per_pass": round(point.tokens_per_pass, 1),
           "cut_vs_reasoning": round(point.cut_vs_reasoning, 4), "mix": point.mix}
    return out if point.groups is None else {**out, "groups": point.groups}


def aim_summary(report: OracleReport, rows: Sequence[OracleRow]) -> dict[str, Any]:
    """JSON-ready: each strategy's halves of the aim, and the frontiers (per task, and per family
    when the rows name their family) at the aim's accuracy."""
    best = _best_fixed(report)
    target = max(0.0, (report.strategies[best].accuracy.value or 0.0) - ACCURACY_SLACK)
    by_family = group_frontier(rows, target) if any("family" in r.extra for r in rows) else None
    return {"accuracy_target": round(target, 4), "best_fixed": best, "strategies": meets_aim(report),
            "frontier": _point_json(frontier(rows, target)), "family_frontier": _point_json(by_family),
            "cascade_frontier": _point_json(cascade_frontier(rows, target))}


def format_aim(report: OracleReport, rows: Sequence[OracleRow]) -> str:
    """Who meets the aim (or half of it), and the frontiers at the aim's accuracy."""
    summary = aim_summary(report, rows)
    met = summary["strategies"]

    def names(test: Any) -> str:
        found = [k for k, v in met.items() if test(v)]
        return ", ".join(found) if found else "none"

    def reach(point: dict[str, Any], mix: str = "") -> str:
        mix = mix or " ".join(f"{m[0]}{c}" for m, c in point["mix"].items())
        return (f"{point['accuracy']:.1%} (the aim asks {summary['accuracy_target']:.1%}) at "
                f"{point['tokens_per_pass']:.1f} tokens per pass, {point['cut_vs_reasoning']:+.1%} vs "
                f"always-reasoning ({mix})")

    best = summary["best_fixed"]
    lines = [f"A²FM's aim (accuracy within {ACCURACY_SLACK * 100:g} points of the best fixed mode, {best} "
             f"{report.strategies[best].accuracy.value or 0.0:.1%}; tokens per pass at least {CUT_AIM:.0%} below "
             f"always-reasoning, the interval above 0): met by {names(lambda v: v['accuracy'] and v['cut'])}; "
             f"accuracy only: {names(lambda v: v['accuracy'] and not v['cut'])}; "
             f"cut only: {names(lambda v: v['cut'] and not v['accuracy'])}"]
    if (point := summary["frontier"]) is not None:
        lines.append(f"frontier: knowing every recorded outcome, a router reaches {reach(point)}")
    if (point := summary["family_frontier"]) is not None:
        lines.append(f"by family: sending each of the {len(point['groups'])} task families to one mode, chosen "
                     f"knowing every recorded outcome, reaches {reach(point)}")
    elif any("family" in r.extra for r in rows):
        lines.append("by family: no routing that sends each task family to one mode reaches the aim's accuracy")
    if (point := summary["cascade_frontier"]) is not None:
        escalated = f"{point['mix']['reasoning']} tasks escalate to reasoning, {point['mix']['agentic']} to agentic"
        lines.append("cascade: answering every task instantly first and, with a verifier that never errs, sending "
                     "each wrong instant answer on to the mode chosen knowing every recorded outcome, reaches "
                     f"{reach(point, escalated)}")
    return "\n".join(lines)


__all__ = ["ACCURACY_SLACK", "CUT_AIM", "EXACT_GROUPS", "FrontierPoint", "aim_summary", "best_fixed_mode",
           "cascade_frontier", "family_policy", "format_aim", "frontier", "group_frontier", "meets_aim",
           "replay_policy"]

"""Oracle labels from recorded runs, and how a router's choices fare against them.

A labels file (JSON Lines) holds one row per task and model: the task's query and split, and one
run per mode (success, tokens, latency). The oracle label is the mode that succeeded at the lowest
token cost (ties go to the cheaper mode in instant < reasoning < agentic), or 'none'. A routed
agent is scored with the recorded run of the mode its router chose: the runs are greedy, so
running that mode again would repeat it.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from agent.cost_of_pass import CostOfPass
from agent.errors import UserFacingError
from agent.ledger import PriceTable
from agent.plugin_api import MODES
from agent.routing.bootstrap import Interval, bootstrap, mean_interval, ratio_interval

NONE = "none"
"""The oracle label of a task no mode solved."""


@dataclass(frozen=True)
class ModeRun:
    """One recorded run of a task in one mode."""

    success: bool
    """Whether the grader passed the final answer."""
    tokens: int
    """Model tokens spent (input plus output)."""
    latency_s: float = 0.0
    """Wall time of the run when it was recorded."""
    output_tokens: int = 0
    """Generated tokens."""
    steps: int = 0
    """Model calls."""
    tool_calls: int = 0
    """Tool calls made."""
    termination: str = ""
    """Why the run ended."""
    answer: str = ""
    """The final answer text."""


def cheapest(runs: Mapping[str, ModeRun], modes: Iterable[str] = MODES) -> str:
    """The mode among `modes` whose run spent the fewest tokens; ties go to the earlier mode."""
    return min(modes, key=lambda m: runs[m].tokens)


def oracle_label(runs: Mapping[str, ModeRun]) -> str:
    """The cheapest mode (by tokens, ties to the earlier mode) whose run succeeded, or 'none'."""
    solved = [m for m in MODES if m in runs and runs[m].success]
    return cheapest(runs, solved) if solved else NONE


def _tally(picks: Iterable[str], keys: Iterable[str]) -> dict[str, int]:
    """How many of `picks` are each of `keys`."""
    counts = Counter(picks)
    return {k: counts[k] for k in keys}


@dataclass(frozen=True)
class OracleRow:
    """One line of a labels file: a task, one model's run in every mode, the oracle label."""

    id: str
    """Task id."""
    query: str
    """The query."""
    model: str
    """The model that ran it."""
    runs: dict[str, ModeRun]
    """mode → run."""
    split: str = "test"
    """Task split."""
    oracle: str = NONE
    """Cheapest mode that succeeded, or 'none' (recomputed from runs when read)."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Other task fields (kind, family, style, source_item…)."""

    def as_json(self) -> dict[str, Any]:
        """JSON-ready form (one line of a labels file)."""
        return {"id": self.id, "query": self.query, "model": self.model, "split": self.split,
                "oracle": self.oracle, "runs": {m: asdict(r) for m, r in self.runs.items()}, **self.extra}


def load_oracle(path: str | Path, model: str | None = None, split: str | None = None) -> list[OracleRow]:
    """Read a labels file, keeping one model's rows (None: all) and one split (None: all)."""
    path = Path(path)
    if not path.is_file():
        raise UserFacingError(f"no such labels file: {path}")
    rows = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
            runs = {m: ModeRun(**r) for m, r in item["runs"].items()}
            missing = [m for m in MODES if m not in runs]
            if missing:
                raise ValueError(f"no run for mode {', '.join(missing)}")
            row = OracleRow(
                id=item["id"], query=item["query"], model=item["model"], runs=runs, split=item.get("split", "test"),
                oracle=oracle_label(runs),
                extra={k: v for k, v in item.items() if k not in ("id", "query", "model", "runs", "split", "oracle")},
            )
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            raise UserFacingError(f"{path}:{number}: not a labels row ({exc})") from None
        if (model is None or row.model == model) and (split is None or row.split == split):
            rows.append(row)
    if not rows:
        models = sorted({json.loads(x)["model"] for x in path.read_text().splitlines() if x.strip()})
        raise UserFacingError(f"{path} has no rows for model {model!r} in split {split!r}; models: {', '.join(models)}")
    return rows


@dataclass(frozen=True)
class StrategyScore:
    """One strategy (a fixed mode, a router or the oracle): its cost-of-pass, the same CostOfPass
    that ledgers give (agent/cost_of_pass.py), with bootstrap intervals over tasks."""

    cost: CostOfPass
    """Tasks, tasks solved, tokens and list-price dollars of the recorded runs it picked."""
    accuracy: Interval
    """Share of tasks solved, with its interval (its value is cost.accuracy)."""
    tokens_per_pass: Interval
    """Total tokens / tasks solved, with its interval (its value is cost.tokens_per_pass; None:
    nothing solved)."""
    mix: dict[str, int]
    """How many tasks went to each mode."""
    agreement: Interval
    """Share of tasks sent to the oracle's mode (tasks labelled 'none' count as disagreement)."""
    cut_vs_reasoning: Interval
    """1 − tokens_per_pass / always-reasoning's tokens_per_pass, paired over resamples (positive:
    cheaper per pass; None at an end where the strategy solved nothing)."""
    router_tokens: int = 0
    """Tokens the router itself spent (the self-router's classification calls), included in cost."""


@dataclass(frozen=True)
class OracleReport:
    """Routers against the oracle labels: each strategy's agreement, accuracy and cost-of-pass."""

    n: int
    """Tasks scored."""
    unsolved: int
    """Tasks no mode solved (oracle 'none')."""
    labels: dict[str, int]
    """Oracle label counts."""
    strategies: dict[str, StrategyScore]
    """always-instant, always-reasoning, always-agentic, each router by name, oracle."""

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"n": self.n, "unsolved": self.unsolved, "labels": self.labels,
                "strategies": {k: {"agreement": s.agreement.as_dict(), "accuracy": s.accuracy.as_dict(),
                                   "tokens_per_pass": s.tokens_per_pass.as_dict(),
                                   "cut_vs_reasoning": s.cut_vs_reasoning.as_dict(), "tokens": s.cost.tokens,
                                   "router_tokens": s.router_tokens, "mix": s.mix}
                               for k, s in self.strategies.items()}}


def _cut(tokens: np.ndarray, passed: np.ndarray, base_tokens: np.ndarray, base_passed: np.ndarray,
         samples: int, seed: int) -> Interval:
    """1 − (Σtokens/Σpassed) / (Σbase_tokens/Σbase_passed) with a paired bootstrap interval."""

    def ratio(idx: np.ndarray) -> float:  # the cost ratio; larger is worse, inf when nothing passed
        wins, base_wins, base = passed[idx].sum(), base_passed[idx].sum(), base_tokens[idx].sum()
        if not wins:
            return math.inf
        if not base_wins or not base:
            return 0.0
        return float(tokens[idx].sum() / wins / (base / base_wins))

    r = bootstrap(len(tokens), ratio, samples=samples, seed=seed)

    def one_minus(x: float | None) -> float | None:
        return None if x is None else 1.0 - x

    return Interval(one_minus(r.value), one_minus(r.high), one_minus(r.low))


def _score(rows: Sequence[OracleRow], picks: Sequence[str], samples: int, seed: int,
           extra: Sequence[int] | None = None) -> StrategyScore:
    runs = [row.runs[m] for row, m in zip(rows, picks, strict=True)]
    extra = list(extra) if extra is not None else [0] * len(rows)
    passed_list = [float(r.success) for r in runs]
    tokens_list = [float(r.tokens + x) for r, x in zip(runs, extra, strict=True)]
    passed, tokens = np.array(passed_list), np.array(tokens_list)
    base = [row.runs["reasoning"] for row in rows]
    prices = PriceTable()
    dollars = sum(prices.price_for(row.model).dollars(r.tokens - r.output_tokens, r.output_tokens)
                  for row, r in zip(rows, runs, strict=True))
    cost = CostOfPass(attempts=len(runs), correct=sum(r.success for r in runs), tokens=int(tokens.sum()),
                      output_tokens=sum(r.output_tokens for r in runs), dollars=dollars)
    agree = [float(row.oracle == m) for row, m in zip(rows, picks, strict=True)]
    return StrategyScore(
        cost, mean_interval(passed_list, samples=samples, seed=seed),
        ratio_interval(tokens_list, passed_list, samples=samples, seed=seed), _tally(picks, MODES),
        mean_interval(agree, samples=samples, seed=seed),
        _cut(tokens, passed, np.array([float(r.tokens) for r in base]), np.array([float(r.success) for r in base]),
             samples, seed),
        router_tokens=sum(extra))


def score_oracle(rows: Sequence[OracleRow], routed: Sequence[str] | Mapping[str, Sequence[str]], *,
                 router_tokens: Mapping[str, Sequence[int]] | None = None, samples: int = 1000,
                 seed: int = 0) -> OracleReport:
    """Agreement with the oracle, accuracy and cost-of-pass of fixed modes, routers and the oracle.

    routed: one router's modes (scored as "routed") or several routers' by name; router_tokens:
    tokens a router spent per task (added to its cost). The same resampling seed is used for every
    statistic, so their intervals are paired. The oracle strategy answers an unsolved task with the
    cheapest mode's (failed) run.
    """
    routers = {"routed": routed} if not isinstance(routed, Mapping) else dict(routed)
    for name, picks in routers.items():
        if len(rows) != len(picks):
            raise ValueError(f"{len(rows)} rows but {len(picks)} routed modes for {name}")
    spent = router_tokens or {}
    strategies = {f"always-{m}": _score(rows, [m] * len(rows), samples, seed) for m in MODES}
    for name, picks in routers.items():
        strategies[name] = _score(rows, picks, samples, seed, spent.get(name))
    oracle_picks = [r.oracle if r.oracle != NONE else cheapest(r.runs) for r in rows]
    strategies["oracle"] = _score(rows, oracle_picks, samples, seed)
    labels = _tally((r.oracle for r in rows), (*MODES, NONE))
    return OracleReport(len(rows), labels[NONE], labels, strategies)


def format_oracle_report(report: OracleReport) -> str:
    """A plain-text table of the report."""

    def pct(i: Interval) -> str:
        return "n/a" if i.value is None else f"{i.value:6.1%} [{_p(i.low)}, {_p(i.high)}]"

    def tok(i: Interval) -> str:
        return "inf" if i.value is None else f"{i.value:8.1f} [{_t(i.low)}, {_t(i.high)}]"

    def cut(i: Interval) -> str:
        return "n/a" if i.value is None else f"{i.value:+7.1%} [{_s(i.low)}, {_s(i.high)}]"

    lines = [f"{report.n} tasks; oracle labels " + ", ".join(f"{k} {v}" for k, v in report.labels.items()), "",
             f"{'strategy':<16} {'agreement [95% CI]':<24} {'accuracy [95% CI]':<24} {'tokens/pass [95% CI]':<28} "
             f"{'cut vs reasoning':<26} mix"]
    for name, s in report.strategies.items():
        mix = " ".join(f"{m[0]}{c}" for m, c in s.mix.items())
        lines.append(f"{name:<16} {pct(s.agreement):<24} {pct(s.accuracy):<24} {tok(s.tokens_per_pass):<28} "
                     f"{cut(s.cut_vs_reasoning):<26} {mix}")
    return "\n".join(lines)


def _s(x: float | None) -> str:
    return "-inf" if x is None else f"{x:+.1%}"


def _p(x: float | None) -> str:
    return "inf" if x is None else f"{x:.1%}"


def _t(x: float | None) -> str:
    return "inf" if x is None else f"{x:.1f}"

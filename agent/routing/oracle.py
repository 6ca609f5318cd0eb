"""Oracle labels from recorded runs, and how a router's choices fare against them.

A labels file (JSON Lines) holds one row per task, model and pass: the task's query and split, and
one run per mode (success, tokens, latency). A pass is one way of sampling: greedy, or a seeded
temperature (`pass_name`). Reading merges a task's passes into one row whose runs hold each mode's
share of passing runs and its mean tokens (`merge_runs`). The oracle label is the cheapest mode (by
tokens, or with `prompt_weight` by generated tokens plus that weight × prompt tokens; ties go to the
cheaper mode in instant < reasoning < agentic) among those with the highest pass rate, or 'none' when
no run of any mode passed. A routed agent is scored with the recorded
runs of the mode its router chose: its expected success and mean tokens over the passes.
"""

from __future__ import annotations

import json
import math
import re
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
GREEDY = "greedy"
"""The pass name of greedy runs (and of rows written before passes were recorded)."""


def model_slug(model: str) -> str:
    """A model name as a file name: the cassette's, the labels file's, the model's own router's."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", model)


def pass_name(temperature: float, seed: int | None) -> str:
    """The name of a labelling pass: 'greedy' at temperature 0, else e.g. 't0.7-seed1'."""
    if temperature <= 0:
        return GREEDY
    if seed is None:
        raise ValueError("a pass at temperature > 0 needs a seed, or it cannot be recorded and replayed")
    return f"t{temperature:g}-seed{seed}"


@dataclass(frozen=True)
class ModeRun:
    """One recorded run of a task in one mode."""

    success: float
    """Whether the grader passed the final answer (True/False); merged over passes, the share that passed."""
    tokens: float
    """Model tokens spent (input plus output); merged, the mean."""
    latency_s: float = 0.0
    """Wall time of the run when it was recorded; merged, the mean."""
    output_tokens: float = 0
    """Generated tokens; merged, the mean."""
    steps: float = 0
    """Model calls; merged, the mean."""
    tool_calls: float = 0
    """Tool calls made; merged, the mean."""
    termination: str = ""
    """Why the run ended; merged, the first pass's."""
    answer: str = ""
    """The final answer text; merged, the first pass's."""
    passes: int = 1
    """Recorded runs this one stands for."""
    prompt_weight: float = 1.0
    """What a prompt token counts for against a generated one in `cost` (1: every token alike)."""

    @property
    def cost(self) -> float:
        """What routing pays for the run: generated tokens plus `prompt_weight` × prompt tokens."""
        return weighted_tokens(self.tokens, self.output_tokens, self.prompt_weight)


def weighted_tokens(tokens: float, output_tokens: float, prompt_weight: float) -> float:
    """`tokens` (prompt plus generated) with each prompt token counted as `prompt_weight` generated ones."""
    if prompt_weight == 1.0:
        return tokens
    return output_tokens + prompt_weight * (tokens - output_tokens)


def merge_runs(runs: Sequence[ModeRun]) -> ModeRun:
    """One mode's runs over several passes as one: the share that passed and the mean costs."""
    if len(runs) == 1:
        return runs[0]
    n = sum(r.passes for r in runs)

    def mean(field_: str) -> float:
        return sum(getattr(r, field_) * r.passes for r in runs) / n

    return ModeRun(success=mean("success"), tokens=mean("tokens"), latency_s=mean("latency_s"),
                   output_tokens=mean("output_tokens"), steps=mean("steps"), tool_calls=mean("tool_calls"),
                   termination=runs[0].termination, answer=runs[0].answer, passes=n,
                   prompt_weight=runs[0].prompt_weight)


def cheapest(runs: Mapping[str, ModeRun], modes: Iterable[str] = MODES) -> str:
    """The mode among `modes` whose run cost the least; ties go to the earlier mode."""
    return min(modes, key=lambda m: runs[m].cost)


def oracle_label(runs: Mapping[str, ModeRun]) -> str:
    """The cheapest mode (by cost, ties to the earlier mode) among those with the highest pass
    rate, or 'none' when nothing passed. With one run per mode: the cheapest mode that succeeded."""
    best = max((float(runs[m].success) for m in MODES if m in runs), default=0.0)
    if best <= 0:
        return NONE
    return cheapest(runs, [m for m in MODES if m in runs and float(runs[m].success) == best])


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
        runs = {m: {k: v for k, v in asdict(r).items() if k not in ("passes", "prompt_weight") or v != 1}
                for m, r in self.runs.items()}
        return {"id": self.id, "query": self.query, "model": self.model, "split": self.split,
                "oracle": self.oracle, "runs": runs, **self.extra}


def load_oracle(path: str | Path, model: str | None = None, split: str | None = None,
                passes: Iterable[str] | None = None, prompt_weight: float = 1.0) -> list[OracleRow]:
    """Read a labels file, keeping one model's rows (None: all), one split (None: all) and some
    passes (None: all), a task's passes merged into one row (`merge_runs`), in file order. Each
    run's cost, and so the oracle label, counts a prompt token as `prompt_weight` generated ones."""
    path = Path(path)
    if not path.is_file():
        raise UserFacingError(f"no such labels file: {path}")
    if not (math.isfinite(prompt_weight) and prompt_weight >= 0):
        raise UserFacingError(f"the prompt tokens' weight must be a number from 0 up, not {prompt_weight}")
    keep = None if passes is None else set(passes)
    groups: dict[tuple[str, str], list[tuple[str, OracleRow]]] = {}
    seen: dict[tuple[str, str, str], int] = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
            if prompt_weight != 1 and any("output_tokens" not in r for r in item["runs"].values()):
                raise ValueError("weighing prompt tokens needs each run's output_tokens")
            runs = {m: ModeRun(**{**r, "prompt_weight": prompt_weight}) for m, r in item["runs"].items()}
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
        name = str(row.extra.get("pass", GREEDY))
        key = (row.model, row.id, name)
        if key in seen:
            raise UserFacingError(f"{path}:{number}: task {row.id} of model {row.model} in pass {name} is "
                                  f"already on line {seen[key]}")
        seen[key] = number
        if (model is None or row.model == model) and (split is None or row.split == split) \
                and (keep is None or name in keep):
            groups.setdefault((row.model, row.id), []).append((name, row))
    if not groups:
        models = sorted({json.loads(x)["model"] for x in path.read_text().splitlines() if x.strip()})
        raise UserFacingError(f"{path} has no rows for model {model!r} in split {split!r}"
                              f"{'' if keep is None else f' and passes {sorted(keep)}'}; models: {', '.join(models)}")
    return [_merge(path, group) for group in groups.values()]


def _merge(path: Path, group: list[tuple[str, OracleRow]]) -> OracleRow:
    """A task's rows of several passes as one row (its greedy row's fields first)."""
    if len(group) == 1:
        return group[0][1]
    group = sorted(group, key=lambda g: (g[0] != GREEDY, g[0]))
    first = group[0][1]
    if any(row.split != first.split or row.query != first.query for _, row in group):
        raise UserFacingError(f"{path}: the passes of task {first.id} ({first.model}) disagree on its query or split")
    runs: dict[str, ModeRun] = {m: merge_runs([row.runs[m] for _, row in group]) for m in MODES}
    extra = {**first.extra, "pass": "+".join(name for name, _ in group)}
    return OracleRow(first.id, first.query, first.model, runs, first.split, oracle_label(runs), extra)


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
    tokens_list = [float(r.cost + x) for r, x in zip(runs, extra, strict=True)]
    passed, tokens = np.array(passed_list), np.array(tokens_list)
    base = [row.runs["reasoning"] for row in rows]
    prices = PriceTable()
    dollars = sum(prices.price_for(row.model).dollars(r.tokens - r.output_tokens, r.output_tokens)
                  for row, r in zip(rows, runs, strict=True))
    cost = CostOfPass(attempts=len(runs), correct=sum(r.success for r in runs), tokens=int(tokens.sum()),
                      output_tokens=int(round(sum(r.output_tokens for r in runs))), dollars=dollars)
    agree = [float(row.oracle == m) for row, m in zip(rows, picks, strict=True)]
    return StrategyScore(
        cost, mean_interval(passed_list, samples=samples, seed=seed),
        ratio_interval(tokens_list, passed_list, samples=samples, seed=seed), _tally(picks, MODES),
        mean_interval(agree, samples=samples, seed=seed),
        _cut(tokens, passed, np.array([float(r.cost) for r in base]), np.array([float(r.success) for r in base]),
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

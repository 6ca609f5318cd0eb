"""Train the offline router on oracle labels, and measure the success matrix of the cost-aware policy.

    python -m agent.routing.train --labels labels.jsonl [--model NAME] [--none drop|cheapest] [--out PATH]

The router learns, from the labels file's **train** split, the oracle label of each task: the
cheapest mode that actually succeeded with that model (agent/routing/oracle.py). Tasks that no
mode solved ("none") are dropped by default: no mode is right for them, so they say nothing about
which mode a query needs. `--none cheapest` instead labels them with the mode whose failed run
cost least, which is what the oracle strategy does with them, and teaches the router to spend
little on queries like them.

On the **validation** split it measures S[m][l], the share of tasks with oracle label l that mode
m solved, which the cost-aware policy uses as P(success | run in m, needs l), and on the train
split the mean tokens of each mode. Both are stored in the weights' metadata, so
`CostAwareRouter(weights=PATH)` uses them. A cell with few tasks is pulled toward the default
(1 when m is not cheaper than l, else 0) by one pseudo-task, so an empty column is the default.

`--target frontier` trains on another label instead: each train task's mode in the cheapest routing
of the train split (tokens per pass) that keeps accuracy within ACCURACY_SLACK of its best fixed
mode (agent/routing/aim.py). The oracle label wants every task solved; this one gives up the tasks
whose only win is dear, which is what A²FM's aim asks.

The cost-aware policy's threshold is chosen on the validation split too (`tune_threshold`): the
value whose routed tokens per correct answer are lowest among those whose routed accuracy is
within `ACCURACY_SLACK` of the best fixed mode's, A²FM's aim (about the same accuracy, for less).
The test split is never looked at.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from agent.errors import UserFacingError
from agent.plugin_api import MODES
from agent.routing.aim import ACCURACY_SLACK, frontier, replay_policy
from agent.routing.cost import ModeCost, default_success
from agent.routing.offline import DATA_DIR, RouterWeights
from agent.routing.oracle import NONE, OracleRow, cheapest, load_oracle, model_slug
from agent.routing.router_eval import LabeledQuery

ORACLE_WEIGHTS = DATA_DIR / "oracle_router.npz"
"""The router trained on the oracle labels of BEST_MODEL (the source-label router stays offline_router.npz)."""
BEST_MODEL = "local:qwen2.5-coder-1.5b"
"""The best bundled model, whose router is the default one."""


def oracle_weights_path(model: str) -> Path:
    """Where the router trained on model's oracle labels is written and looked for."""
    return ORACLE_WEIGHTS if model == BEST_MODEL else DATA_DIR / f"oracle_router.{model_slug(model)}.npz"


def oracle_weights_for(model: str | None) -> Path:
    """The shipped router trained on model's labels when there is one, else the best model's."""
    own = oracle_weights_path(model) if model else ORACLE_WEIGHTS
    return own if own.is_file() else ORACLE_WEIGHTS
NonePolicy = Literal["drop", "cheapest"]
Target = Literal["oracle", "frontier"]
THRESHOLDS = tuple(round(0.05 * i, 2) for i in range(1, 20))
"""The thresholds tried: 0.05 … 0.95."""


@dataclass(frozen=True)
class SuccessMatrix:
    """S[m][l]: the share of tasks with oracle label l that mode m solved, measured on a split."""

    success: dict[str, dict[str, float]]
    """mode m → oracle label l → smoothed share solved."""
    counts: dict[str, int]
    """Tasks per oracle label l (tasks labelled none are not counted)."""

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"success": self.success, "counts": self.counts}


def training_rows(rows: Sequence[OracleRow], none: NonePolicy = "drop") -> list[LabeledQuery]:
    """The router's training queries: each row's query with its oracle label (see the module doc for none)."""
    out = []
    for row in rows:
        label = row.oracle
        if label == NONE:
            if none == "drop":
                continue
            label = cheapest(row.runs)
        out.append(LabeledQuery(row.query, label, {"id": row.id}))
    return out


def frontier_rows(rows: Sequence[OracleRow]) -> list[LabeledQuery]:
    """The router's training queries for the `frontier` target: each row's mode in the cheapest
    routing (tokens per pass) of these rows that keeps accuracy within ACCURACY_SLACK of their best
    fixed mode (agent/routing/aim.py), so hopeless and dear tasks are labelled with a cheap mode."""
    point = frontier(rows, max(0.0, best_fixed_accuracy(rows) - ACCURACY_SLACK))
    if point is None:
        return []
    return [LabeledQuery(r.query, m, {"id": r.id}) for r, m in zip(rows, point.picks, strict=True)]


def success_matrix(rows: Sequence[OracleRow]) -> SuccessMatrix:
    """S[m][l] over rows, each cell (solved + default) / (tasks + 1)."""
    prior = default_success()
    counts = Counter(r.oracle for r in rows if r.oracle != NONE)
    success: dict[str, dict[str, float]] = {}
    for m in MODES:
        success[m] = {}
        for label in MODES:
            solved = sum(r.runs[m].success for r in rows if r.oracle == label)
            success[m][label] = round((solved + prior[m][label]) / (counts[label] + 1), 4)
    return SuccessMatrix(success, {label: counts[label] for label in MODES})


def mode_costs(rows: Sequence[OracleRow]) -> dict[str, ModeCost]:
    """Mean input and output tokens of each mode's runs."""
    if not rows:
        raise ValueError("no rows to measure mode costs on")
    out: dict[str, ModeCost] = {}
    for m in MODES:
        runs = [r.runs[m] for r in rows]
        output = sum(x.output_tokens for x in runs) / len(runs)
        out[m] = ModeCost(input_tokens=round(sum(x.tokens for x in runs) / len(runs) - output, 1),
                          output_tokens=round(output, 1))
    return out


@dataclass(frozen=True)
class ThresholdTrial:
    """The cost-aware policy at one threshold, replayed on recorded runs."""

    threshold: float
    """The threshold tried."""
    accuracy: float
    """Share of tasks whose routed mode succeeded (pass rates where a task has several passes)."""
    tokens_per_pass: float
    """Tokens of the routed runs over the tasks solved (inf when none is)."""


def best_fixed_accuracy(rows: Sequence[OracleRow]) -> float:
    """The accuracy of the best of always-instant, always-reasoning and always-agentic on the rows."""
    return max(replay_policy([m] * len(rows), rows)[0] for m in MODES)


def tune_threshold(needs: Sequence[dict[str, float]], rows: Sequence[OracleRow], success: dict[str, dict[str, float]],
                   costs: dict[str, ModeCost]) -> tuple[float, list[ThresholdTrial]]:
    """The threshold (see the module doc) for rows whose router probabilities are `needs`, and every trial."""
    from agent.routing.cost import DEFAULT_THRESHOLD, CostAwareRouter

    if not rows:
        raise ValueError("no rows to tune the threshold on")
    best_fixed = best_fixed_accuracy(rows)
    trials = []
    for threshold in THRESHOLDS:
        policy = CostAwareRouter(threshold=threshold, success=success, costs=costs)  # choose() needs no router
        trials.append(ThresholdTrial(threshold, *replay_policy([policy.choose(n).mode for n in needs], rows)))
    feasible = [t for t in trials if t.accuracy >= best_fixed - ACCURACY_SLACK - 1e-9]
    # Ties go to the threshold nearest the default: the validation split gave no reason to move further.
    if feasible:
        chosen = min(feasible, key=lambda t: (t.tokens_per_pass, -t.accuracy, abs(t.threshold - DEFAULT_THRESHOLD)))
    else:  # no threshold keeps up: the most accurate, then the cheapest
        chosen = min(trials, key=lambda t: (-t.accuracy, t.tokens_per_pass, abs(t.threshold - DEFAULT_THRESHOLD)))
    return chosen.threshold, trials


def only_model(path: Path, model: str | None) -> str:
    """The model whose rows to use: `model`, or the file's only model."""
    if model is not None:
        return model
    models = sorted({r.model for r in load_oracle(path)})
    if len(models) != 1:
        raise UserFacingError(f"{path} holds rows of {len(models)} models ({', '.join(models)}); pass --model")
    return models[0]


def train_on_labels(path: Path, model: str | None = None, none: NonePolicy = "drop",
                    config: Any = None, target: Target = "oracle") -> tuple[RouterWeights, dict[str, Any]]:
    """Fit the router on the train split's oracle labels (or, with target "frontier", on each task's
    mode in the train split's frontier routing); measure S on validation and costs on train."""
    from agent.embeddings import embed_texts
    from agent.routing.fit import SEED, RouterTrainConfig, accuracy, augment, fit

    config = config or RouterTrainConfig()
    name = only_model(path, model)
    everything = load_oracle(path, model=name)
    train = [r for r in everything if r.split == "train"]
    validation = [r for r in everything if r.split == "validation"]
    labelled = training_rows(train, none) if target == "oracle" else frontier_rows(train)
    if len({q.mode for q in labelled}) < 2:
        raise UserFacingError(
            f"{path}: the train split has {len(labelled)} usable rows for {name} with "
            f"{len({q.mode for q in labelled})} distinct oracle labels; label more tasks first")
    rows = augment(labelled, config.augment_copies) if config.augment_copies else labelled
    weights = fit(rows, embed_texts([r.query for r in rows]), config)
    matrix = success_matrix(validation)
    costs = mode_costs(train)
    results: dict[str, Any] = {"train": accuracy(weights, labelled, embed_texts)}
    held = training_rows(validation, none) if target == "oracle" else frontier_rows(validation)
    if held:
        results["validation"] = accuracy(weights, held, embed_texts)
    threshold: float | None = None
    trials: list[ThresholdTrial] = []
    if validation:
        from agent.routing.offline import OfflineRouter

        needs = OfflineRouter(weights).predict_proba([r.query for r in validation])
        # rounded as OfflineRouter.scores rounds them for the live policy
        threshold, trials = tune_threshold([{m: round(float(x), 4) for m, x in zip(MODES, p, strict=True)} for p in needs],
                                           validation, matrix.success, costs)
    weights.meta = {
        "trained_on": "oracle labels",
        "target": target,
        "labels_file": str(path),
        "model": name,
        "none": none,
        "train_rows": len(train),
        "train_queries": len(labelled),
        "training_rows": len(rows),
        "label_counts": dict(Counter(r.oracle for r in train)),
        "validation_rows": len(validation),
        "success": matrix.success,
        "success_counts": matrix.counts,
        "mode_costs": {m: {"input_tokens": c.input_tokens, "output_tokens": c.output_tokens} for m, c in costs.items()},
        "threshold": threshold,
        "threshold_trials": [{"threshold": t.threshold, "accuracy": round(t.accuracy, 4),
                              "tokens_per_pass": round(t.tokens_per_pass, 1)} for t in trials],
        "features": _feature_names(),
        "modes": list(MODES),
        "config": config.__dict__,
        "seed": SEED,
        "results": results,
    }
    return weights, weights.meta


def _feature_names() -> list[str]:
    from agent.routing.features import FEATURE_NAMES

    return list(FEATURE_NAMES)


__all__ = ["ACCURACY_SLACK", "BEST_MODEL", "ORACLE_WEIGHTS", "oracle_weights_for", "oracle_weights_path", "best_fixed_accuracy", "frontier_rows", "ThresholdTrial", "replay_policy", "tune_threshold", "SuccessMatrix", "mode_costs", "success_matrix", "train_on_labels", "training_rows"]

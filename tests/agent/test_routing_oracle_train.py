"""The offline router trained on oracle labels, its measured success matrix, and the all-router comparison."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent.cli.main import main as rein_main
from agent.routing import CostAwareRouter, OfflineRouter
from agent.routing.oracle import ModeRun, OracleRow, load_oracle, oracle_label, score_oracle
from agent.routing.oracle_train import mode_costs, success_matrix, training_rows
from agent.routing.train import main as train_main

COUNTRIES = ["France", "Peru", "Kenya", "Japan", "Chile", "Norway", "Egypt", "Canada", "India", "Spain",
             "Ghana", "Italy", "Nepal", "Cuba", "Laos", "Fiji", "Iran", "Mali"]


def _runs(instant: bool, reasoning: bool, agentic: bool) -> dict[str, ModeRun]:
    return {"instant": ModeRun(instant, 60, output_tokens=10), "reasoning": ModeRun(reasoning, 250, output_tokens=150),
            "agentic": ModeRun(agentic, 800, output_tokens=100)}


def _rows() -> list[OracleRow]:
    """Three clearly different kinds of query, each solved first by a different mode, plus unsolved ones."""
    rows = []
    for i, country in enumerate(COUNTRIES):
        split = ("train", "train", "validation", "test")[i % 4]
        made = [
            (f"inst-{i}", f"What is the capital of {country}?", _runs(True, True, i % 3 != 0)),
            (f"reas-{i}", f"A shop packs {i + 3} boxes with {i + 7} pens in each box and sells {i + 2} boxes. "
                          "How many pens are left?", _runs(False, True, True)),
            (f"agen-{i}", f"Look up order #W{2378150 + i} in the store database and tell me its status.",
             _runs(False, False, True)),
            (f"none-{i}", f"Recite the {i + 40}th digit of the binary expansion of the {country} flag's area.",
             _runs(False, False, False)),
        ]
        for rid, query, runs in made:
            rows.append(OracleRow(rid, query, "scripted", runs, split=split, oracle=oracle_label(runs),
                                  extra={"self_route": {"mode": "agentic" if rid.startswith("agen") else "reasoning",
                                                        "tokens": 40}}))
    return rows


def _write(rows: list[OracleRow], path: Path) -> Path:
    path.write_text("".join(json.dumps(r.as_json()) + "\n" for r in rows))
    return path


def test_success_matrix_is_measured_per_oracle_label_with_one_pseudo_task() -> None:
    validation = [r for r in _rows() if r.split == "validation"]
    matrix = success_matrix(validation)
    n = {m: sum(r.oracle == m for r in validation) for m in ("instant", "reasoning", "agentic")}
    assert matrix.counts == n and n["instant"] > 0
    solved_by_agentic = sum(r.runs["agentic"].success for r in validation if r.oracle == "instant")
    assert 0 < solved_by_agentic < n["instant"]
    assert matrix.success["agentic"]["instant"] == round((solved_by_agentic + 1) / (n["instant"] + 1), 4)
    assert matrix.success["instant"]["reasoning"] == 0.0  # instant never solved a reasoning task
    assert matrix.success["reasoning"]["reasoning"] == 1.0
    empty = success_matrix([])
    assert empty.success["agentic"]["instant"] == 1.0 and empty.success["instant"]["agentic"] == 0.0


def test_none_rows_are_dropped_or_given_the_cheapest_mode() -> None:
    rows = [r for r in _rows() if r.split == "train"]
    dropped = training_rows(rows)
    assert not any(q.extra["id"].startswith("none") for q in dropped)
    assert len(dropped) == 3 * len(rows) // 4
    kept = training_rows(rows, none="cheapest")
    assert {q.mode for q in kept if q.extra["id"].startswith("none")} == {"instant"}
    assert mode_costs(rows)["agentic"].tokens == 800


@pytest.mark.slow
def test_training_on_labels_writes_a_router_whose_cost_policy_uses_the_measured_matrix(tmp_path: Path, capsys) -> None:
    labels = _write(_rows(), tmp_path / "labels.jsonl")
    out = tmp_path / "oracle.npz"
    assert train_main(["--labels", str(labels), "--out", str(out)]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["train_queries"] == 3 * summary["train_rows"] // 4 and summary["none"] == "drop"
    assert summary["success"] == success_matrix([r for r in _rows() if r.split == "validation"]).success

    router = OfflineRouter(out)
    assert router.weights.meta["trained_on"] == "oracle labels" and router.weights.meta["model"] == "scripted"
    test = [r for r in _rows() if r.split == "test" and r.oracle != "none"]
    picked = [router.route_sync(r.query).mode for r in test]
    assert sum(p == r.oracle for p, r in zip(picked, test, strict=True)) >= len(test) - 1

    cost = CostAwareRouter(weights=out)
    assert cost.success == summary["success"]
    assert cost.cost_of("agentic") == 800 and cost.cost_of("instant") == 60
    assert CostAwareRouter(weights=out, success={m: {n: 1.0 for n in cost.success} for m in cost.success}).success[
        "instant"]["agentic"] == 1.0  # an explicit matrix wins

    # one model's labels only; a file of two models needs --model
    two = _write(_rows() + [OracleRow("x", "q", "other", _runs(True, True, True), split="train")], tmp_path / "two.jsonl")
    assert train_main(["--labels", str(two), "--out", str(tmp_path / "x.npz")]) == 2
    assert "pass --model" in capsys.readouterr().err

    # every router side by side on the test split
    assert rein_main(["route", "eval", "--data", str(labels), "--model", "scripted", "--oracle-weights", str(out),
                      "--json", "--samples", "100"]) == 0
    report = json.loads(capsys.readouterr().out)
    strategies = report["strategies"]
    assert list(strategies) == ["always-instant", "always-reasoning", "always-agentic", "offline-src", "cost-src",
                                "offline-oracle", "cost-oracle", "self", "oracle"]
    assert strategies["always-reasoning"]["cut_vs_reasoning"]["value"] == 0.0
    assert strategies["oracle"]["agreement"]["value"] == 1 - report["unsolved"] / report["n"]
    assert strategies["self"]["router_tokens"] == 40 * report["n"]
    assert strategies["offline-oracle"]["agreement"]["value"] >= (len(test) - 1) / report["n"]
    assert report["notes"] == [f"cost-oracle threshold {router.weights.meta['threshold']:g} (tuned on the validation split)"]


@pytest.mark.slow
def test_comparison_says_what_is_missing(tmp_path: Path, capsys) -> None:
    rows = [OracleRow(r.id, r.query, r.model, r.runs, split=r.split, oracle=r.oracle) for r in _rows()]
    labels = _write(rows, tmp_path / "labels.jsonl")
    assert rein_main(["route", "eval", "--data", str(labels), "--model", "scripted", "--oracle-weights",
                      str(tmp_path / "absent.npz"), "--samples", "50"]) == 0
    text = capsys.readouterr().out
    n = len(load_oracle(labels, split="test"))
    assert "no oracle-label router at" in text and f"self-router left out: {n} of {n} rows" in text
    assert "offline-src" in text and "cost-src" in text and "offline-oracle" not in text


def test_cut_vs_reasoning_is_paired_and_undefined_without_a_pass() -> None:
    rows = [r for r in _rows() if r.split == "test"]
    report = score_oracle(rows, {"cheap": ["instant"] * len(rows)}, samples=200)
    inst, reas = report.strategies["always-instant"], report.strategies["always-reasoning"]
    expected = 1 - inst.tokens_per_pass.value / reas.tokens_per_pass.value  # type: ignore[operator]
    assert inst.cut_vs_reasoning.value == pytest.approx(expected)
    low, high = inst.cut_vs_reasoning.low, inst.cut_vs_reasoning.high
    assert low is not None and high is not None and low <= expected <= high
    nothing = [OracleRow(r.id, r.query, r.model, _runs(False, True, False), split="test") for r in rows]
    never = score_oracle(nothing, {"x": ["instant"] * len(rows)}, samples=50).strategies["x"]
    assert never.cut_vs_reasoning.value is None and never.tokens_per_pass.value is None


def _needs(instant: float, reasoning: float, agentic: float) -> dict[str, float]:
    return {"instant": instant, "reasoning": reasoning, "agentic": agentic}


def test_the_threshold_is_the_cheapest_that_keeps_accuracy_within_two_points_of_the_best_fixed_mode() -> None:
    from agent.routing.cost import ModeCost, default_success
    from agent.routing.oracle_train import ACCURACY_SLACK, replay_policy, tune_threshold

    costs = {"instant": ModeCost(50, 10), "reasoning": ModeCost(100, 150), "agentic": ModeCost(700, 100)}
    # 10 tasks: 6 instant ones the router is fairly sure of, 3 reasoning ones it doubts, one agentic one
    rows = ([OracleRow(f"i{i}", "q", "m", _runs(True, True, True), oracle="instant") for i in range(6)]
            + [OracleRow(f"r{i}", "q", "m", _runs(False, True, True), oracle="reasoning") for i in range(3)]
            + [OracleRow("a", "q", "m", _runs(False, False, True), oracle="agentic")])
    needs = [_needs(0.9, 0.1, 0.0)] * 6 + [_needs(0.45, 0.5, 0.05)] * 3 + [_needs(0.1, 0.2, 0.7)]
    threshold, trials = tune_threshold(needs, rows, default_success(), costs)
    assert [t.threshold for t in trials] == [round(0.05 * i, 2) for i in range(1, 20)]
    best_fixed = replay_policy(["agentic"] * 10, rows)[0]
    assert best_fixed == 1.0
    chosen = next(t for t in trials if t.threshold == threshold)
    feasible = [t for t in trials if t.accuracy >= best_fixed - ACCURACY_SLACK]
    # every task solved, at the lowest tokens per pass: instant for the sure ones, reasoning for the doubted ones
    assert chosen.accuracy == 1.0 and chosen.tokens_per_pass == min(t.tokens_per_pass for t in feasible)
    assert threshold == 0.8  # 0.5 … 0.9 route alike here; the tie goes to the default
    assert chosen.tokens_per_pass == (6 * 60 + 3 * 250 + 800) / 10
    # a low threshold sends the doubted reasoning tasks to instant: cheaper, but it fails them
    low = next(t for t in trials if t.threshold == 0.4)
    assert low.accuracy == 0.7

    # when no threshold keeps up, the most accurate wins (then the cheapest)
    threshold, trials = tune_threshold([_needs(1.0, 0.0, 0.0)] * 10, rows, default_success(), costs)
    assert all(t.accuracy == 0.6 for t in trials) and threshold == 0.8


def test_trained_weights_carry_the_tuned_threshold_and_the_policy_uses_it(tmp_path: Path, capsys) -> None:
    labels = _write(_rows(), tmp_path / "labels.jsonl")
    out = tmp_path / "oracle.npz"
    assert train_main(["--labels", str(labels), "--out", str(out)]) == 0
    capsys.readouterr()
    meta = OfflineRouter(out).weights.meta
    assert meta["threshold"] in [t["threshold"] for t in meta["threshold_trials"]]
    assert len(meta["threshold_trials"]) == 19
    assert CostAwareRouter(weights=out).threshold == meta["threshold"]
    assert CostAwareRouter(weights=out, threshold=0.5).threshold == 0.5  # an explicit one wins
    assert CostAwareRouter().threshold == 0.8  # weights without a tuned one
    with pytest.raises(ValueError, match="between 0 and 1"):
        CostAwareRouter(threshold=1.5)


def test_frontier_labels_give_up_a_dear_win_the_aim_does_not_need(tmp_path: Path, capsys) -> None:
    from agent.routing.oracle_train import frontier_rows

    # 59 tasks instant solves and one only agentic solves: giving it up costs 1.7 points of accuracy
    rows = [OracleRow(f"i{i}", f"What is the capital of {COUNTRIES[i % 18]}?", "m", _runs(True, True, True),
                      split="train", oracle="instant") for i in range(59)]
    rows.append(OracleRow("a", "Look up order #W2378150.", "m", _runs(False, False, True), split="train",
                          oracle="agentic"))
    labels = {q.extra["id"]: q.mode for q in frontier_rows(rows)}
    assert labels["a"] == "instant" and set(labels.values()) == {"instant"}
    # with a quarter of the tasks agentic-only, giving them up is not within 2 points: they stay agentic
    labels = {q.extra["id"]: q.mode for q in frontier_rows([r for r in _rows() if r.split == "train"])}
    assert {labels[r.id] for r in _rows() if r.split == "train" and r.oracle == "agentic"} == {"agentic"}
    assert {labels[r.id] for r in _rows() if r.split == "train" and r.oracle == "none"} == {"instant"}

    out = tmp_path / "frontier.npz"
    assert train_main(["--labels", str(_write(_rows(), tmp_path / "labels.jsonl")), "--out", str(out),
                       "--target", "frontier"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["target"] == "frontier" and summary["train_queries"] == summary["train_rows"]
    assert OfflineRouter(out).weights.meta["target"] == "frontier"


def test_each_model_s_router_has_its_own_file_and_the_best_model_s_is_the_default(tmp_path: Path, monkeypatch) -> None:
    from agent.routing import oracle_train

    monkeypatch.setattr(oracle_train, "DATA_DIR", tmp_path)
    monkeypatch.setattr(oracle_train, "ORACLE_WEIGHTS", tmp_path / "oracle_router.npz")
    small = oracle_train.oracle_weights_path("local:qwen2.5-coder-0.5b")
    assert small == tmp_path / "oracle_router.local_qwen2.5-coder-0.5b.npz"
    assert oracle_train.oracle_weights_path(oracle_train.BEST_MODEL) == tmp_path / "oracle_router.npz"
    # Until a model's own router ships, its evaluation falls back to the best model's.
    assert oracle_train.oracle_weights_for("local:qwen2.5-coder-0.5b") == tmp_path / "oracle_router.npz"
    small.write_bytes(b"")
    assert oracle_train.oracle_weights_for("local:qwen2.5-coder-0.5b") == small
    assert oracle_train.oracle_weights_for(None) == tmp_path / "oracle_router.npz"

"""Oracle labels from scripted runs, cassette replay, the bootstrap, and `rein route eval` on labels."""

from __future__ import annotations

import asyncio
import json
import math
from pathlib import Path

import pytest

from agent.cli.main import main
from agent.errors import UserFacingError
from agent.messages import ModelRequest
from agent.models import CassetteModel, FunctionModel
from agent.routing.bootstrap import mean_interval, ratio_interval
from agent.routing.oracle import ModeRun, load_oracle, oracle_label, score_oracle
from scenarios.routing_tasks import load_tasks
from scenarios.routing_tasks.labeling import label_tasks
from scenarios.routing_tasks.labeling import main as label_main

TASKS = load_tasks(split="test")
PICK = [next(t for t in TASKS if t.family == f) for f in ("trivia", "gsm8k", "bignum", "convert")]


def _answers_only_when_reasoning(request: ModelRequest) -> str:
    """A model that knows every gold answer but says it only when told to think step by step."""
    system = request.messages[0].text if request.messages else ""
    user = next(m.text for m in reversed(request.messages) if m.role == "user")
    task = next(t for t in PICK if t.query == user)
    if "step by step" in system:
        return f"<reasoning>working it out</reasoning>{task.grader.answer}"
    if task.family == "convert":  # instant knows conversions
        return task.grader.answer
    return "I am not sure."


def test_oracle_label_is_the_cheapest_mode_that_succeeded() -> None:
    runs = {"instant": ModeRun(False, 10), "reasoning": ModeRun(True, 90), "agentic": ModeRun(True, 60)}
    assert oracle_label(runs) == "agentic"
    runs["instant"] = ModeRun(True, 60)
    assert oracle_label(runs) == "instant"  # a tie goes to the cheaper mode
    assert oracle_label({m: ModeRun(False, 1) for m in runs}) == "none"


def test_labeling_scripted_model_and_replaying_its_cassette(tmp_path: Path) -> None:
    cassette = tmp_path / "function.jsonl"
    model = CassetteModel(cassette, FunctionModel(_answers_only_when_reasoning), mode="auto")
    rows, skipped = asyncio.run(label_tasks(model, PICK, model_name="function"))
    assert skipped == []
    labels = {r.id.split("-")[0]: r.oracle for r in rows}
    assert labels == {"trivia": "reasoning", "gsm8k": "reasoning", "bignum": "reasoning", "convert": "instant"}
    assert all(r.runs["instant"].tokens > 0 and r.runs["agentic"].steps >= 1 for r in rows)
    assert not rows[0].runs["instant"].success
    # replay: no inner model at all, the same labels and tokens
    replayed, _ = asyncio.run(label_tasks(CassetteModel(cassette, mode="replay"), PICK, model_name="function"))
    assert [(r.oracle, {m: x.tokens for m, x in r.runs.items()}) for r in replayed] == \
        [(r.oracle, {m: x.tokens for m, x in r.runs.items()}) for r in rows]


def test_labeling_command_replays_and_route_eval_reports_intervals(tmp_path: Path, capsys) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps(t.as_json()) + "\n" for t in PICK))
    cassettes = tmp_path / "cassettes"
    asyncio.run(label_tasks(CassetteModel(cassettes / "echo.jsonl", FunctionModel(_answers_only_when_reasoning)),
                            PICK, model_name="echo"))
    out = tmp_path / "labels.jsonl"
    assert label_main(["--model", "echo", "--tasks", str(tasks), "--cassettes", str(cassettes), "--replay",
                       "--out", str(out)]) == 0
    assert "reasoning 3" in capsys.readouterr().out
    assert len(load_oracle(out, model="echo")) == 4
    assert main(["route", "eval", "--data", str(out), "--model", "echo", "--router", "self", "--json",
                 "--samples", "200"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["n"] == 4 and report["labels"]["reasoning"] == 3
    assert report["strategies"]["oracle"]["accuracy"]["value"] == 1.0
    assert report["strategies"]["always-reasoning"]["accuracy"]["value"] == 1.0
    assert report["strategies"]["always-instant"]["accuracy"]["value"] == 0.25
    agreement = report["strategies"]["routed"]["agreement"]
    assert 0.0 <= agreement["low"] <= agreement["value"] <= agreement["high"]
    assert main(["route", "eval", "--data", str(out), "--model", "nobody", "--router", "self"]) == 2


def test_bootstrap_interval_covers_the_mean_and_narrows_with_n() -> None:
    small = mean_interval([1, 0] * 10, samples=500)
    large = mean_interval([1, 0] * 500, samples=500)
    assert small.value == large.value == 0.5
    s_low, s_high, l_low, l_high = small.low, small.high, large.low, large.high
    assert s_low is not None and s_high is not None and l_low is not None and l_high is not None
    assert s_low < 0.5 < s_high and l_low < 0.5 < l_high
    assert (l_high - l_low) < (s_high - s_low) / 3
    assert mean_interval([1, 1, 1]).as_dict() == {"value": 1.0, "low": 1.0, "high": 1.0}
    assert mean_interval([1, 0] * 10, samples=300, seed=7) == mean_interval([1, 0] * 10, samples=300, seed=7)


def test_bootstrap_cost_of_pass_is_undefined_without_a_pass() -> None:
    none = ratio_interval([10, 10], [0, 0], samples=100)
    assert none.value is None and none.high is None
    one = ratio_interval([10, 10, 10, 10], [1, 0, 0, 0], samples=400)
    assert one.value == pytest.approx(40.0)
    assert one.high is None  # some resamples hold no pass: the upper end is infinite
    sure = ratio_interval([5] * 50, [1] * 50, samples=100)
    assert sure.value == sure.low == sure.high == 5.0
    assert math.isfinite(sure.low)


def test_score_oracle_pairs_strategies_on_the_same_rows() -> None:
    from agent.routing.oracle import OracleRow

    rows = [OracleRow(str(i), "q", "m", {"instant": ModeRun(i % 2 == 0, 10), "reasoning": ModeRun(True, 50),
                                         "agentic": ModeRun(True, 200)}) for i in range(20)]
    rows = [OracleRow(r.id, r.query, r.model, r.runs, oracle=oracle_label(r.runs)) for r in rows]
    report = score_oracle(rows, [r.oracle for r in rows], samples=200)
    assert report.strategies["routed"].agreement.value == 1.0
    assert report.strategies["routed"].accuracy.value == 1.0
    assert report.strategies["oracle"].tokens_per_pass.value == pytest.approx((10 * 10 + 10 * 50) / 20)
    assert report.strategies["always-instant"].accuracy.value == 0.5


def test_each_strategy_is_a_cost_of_pass_with_intervals_and_list_price_dollars() -> None:
    from agent.ledger import DEFAULT_PRICES
    from agent.routing.oracle import OracleRow

    runs = {"instant": ModeRun(False, 100, output_tokens=20), "reasoning": ModeRun(True, 1000, output_tokens=400),
            "agentic": ModeRun(True, 3000, output_tokens=500)}
    rows = [OracleRow("a", "q", "gpt-4o-mini", runs, oracle=oracle_label(runs)),
            OracleRow("b", "q", "local:qwen2.5-coder-0.5b", runs, oracle=oracle_label(runs))]
    report = score_oracle(rows, ["instant", "agentic"], samples=50)
    routed = report.strategies["routed"]
    assert (routed.cost.attempts, routed.cost.correct, routed.cost.tokens) == (2, 1, 3100)
    assert routed.accuracy.value == routed.cost.accuracy == 0.5
    assert routed.tokens_per_pass.value == routed.cost.tokens_per_pass == 3100
    # Only the priced model costs dollars: its instant run (the local model is free).
    assert routed.cost.dollars == pytest.approx(DEFAULT_PRICES["gpt-4o-mini"].dollars(80, 20))
    assert report.strategies["always-reasoning"].cost.dollars == pytest.approx(
        DEFAULT_PRICES["gpt-4o-mini"].dollars(600, 400))
    assert report.as_dict()["strategies"]["routed"]["tokens"] == 3100


def _row_line(task: str, split: str, pass_: str | None, success: dict[str, bool], tokens: dict[str, int]) -> str:
    row = {"id": task, "query": f"q {task}", "model": "m", "split": split,
           "runs": {m: {"success": success[m], "tokens": tokens[m]} for m in success}}
    if pass_ is not None:
        row["pass"] = pass_
    return json.dumps(row) + "\n"


def test_passes_of_a_task_merge_into_pass_rates_and_mean_tokens(tmp_path: Path) -> None:
    path = tmp_path / "labels.jsonl"
    tokens = {"instant": 10, "reasoning": 100, "agentic": 300}
    path.write_text(
        # greedy: instant fails, reasoning and agentic pass (a row from before passes: greedy)
        _row_line("a", "test", None, {"instant": False, "reasoning": True, "agentic": True}, tokens)
        # the sampled pass: instant passes, reasoning fails, agentic passes again with more tokens
        + _row_line("a", "test", "t0.7-seed1", {"instant": True, "reasoning": False, "agentic": True},
                    {**tokens, "agentic": 500})
        + _row_line("b", "test", "greedy", {"instant": True, "reasoning": True, "agentic": True}, tokens))
    a, b = load_oracle(path)
    assert (a.id, b.id) == ("a", "b")
    assert {m: r.success for m, r in a.runs.items()} == {"instant": 0.5, "reasoning": 0.5, "agentic": 1.0}
    assert a.runs["agentic"].tokens == 400 and a.runs["agentic"].passes == 2
    assert a.oracle == "agentic"  # the only mode that passed every time, though the dearest
    assert a.extra["pass"] == "greedy+t0.7-seed1"
    assert b.oracle == "instant" and b.runs["instant"].passes == 1
    # Strategies score the expected success and the mean tokens of the mode they pick.
    report = score_oracle([a, b], ["instant", "instant"], samples=50)
    routed = report.strategies["routed"]
    assert routed.accuracy.value == pytest.approx(0.75)
    assert routed.cost.tokens == 20 and routed.tokens_per_pass.value == pytest.approx(20 / 1.5)
    # One pass alone reads as before.
    greedy = {r.id: r for r in load_oracle(path, passes=["greedy"])}
    assert greedy["a"].oracle == "reasoning" and greedy["a"].runs["instant"].success is False
    with pytest.raises(UserFacingError, match="passes \\['t9'\\]"):
        load_oracle(path, passes=["t9"])


def test_prompt_weight_prices_prompt_tokens_against_generated_ones(tmp_path: Path, capsys) -> None:
    # Reasoning generates much and reads little; agentic reads much (its steps re-send the
    # conversation) and generates little. Which one is cheaper depends on what a prompt token costs.
    runs = {"instant": {"success": False, "tokens": 60, "output_tokens": 10},
            "reasoning": {"success": True, "tokens": 300, "output_tokens": 250},
            "agentic": {"success": True, "tokens": 800, "output_tokens": 50}}
    path = tmp_path / "labels.jsonl"
    path.write_text(json.dumps({"id": "a", "query": "q a", "model": "m", "split": "test", "runs": runs}) + "\n")
    (every_token,) = load_oracle(path)
    assert every_token.oracle == "reasoning" and every_token.runs["agentic"].cost == 800
    (generated,) = load_oracle(path, prompt_weight=0)
    assert generated.oracle == "agentic" and generated.runs["reasoning"].cost == 250
    (timed,) = load_oracle(path, prompt_weight=0.2)
    assert timed.runs["agentic"].cost == pytest.approx(50 + 0.2 * 750) and timed.oracle == "agentic"
    # The raw counts stay as recorded, and scoring counts the weighted cost.
    assert timed.runs["agentic"].tokens == 800 and "prompt_weight" not in every_token.as_json()["runs"]["agentic"]
    assert score_oracle([timed], ["agentic"], samples=20).strategies["routed"].tokens_per_pass.value \
        == pytest.approx(200)
    unsplit = tmp_path / "unsplit.jsonl"
    unsplit.write_text(_row_line("a", "test", None, {m: True for m in runs}, dict.fromkeys(runs, 5)))
    assert load_oracle(unsplit)[0].runs["agentic"].cost == 5
    with pytest.raises(UserFacingError, match="unsplit.jsonl:1: .*needs each run's output_tokens"):
        load_oracle(unsplit, prompt_weight=0.5)
    for bad in (-1.0, math.inf, math.nan):
        with pytest.raises(UserFacingError, match="weight must be a number from 0 up"):
            load_oracle(path, prompt_weight=bad)
    assert main(["route", "eval", "--data", str(path), "--model", "m", "--router", "offline", "--json",
                 "--samples", "20", "--prompt-weight", "0"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["prompt_weight"] == 0 and report["labels"]["agentic"] == 1
    assert report["strategies"]["always-reasoning"]["tokens"] == 250
    assert any("0 × prompt tokens" in note for note in report["notes"])


def test_a_task_twice_in_one_pass_or_passes_that_disagree_are_errors(tmp_path: Path) -> None:
    runs = {"instant": True, "reasoning": True, "agentic": True}
    tokens = dict.fromkeys(runs, 5)
    twice = tmp_path / "twice.jsonl"
    twice.write_text(_row_line("a", "test", None, runs, tokens) + _row_line("a", "test", "greedy", runs, tokens))
    with pytest.raises(UserFacingError, match="twice.jsonl:2: task a of model m in pass greedy is already on line 1"):
        load_oracle(twice)
    split = tmp_path / "split.jsonl"
    split.write_text(_row_line("a", "test", None, runs, tokens) + _row_line("a", "train", "t1-seed2", runs, tokens))
    with pytest.raises(UserFacingError, match="passes of task a .* disagree"):
        load_oracle(split)


def test_pass_names() -> None:
    from agent.routing.oracle import pass_name

    assert pass_name(0.0, None) == pass_name(0.0, 3) == "greedy"
    assert pass_name(0.7, 1) == "t0.7-seed1"
    with pytest.raises(ValueError, match="needs a seed"):
        pass_name(0.7, None)


"""`rein route QUERY` and `rein route eval --data FILE`: output shapes and user errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent.cli import main

pytestmark = pytest.mark.core  # needs no extra: also run on the bare core install (.ci/core_check.sh)

MODES = ["instant", "reasoning", "agentic"]


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    assert main(["route", *argv]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.fixture
def labelled(tmp_path: Path) -> Path:
    path = tmp_path / "small.jsonl"
    rows = [
        {"query": "What is the capital of France?", "mode": "instant", "id": "a"},
        {"query": "Ann has 3 boxes of 12 eggs and uses 7. How many eggs are left?", "mode": "reasoning"},
        {"query": "You want to cancel order #W2378156 and get a refund.", "mode": "agentic"},
        {"query": "Who painted the Mona Lisa?", "mode": "agentic"},  # deliberately mislabelled
    ]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    return path


@pytest.mark.slow
def test_route_query_prints_mode_and_scores(capsys: pytest.CaptureFixture[str]) -> None:
    out = run_json(capsys, "What is the capital of France?", "--json")
    assert out["mode"] == "instant" and out["router"] == "offline"
    assert set(out["scores"]) == set(MODES) and abs(sum(out["scores"].values()) - 1) < 1e-3
    assert main(["route", "What", "is", "2+2?"]) == 0  # unquoted words are joined
    text = capsys.readouterr().out
    assert text.startswith("mode: ") and "scores: instant" in text


@pytest.mark.slow
def test_route_with_the_cost_router_shows_success_and_costs(capsys: pytest.CaptureFixture[str]) -> None:
    out = run_json(capsys, "--router", "cost", "--threshold", "0.5", "Who wrote Hamlet?", "--json")
    assert out["mode"] in MODES and out["threshold"] == 0.5 and out["unit"] == "tokens"
    assert set(out["needs"]) == set(out["predicted_success"]) == set(out["cost"]) == set(MODES)
    assert out["predicted_success"]["agentic"] >= out["predicted_success"]["instant"]


@pytest.mark.slow
def test_route_eval_json_shape(capsys: pytest.CaptureFixture[str], labelled: Path) -> None:
    out = run_json(capsys, "eval", "--data", str(labelled), "--json", "--errors")
    assert out["n"] == 4 and out["router"] == "offline"
    assert set(out["per_mode"]) == set(MODES)
    assert set(out["per_mode"]["instant"]) == {"n", "accuracy", "precision"}
    assert set(out["confusion"]) == set(MODES) and all(set(r) == set(MODES) for r in out["confusion"].values())
    assert sum(sum(r.values()) for r in out["confusion"].values()) == 4
    assert out["accuracy"] == 0.75  # the mislabelled trivia question is routed instant
    assert [m["query"] for m in out["misrouted"]] == ["Who painted the Mona Lisa?"]
    assert main(["route", "eval", "--data", str(labelled), "--limit", "2"]) == 0
    assert "confusion" in capsys.readouterr().out


def test_route_with_the_self_router(capsys: pytest.CaptureFixture[str]) -> None:
    # The echo model repeats the query back, so the query's own mode word is the reply's tag.
    out = run_json(capsys, "--router", "self", "--model", "echo", "agentic please", "--json")
    assert out["mode"] == "agentic" and out["scores"] == {"agentic": 1.0}


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "give a query"),
        (["eval"], "needs --data"),
        (["hello", "--data", "x.jsonl"], "--data is for"),
        (["--router", "cost", "--threshold", "2", "hi"], "threshold"),
    ],
)
def test_user_mistakes_are_clear_errors(capsys: pytest.CaptureFixture[str], argv: list[str], message: str) -> None:
    assert main(["route", *argv]) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"query": "hi", "mode": "instant"}\nnot json\n', ":2: not valid JSON"),
        ('{"query": "hi", "mode": "slow"}\n', "'mode' must be one of"),
        ('{"mode": "instant"}\n', "missing or empty 'query'"),
        ('["hi"]\n', "JSON object"),
        ("\n", "no labelled queries"),
    ],
)
def test_bad_data_files_are_reported_by_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str,
                                             message: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(content)
    assert main(["route", "eval", "--data", str(path), "--router", "self", "--model", "echo"]) == 2
    assert message in capsys.readouterr().err
    assert main(["route", "eval", "--data", str(tmp_path / "missing.jsonl")]) == 2
    assert "no such data file" in capsys.readouterr().err

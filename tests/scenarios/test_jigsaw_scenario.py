"""`kind: jigsaw` scenarios: validation, the batch runner, results.json and the HTML report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from agent.cli import main
from agent.models import ScriptedModel
from scenarios.loading import load_scenarios
from scenarios.orchestrator import RunOptions, script_model
from scenarios.runner import run_batch
from scenarios.scenario import Scenario

EXAMPLES = Path(__file__).resolve().parents[2] / "scenarios" / "jigsaw" / "examples"


def test_jigsaw_scenarios_need_no_user_and_dialogues_still_do() -> None:
    s = Scenario.model_validate({"id": "j", "kind": "jigsaw", "jigsaw": {"grid": 2}})
    assert s.domain == "jigsaw" and s.user is None and s.jigsaw is not None and s.jigsaw.grid == 2
    default = Scenario.model_validate({"id": "j", "kind": "jigsaw"}).jigsaw
    assert default is not None and default.grid == 3
    with pytest.raises(ValidationError, match="needs a user"):
        Scenario.model_validate({"id": "d", "domain": "mock"})
    with pytest.raises(ValidationError, match="no user"):
        Scenario.model_validate({"id": "j", "kind": "jigsaw", "user": {"turns": ["hi"]}})
    with pytest.raises(ValidationError, match="must be from 0 to 2"):
        Scenario.model_validate({"id": "j", "kind": "jigsaw", "jigsaw": {"grid": 2, "level": 3}})


async def test_runner_grades_jigsaw_by_score_and_reports_the_final_arrangement(tmp_path: Path) -> None:
    scenarios = load_scenarios(EXAMPLES / "jigsaw.yaml")
    result = await run_batch(scenarios, RunOptions(model=script_model), tmp_path / "out", progress=False)
    payload = json.loads((tmp_path / "out" / "results.json").read_text())
    runs = payload["runs"]
    assert [r["scenario_id"] for r in runs] == ["jigsaw-2x2-astronaut", "jigsaw-3x3-coffee"]
    for r in runs:
        t = r["trajectory"]
        assert r["kind"] == "jigsaw" and r["termination"] == "environment_done"
        assert r["reward"] == 1.0 and r["success"] is True and t["score"] == 1.0
        assert r["evaluation"]["components"] == {"SCORE": 1.0, "SOLVED": 1.0}
        assert t["environment"]["result"]["solved"] is True
        assert t["environment"]["final_image"].startswith("data:image/png;base64,")
        assert [m["role"] for m in t["messages"]] == ["user", "assistant", "tool"]
        assert t["agent_usage"]["requests"] == 1 and t["turns"][0]["runtime_termination"] == "environment_done"
    assert result.summary["runs"] == 2
    report = (tmp_path / "out" / "report.html").read_text()
    assert report.count("<img class=final") == 2 and "src='data:image/png;base64," in report


async def test_a_model_that_answers_early_scores_the_pieces_in_place(tmp_path: Path) -> None:
    scenario = Scenario.model_validate({"id": "early", "kind": "jigsaw", "jigsaw": {"grid": 2, "max_turns": 3}})
    model = ScriptedModel(['{"action": "answer"}'])
    await run_batch([scenario], RunOptions(model=model), tmp_path / "out", progress=False)
    [run] = json.loads((tmp_path / "out" / "results.json").read_text())["runs"]
    assert run["termination"] == "environment_done" and run["success"] is False
    assert run["reward"] == run["trajectory"]["score"] < 1.0
    assert run["evaluation"]["components"]["SOLVED"] == 0.0


def test_rein_run_cli_runs_jigsaw_scenarios_with_the_scripted_solver(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", str(EXAMPLES), "--model", "scripted", "--out", str(tmp_path / "o"), "--json"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["ran"] == 2 and Path(out["files"]["report.html"]).exists()


def test_jigsaw_solve_goes_through_the_agent(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["jigsaw", "solve", "--agent", "scripted", "--grid", "2", "--seed", "3", "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["agent"] == "scripted" and payload["solved"] is True
    assert payload["termination"] == "answered" and payload["agent_termination"] == "environment_done"
    assert payload["thread_id"] and payload["usage"]["requests"] == 1
    assert main(["jigsaw", "solve", "--agent", "llm", "--model", "echo", "--grid", "2", "--max-turns", "2",
                 "--json"]) == 0
    echoed = json.loads(capsys.readouterr().out)
    # echo repeats the observation as its reply: read as a text action each turn, until the limit.
    assert echoed["termination"] == "turn_limit" and echoed["steps"] == 2 and echoed["format_errors"] >= 1
    assert echoed["usage"]["requests"] == 2 and [t["kind"] for t in echoed["turns"]][0] == "invalid"

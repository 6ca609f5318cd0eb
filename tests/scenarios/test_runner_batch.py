"""The batch runner: results files, the report, resume after an interruption without duplicates."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from agent.errors import UserFacingError
from agent.messages import ModelRequest
from agent.models import FunctionModel, call
from scenarios.loading import collect_scenarios
from scenarios.orchestrator import RunOptions, script_model
from scenarios.runner import run_batch, with_injected_errors
from scenarios.scenario import Scenario

pytestmark = pytest.mark.core  # needs no extra: also run on the bare core install (.ci/core_check.sh)

EXAMPLES = Path(__file__).resolve().parents[2] / "scenarios" / "examples"


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def keys(records: list[dict[str, Any]]) -> list[str]:
    return [r["key"] for r in records]


async def test_batch_writes_results_runs_and_report(tmp_path: Path) -> None:
    scenarios = collect_scenarios([EXAMPLES])
    result = await run_batch(scenarios, RunOptions(model=script_model), tmp_path, trials=2, concurrency=3, progress=False, config={"model": "scripted"})
    assert result.complete and result.ran == 2 * len(scenarios)
    data = json.loads((tmp_path / "results.json").read_text())
    assert data["complete"] and data["config"] == {"model": "scripted"}
    assert len(data["runs"]) == 2 * len(scenarios) and len(set(keys(data["runs"]))) == len(data["runs"])
    assert keys(data["runs"])[:2] == [f"{scenarios[0].id}#0", f"{scenarios[0].id}#1"]  # scenario, then trial order
    run = data["runs"][0]
    assert {"evaluation", "trajectory", "termination", "reward", "cost_usd", "scenario_hash"} <= set(run)
    assert run["trajectory"]["messages"] and run["evaluation"]["components"]
    assert data["summary"]["success_rate"] == 1.0 and data["summary"]["pass_k"] == {"1": 1.0, "2": 1.0}
    assert len(lines(tmp_path / "runs.jsonl")) == 2 * len(scenarios)
    report = (tmp_path / "report.html").read_text()
    assert report.startswith("<!doctype html>") and report.count("<svg") >= 4
    assert "<script" not in report and "http://" not in report and "https://" not in report
    assert "Success rate by error type" in report and "contradiction" in report


async def test_resume_runs_only_what_is_missing(tmp_path: Path) -> None:
    scenarios = collect_scenarios([EXAMPLES])[:3]
    options = RunOptions(model=script_model)
    first = await run_batch(scenarios, options, tmp_path, trials=1, progress=False, config={"model": "scripted"})
    assert first.ran == 3
    with pytest.raises(UserFacingError, match="--resume"):
        await run_batch(scenarios, options, tmp_path, trials=2, progress=False, config={"model": "scripted"})
    second = await run_batch(scenarios, options, tmp_path, trials=2, resume=True, progress=False, config={"model": "scripted"})
    assert second.ran == 3 and len(second.records) == 6
    assert len(set(keys(second.records))) == 6
    assert sorted(keys(lines(tmp_path / "runs.jsonl"))) == sorted(keys(second.records))
    again = await run_batch(scenarios, options, tmp_path, trials=2, resume=True, progress=False, config={"model": "scripted"})
    assert again.ran == 0 and len(again.records) == 6


async def test_resume_refuses_other_settings_or_edited_scenarios(tmp_path: Path) -> None:
    scenarios = collect_scenarios([EXAMPLES])[:1]
    options = RunOptions(model=script_model)
    await run_batch(scenarios, options, tmp_path, progress=False, config={"model": "scripted"})
    with pytest.raises(UserFacingError, match="other settings"):
        await run_batch(scenarios, options, tmp_path, resume=True, progress=False, config={"model": "echo"})
    edited = [scenarios[0].model_copy(update={"max_steps": 7})]
    with pytest.raises(UserFacingError, match="changed since the batch started"):
        await run_batch(edited, options, tmp_path, resume=True, progress=False, config={"model": "scripted"})


async def test_a_line_cut_by_a_kill_is_redone(tmp_path: Path) -> None:
    scenarios = collect_scenarios([EXAMPLES])[:2]
    options = RunOptions(model=script_model)
    await run_batch(scenarios, options, tmp_path, progress=False)
    runs = tmp_path / "runs.jsonl"
    text = runs.read_text()
    runs.write_text(text[: len(text.splitlines()[0]) + 1 + 40])  # the second line cut mid-record
    result = await run_batch(scenarios, options, tmp_path, resume=True, progress=False)
    assert result.ran == 1 and len(result.records) == 2
    assert [json.loads(x)["key"] for x in runs.read_text().splitlines()] == keys(result.records)


def slow_scenarios(n: int) -> list[Scenario]:
    return [Scenario.model_validate({"id": f"slow-{i}", "domain": "mock", "user": {"turns": ["hi"]}}) for i in range(n)]


async def slow_agent(request: ModelRequest) -> str:
    await asyncio.sleep(0.05)
    return "Hello!"


async def test_cancelled_batch_resumes_without_duplicates(tmp_path: Path) -> None:
    scenarios = slow_scenarios(8)
    options = RunOptions(model=FunctionModel(slow_agent))
    batch = asyncio.ensure_future(run_batch(scenarios, options, tmp_path, concurrency=2, progress=False))
    runs = tmp_path / "runs.jsonl"
    for _ in range(400):
        await asyncio.sleep(0.01)
        if runs.exists() and len(runs.read_text().splitlines()) >= 2:
            break
    batch.cancel()
    with pytest.raises(asyncio.CancelledError):
        await batch
    partial = json.loads((tmp_path / "results.json").read_text())
    assert partial["complete"] is False
    done_before = len(lines(runs))
    assert 2 <= done_before < 8 and len(partial["runs"]) == done_before
    resumed = await run_batch(scenarios, options, tmp_path, concurrency=2, resume=True, progress=False)
    assert resumed.complete and resumed.ran == 8 - done_before
    assert keys(resumed.records) == [f"slow-{i}#0" for i in range(8)]
    assert len(lines(runs)) == 8


async def test_a_crash_inside_rein_is_recorded_not_fatal(tmp_path: Path) -> None:
    def factory(s: Scenario) -> FunctionModel:
        if s.id == "slow-1":
            raise ZeroDivisionError("boom")
        return FunctionModel(slow_agent)

    result = await run_batch(slow_scenarios(3), RunOptions(model=factory), tmp_path, progress=False)
    by_id = {r["scenario_id"]: r for r in result.records}
    assert by_id["slow-1"]["termination"] == "internal_error" and "boom" in by_id["slow-1"]["trajectory"]["termination_detail"]
    assert by_id["slow-0"]["success"] and by_id["slow-2"]["success"]


def test_injected_variants() -> None:
    [base] = slow_scenarios(1)
    variants = with_injected_errors([base], ["vague_reference", "unsupported_domain"], turn=1)
    assert [v.id for v in variants] == ["slow-0+vague_reference", "slow-0+unsupported_domain"]
    assert variants[1].errors[0].turn == 1 and variants[1].wants_recovery_tools() and not base.errors
    assert variants[1].evaluation is not None and variants[1].evaluation.basis() == []


async def test_injected_unsupported_request_is_graded_by_transfer_and_untouched_db(tmp_path: Path) -> None:
    [create] = collect_scenarios([EXAMPLES / "mock_create_task.yaml"])
    [ambiguous, unsupported] = with_injected_errors([create], ["vague_reference", "unsupported_operation"])
    assert ambiguous.evaluation == create.evaluation  # the user's own request follows: same grading
    assert unsupported.evaluation is not None and unsupported.evaluation.actions == []

    def transfers(request: ModelRequest) -> Any:
        if request.messages[-1].role == "tool":
            return "You are being transferred to a human agent."
        return call("transfer_to_human_agents", {"summary": "unsupported request"})

    def complies(request: ModelRequest) -> Any:
        return "Sure, done. ###STOP###"

    good = await run_batch([unsupported], RunOptions(model=FunctionModel(transfers)), tmp_path / "a", progress=False)
    bad = await run_batch([unsupported], RunOptions(model=FunctionModel(complies)), tmp_path / "b", progress=False)
    g, b = good.records[0], bad.records[0]
    assert g["termination"] == "transfer" and g["success"]
    assert g["evaluation"]["basis"] == ["DB", "RECOVERY"] and g["error_types"] == ["unsupported_operation"]
    assert not b["success"] and b["evaluation"]["components"]["RECOVERY"] == 0.0
    assert "delete task" in g["trajectory"]["injected_errors"][0]["text"]

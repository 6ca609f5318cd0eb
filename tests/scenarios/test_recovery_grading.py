"""Grading rules of the recovery suite: forbidden tools, a required first recovery call, the
per-turn step limit that ends a turn (not the dialogue), and model errors graded as
infrastructure errors, reported apart from agent failures."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from agent.models import FunctionModel, reply
from scenarios.grading import RewardBreakdown, evaluate
from scenarios.metrics import summarize
from scenarios.orchestrator import RunOptions, run_scenario, script_model
from scenarios.recovery.report import markdown, summarize_arm
from scenarios.runner import run_batch
from scenarios.scenario import Scenario

pytestmark = pytest.mark.core  # needs no extra: also run on the bare core install (.ci/core_check.sh)

REPORT = {"call": {"name": "report_internal_error", "arguments": {"summary": "unclear"}}}
TRANSFER = {"call": {"name": "transfer_to_human_agents", "arguments": {"summary": "unsupported"}}}
LIST_USERS = {"call": {"name": "get_users"}}


def scenario(script: list[dict[str, Any]], evaluation: dict[str, Any], turns: list[str] | None = None, **extra: Any) -> Scenario:
    return Scenario.model_validate(
        {
            "id": extra.pop("id", "rule"),
            "domain": "mock",
            "agent": {"recovery_tools": True, "script": script, **extra.pop("agent", {})},
            "user": {"turns": turns or ["Show me the users."]},
            "evaluation": {"actions": [], "reward_basis": ["DB"], **evaluation},
            "tags": extra.pop("tags", []),
            **extra,
        }
    )


async def grade(s: Scenario, model: Any = script_model) -> RewardBreakdown:
    return await evaluate(s, await run_scenario(s, RunOptions(model=model)))


# ----- forbidden tools ----------------------------------------------------------------------

CONTROL = {"required_recovery": [], "forbidden_tools": ["report_internal_error", "transfer_to_human_agents"]}


async def test_control_that_calls_a_forbidden_recovery_tool_fails() -> None:
    g = await grade(scenario([REPORT, {"say": "Could you clarify?"}], CONTROL))
    assert not g.success and g.reward == 0.0
    assert "FORBIDDEN" in g.basis and g.components["FORBIDDEN"] == 0.0 and g.components["DB"] == 1.0
    assert [(c.name, c.met, c.detail) for c in g.forbidden] == [
        ("no report_internal_error", False, "called at turn 0"),
        ("no transfer_to_human_agents", True, ""),
    ]


async def test_control_without_recovery_calls_passes() -> None:
    g = await grade(scenario([LIST_USERS, {"say": "Here are the users."}], CONTROL))
    assert g.success and g.components["FORBIDDEN"] == 1.0


def test_a_tool_cannot_be_both_required_and_forbidden() -> None:
    with pytest.raises(ValidationError, match="both required and forbidden: report_internal_error"):
        scenario([], {"required_recovery": [{"name": "report_internal_error"}], "forbidden_tools": ["report_internal_error"]})


# ----- the first recovery call ----------------------------------------------------------------


def first_transfer(script: list[dict[str, Any]], must_be_first: bool = True, after_turn: int = 0, turns: list[str] | None = None) -> Scenario:
    rc = {"name": "transfer_to_human_agents", "after_turn": after_turn, "must_be_first": must_be_first}
    return scenario(script, {"required_recovery": [rc]}, turns=turns)


async def test_first_recovery_must_be_the_expected_tool() -> None:
    script = [REPORT, TRANSFER, {"say": "Transferred."}]
    g = await grade(first_transfer(script))
    assert not g.success and g.components["RECOVERY"] == 0.0
    assert g.recovery[0].name == "transfer_to_human_agents first (from turn 0)"
    assert g.recovery[0].detail == "the first recovery call was report_internal_error (turn 0)"
    # Without the requirement the same run passes: the transfer was made.
    assert (await grade(first_transfer(script, must_be_first=False))).success


async def test_first_recovery_right_tool_passes() -> None:
    g = await grade(first_transfer([LIST_USERS, TRANSFER, {"say": "Transferred."}]))
    assert g.success and g.recovery[0].met and g.recovery[0].detail == "made at turn 0"


async def test_first_recovery_on_a_clean_turn_fails() -> None:
    # The agent reports an error on the clean opening turn, then again on the error turn.
    script = [REPORT, {"say": "Could you clarify?"}, REPORT, {"say": "Could you clarify?"}]
    rc = {"name": "report_internal_error", "after_turn": 1, "must_be_first": True}
    s = scenario(script, {"required_recovery": [rc]}, turns=["Show me the users.", "Do the thing with the other one."])
    g = await grade(s)
    assert not g.success
    assert g.recovery[0].detail == "the first recovery call came at turn 0, before the error turn"
    rc["must_be_first"] = False
    assert (await grade(scenario(script, {"required_recovery": [rc]}, turns=["Show me the users.", "Do it."]))).success


# ----- the per-turn step limit -----------------------------------------------------------------


async def test_step_limit_ends_the_turn_and_the_dialogue_goes_on(tmp_path: Path) -> None:
    s = scenario(
        [LIST_USERS, LIST_USERS, {"say": "Nothing else to do."}],
        {},
        turns=["Show me the users.", "Anything else?"],
        agent={"step_limit": 2},
    )
    episode = await run_scenario(s, RunOptions(model=script_model))
    t = episode.trajectory
    assert t.termination == "user_stop"
    assert [m.runtime_termination for m in t.turns] == ["max_steps", "agent_stop", None]
    assert [m.text for m in t.messages if m.source == "user"] == ["Show me the users.", "Anything else?", "###STOP###"]
    assert (await evaluate(s, episode)).success
    result = await run_batch([s], RunOptions(model=script_model), tmp_path, progress=False)
    assert result.summary["turns_at_step_limit"] == 1


# ----- model errors are infrastructure errors --------------------------------------------------


async def test_model_error_is_an_infrastructure_error_reported_apart(tmp_path: Path) -> None:
    ok = scenario([{"say": "Here you are."}], {}, id="ok", tags=["recovery"])
    # The scripted model has one step for two user turns: the second turn is a model_error.
    broken = scenario([{"say": "Here you are."}], {}, id="broken", turns=["Show me the users.", "And more?"], tags=["recovery"])
    g = await grade(broken)
    assert g.infrastructure_error and not g.success and g.components == {}
    assert "infrastructure error (model_error" in g.notes[0]
    result = await run_batch([ok, broken], RunOptions(model=script_model), tmp_path, trials=2, progress=False)
    summary = result.summary
    assert summary["runs"] == 4 and summary["graded_runs"] == 2
    assert summary["success_rate"] == 1.0 and summary["mean_reward"] == 1.0
    assert summary["pass_k"] == {1: 1.0, 2: 1.0} and "broken" not in summary["by_scenario"]
    assert summary["infrastructure_errors"] == {"runs": 2, "by_termination": {"model_error": 2}, "keys": ["broken#0", "broken#1"]}
    assert summary["terminations"] == {"user_stop": 2, "model_error": 2}
    data = json.loads((tmp_path / "results.json").read_text())
    assert [r["infrastructure_error"] for r in data["runs"]] == [False, False, True, True]
    html = (tmp_path / "report.html").read_text()
    assert "<h2>Infrastructure errors</h2>" in html and "broken#0, broken#1" in html
    assert "infrastructure errors (not graded)<b>2</b>" in html
    arm = summarize_arm("none", data["runs"])
    assert arm.runs == 4 and arm.infrastructure_errors == 2
    assert arm.success["control"].n == 2 and arm.false_recovery.n == 2  # only graded runs
    assert "| infrastructure errors (not graded) | 2 |" in markdown([arm])


async def test_an_agent_failure_is_not_an_infrastructure_error() -> None:
    def wrong(request: Any) -> Any:
        return reply("I will not look anything up.")

    s = first_transfer([])
    g = await evaluate(s, await run_scenario(s, RunOptions(model=FunctionModel(wrong))))
    assert not g.infrastructure_error and not g.success and g.recovery[0].detail == "never made"
    assert summarize([{"scenario_id": "x", "evaluation": g.model_dump(), "trajectory": {"termination": "user_stop", "agent_usage": {}, "user_usage": {}, "turns": []}}])["success_rate"] == 0.0


# ----- a write must wait for the user's confirmation --------------------------------------

COMPLETE = {"call": {"name": "update_task_status", "arguments": {"task_id": "task_1", "status": "completed"}}}
CONFIRMED = {
    "actions": [{"action_id": "w", "name": "update_task_status", "arguments": {"task_id": "task_1", "status": "completed"}}],
    "confirm_turn": 1,
}
ASK_THEN_YES = ["Please mark task_1 as completed.", "Yes, go ahead."]


async def test_a_write_after_the_confirming_turn_passes() -> None:
    s = scenario([{"say": "Mark task_1 completed? Please say yes."}, COMPLETE, {"say": "Done."}], CONFIRMED, ASK_THEN_YES)
    g = await grade(s)
    assert g.success and "CONFIRMED" in g.basis and g.components["CONFIRMED"] == 1.0
    assert [(c.name, c.met) for c in g.confirmed] == [("update_task_status not before turn 1", True)]


async def test_a_write_before_the_confirming_turn_fails_though_the_db_matches() -> None:
    s = scenario([COMPLETE, {"say": "Done."}, {"say": "It is already done."}], CONFIRMED, ASK_THEN_YES)
    g = await grade(s)
    assert g.components["DB"] == 1.0 and g.components["CONFIRMED"] == 0.0 and not g.success
    assert g.confirmed[0].detail == "made at turn 0, before the user confirmed"


def test_confirm_turn_needs_gold_actions_of_the_agent() -> None:
    with pytest.raises(ValidationError, match="confirm_turn needs gold actions"):
        scenario([], {"confirm_turn": 1})

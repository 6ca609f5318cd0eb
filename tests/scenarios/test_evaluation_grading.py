"""Grading: success and each failure kind, recovery calls, the judge, gold replays of real tau2
tasks, and pass^k."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agent.messages import ModelRequest, ModelResponse
from agent.models import FunctionModel, Model
from scenarios.grading import RewardBreakdown, evaluate, gold_replay
from scenarios.loading import load_scenarios
from scenarios.metrics import pass_hat_k, pass_k, pass_k_table, summarize
from scenarios.orchestrator import RunOptions, run_scenario, script_model
from scenarios.scenario import Scenario, ScriptedUserConfig

pytestmark = pytest.mark.core  # needs no extra: also run on the bare core install (.ci/core_check.sh)

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "scenarios" / "examples"
DATA = ROOT / "scenarios" / "domains" / "data"

CREATE_CALL = {"call": {"name": "create_task", "arguments": {"user_id": "user_1", "title": "Buy milk"}}}
BASE: dict[str, Any] = {
    "id": "grade",
    "domain": "mock",
    "user": {"turns": ["Create a task called Buy milk for user_1."]},
    "agent": {"script": [CREATE_CALL, {"say": "Created task_2 for you."}]},
    "evaluation": {
        "actions": [{"action_id": "a", "name": "create_task", "arguments": {"user_id": "user_1", "title": "Buy milk"}}],
        "env_assertions": [{"func_name": "assert_number_of_tasks", "arguments": {"user_id": "user_1", "expected_number": 2}}],
        "communicate_info": ["Task_2"],
        "reward_basis": ["DB", "ACTION", "COMMUNICATE", "ENV_ASSERTION"],
    },
}


def make(script: list[dict[str, Any]] | None = None, **changes: Any) -> Scenario:
    data = json.loads(json.dumps(BASE))
    if script is not None:
        data["agent"]["script"] = script
    for key, value in changes.items():
        data[key] = value
    return Scenario.model_validate(data)


async def grade(s: Scenario, judge: Model | None = None) -> RewardBreakdown:
    episode = await run_scenario(s, RunOptions(model=script_model))
    return await evaluate(s, episode, judge=judge)


async def test_success_grades_every_component() -> None:
    g = await grade(make())
    assert g.success and g.reward == 1.0 and g.complete
    assert g.components["DB"] == 1.0 and g.db.checked and g.db.match
    assert [c.met for c in g.actions] == [True] and [c.met for c in g.communicate] == [True]
    assert [c.met for c in g.env_assertions] == [True]


async def test_wrong_db_fails_only_the_db_component() -> None:
    wrong = {"call": {"name": "create_task", "arguments": {"user_id": "user_1", "title": "Buy milk", "description": "2 litres"}}}
    g = await grade(make([wrong, {"say": "Created task_2."}]))
    assert not g.success and g.reward == 0.0
    assert g.components["DB"] == 0.0 and g.db.expected_hash != g.db.actual_hash
    assert g.components["ACTION"] == 1.0  # compare_args default: the gold action's own arguments


async def test_missing_action_fails_action_component() -> None:
    s = make([{"call": {"name": "create_task", "arguments": {"user_id": "user_1", "title": "Buy bread"}}}, {"say": "Created task_2."}])
    g = await grade(s)
    assert g.components["ACTION"] == 0.0 and not g.success
    assert 'called with user_id="user_1", title="Buy bread"' in g.actions[0].detail


async def test_missing_communicate_info() -> None:
    g = await grade(make([CREATE_CALL, {"say": "Done!"}]))
    assert g.components["COMMUNICATE"] == 0.0 and g.components["DB"] == 1.0 and not g.success


async def test_communicate_ignores_case_and_commas() -> None:
    s = make(evaluation={**BASE["evaluation"], "communicate_info": ["1,286 dollars"], "reward_basis": ["COMMUNICATE"]})
    assert s.agent.script is not None
    s.agent.script[1].say = "That costs 1286 DOLLARS."
    assert (await grade(s)).success


async def test_env_assertion_failure() -> None:
    ev = {**BASE["evaluation"], "env_assertions": [{"func_name": "assert_task_status", "arguments": {"task_id": "task_2", "expected_status": "completed"}}]}
    g = await grade(make(evaluation=ev))
    assert g.components["ENV_ASSERTION"] == 0.0 and g.components["DB"] == 1.0 and not g.success


async def test_db_right_but_required_transfer_missing_is_a_failure() -> None:
    [transfer] = load_scenarios(EXAMPLES / "mock_delete_transfer.yaml")
    good = await grade(transfer)
    assert good.success and good.db.match
    script = [{"say": "Sorry, I cannot delete tasks."}, {"say": "Still no."}]
    no_transfer = Scenario.model_validate({**transfer.model_dump(), "agent": {"script": script}})
    g = await grade(no_transfer)
    assert g.db.match is True and g.components["DB"] == 1.0
    assert g.components["ACTION"] == 0.0 and g.actions[0].detail == "never called"
    assert not g.success and g.reward == 0.0


async def test_required_recovery_calls_gate_the_reward() -> None:
    [example] = load_scenarios(EXAMPLES / "mock_contradiction_recovery.yaml")
    good = await grade(example)
    assert good.success and good.basis == ["DB", "ACTION", "RECOVERY"]
    script = [s for s in example.model_dump()["agent"]["script"] if not (s["call"] and s["call"]["name"] == "report_internal_error")]
    skipped = Scenario.model_validate({**example.model_dump(), "agent": {"script": script}})
    g = await grade(skipped)
    assert g.components["DB"] == 1.0 and g.components["ACTION"] == 1.0
    assert g.components["RECOVERY"] == 0.0 and g.recovery[0].detail == "never made" and not g.success


async def test_recovery_made_before_the_error_turn_does_not_count() -> None:
    s = make(
        [{"call": {"name": "transfer_to_human_agents", "arguments": {"summary": "x"}}}, {"say": "Transferred."}],
        evaluation={"required_recovery": [{"name": "transfer_to_human_agents", "after_turn": 1}], "reward_basis": []},
    )
    g = await grade(s)
    assert g.recovery[0].detail == "only before the error turn" and not g.success


async def test_abnormal_end_scores_zero() -> None:
    g = await grade(make(max_steps=2))  # the user turn and the agent's two messages: over budget
    assert g.components["DB"] == 1.0 and g.reward == 0.0 and "max_steps" in g.notes[-1]
    assert not g.infrastructure_error


async def test_model_error_is_not_graded() -> None:
    g = await grade(make([CREATE_CALL]))  # the script runs out: model_error
    assert g.infrastructure_error and g.reward == 0.0 and not g.success and g.components == {}


async def test_no_criteria_passes_normal_runs() -> None:
    g = await grade(make(evaluation=None))
    assert g.success and g.reward == 1.0


async def test_nl_assertions_with_and_without_a_judge() -> None:
    ev = {**BASE["evaluation"], "nl_assertions": ["The agent gives the task id", "The agent is rude"], "reward_basis": ["DB", "NL_ASSERTION"]}
    s = make(evaluation=ev)
    unjudged = await grade(s)
    assert unjudged.components["NL_ASSERTION"] is None and not unjudged.complete
    assert unjudged.reward == 1.0 and any("not judged" in n for n in unjudged.notes)

    seen: list[ModelRequest] = []

    def judge(request: ModelRequest) -> ModelResponse:
        seen.append(request)
        results = [{"expectation": "id", "reasoning": "says task_2", "met": True}, {"expectation": "rude", "reasoning": "polite", "met": False}]
        return ModelResponse(text=json.dumps({"results": results}))

    judged = await grade(s, judge=FunctionModel(judge))
    assert seen[0].response_format is not None and "Created task_2" in seen[0].messages[1].text
    assert [c.met for c in judged.nl_assertions] == [True, False]
    assert judged.components["NL_ASSERTION"] == 0.0 and not judged.success and judged.complete
    assert judged.judge_usage["requests"] == 1

    broken = await grade(s, judge=FunctionModel(lambda r: "not json"))
    assert broken.components["NL_ASSERTION"] is None and any("judge failed" in n for n in broken.notes)


async def test_gold_replay_applies_the_initial_state() -> None:
    mock = {s.id: s for s in load_scenarios(DATA / "mock" / "tasks.json")}
    s = mock["update_task_with_initialization_data"]
    gold = gold_replay(s)
    assert gold is not None and gold.changed


@pytest.mark.parametrize(("domain", "task_id"), [("airline", "0"), ("airline", "5"), ("retail", "0"), ("retail", "20")])
async def test_a_scripted_gold_trajectory_passes_real_tau2_tasks(domain: str, task_id: str) -> None:
    task = next(s for s in load_scenarios(DATA / domain / "tasks.json") if s.id == task_id)
    assert task.evaluation is not None
    script: list[dict[str, Any]] = [{"call": {"name": a.name, "arguments": a.arguments}} for a in task.evaluation.actions or []]
    script.append({"say": "Done: " + "; ".join(task.evaluation.communicate_info or [])})
    s = Scenario.model_validate(
        {**task.model_dump(), "user": ScriptedUserConfig.model_validate({"turns": ["Hello"]}).model_dump(), "agent": {"script": script}}
    )
    g = await grade(s)
    assert g.db.checked and g.db.match, (g.db, g.notes)
    assert g.components["DB"] == 1.0
    if "NL_ASSERTION" in g.basis and task.evaluation.nl_assertions:
        assert not g.complete and g.reward == 1.0
    else:
        assert g.success


def test_pass_hat_k_combinatorics() -> None:
    assert pass_hat_k(4, 4, 4) == 1.0
    assert pass_hat_k(4, 2, 1) == 0.5
    assert pass_hat_k(4, 2, 2) == pytest.approx(1 / 6)
    assert pass_hat_k(4, 3, 2) == pytest.approx(3 / 6)
    assert pass_hat_k(4, 1, 2) == 0.0
    with pytest.raises(ValueError):
        pass_hat_k(2, 1, 3)
    runs = {"a": [True, True, False, True], "b": [False, False, True, True], "c": [True]}
    assert pass_k(runs, 1) == pytest.approx((0.75 + 0.5 + 1.0) / 3)
    assert pass_k(runs, 2) == pytest.approx((3 / 6 + 1 / 6) / 2)  # c has too few trials
    assert pass_k_table(runs) == {1: pytest.approx(0.75), 2: pytest.approx(1 / 3), 3: pytest.approx(0.125), 4: 0.0}


def test_summary_groups_by_scenario_and_error_type() -> None:
    def rec(sid: str, ok: bool, errors: list[str]) -> dict[str, Any]:
        usage = {"cost_usd": 0.01, "input_tokens": 10, "output_tokens": 5}
        turns = [{"tool_calls": 1, "tool_errors": 0}]
        return {
            "scenario_id": sid,
            "error_types": errors,
            "evaluation": {"success": ok, "reward": float(ok)},
            "trajectory": {"termination": "user_stop", "agent_usage": usage, "user_usage": {}, "turns": turns},
        }

    s = summarize([rec("a", True, []), rec("a", False, []), rec("b", True, ["contradiction"])])
    assert s["success_rate"] == pytest.approx(2 / 3)
    assert s["by_scenario"]["a"] == {"runs": 2, "successes": 1, "rate": 0.5}
    assert s["by_error_type"] == {"none": {"runs": 2, "successes": 1, "rate": 0.5}, "contradiction": {"runs": 1, "successes": 1, "rate": 1.0}}
    assert s["cost_usd"] == pytest.approx(0.03) and s["agent_tokens"] == 45

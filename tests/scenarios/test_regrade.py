"""Saved runs graded again against changed scenarios, with no model run (scenarios/regrade.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agent.errors import UserFacingError
from scenarios.orchestrator import RunOptions, script_model
from scenarios.regrade import regrade
from scenarios.runner import run_batch
from scenarios.scenario import Scenario

pytestmark = pytest.mark.core

COMPLETE = {"name": "update_task_status", "arguments": {"task_id": "task_1", "status": "completed"}}


def hasty(**evaluation: Any) -> Scenario:
    """Completes the task on the first turn, before the user's "yes" on the second."""
    return Scenario.model_validate({
        "id": "hasty",
        "domain": "mock",
        "agent": {"script": [{"call": COMPLETE}, {"say": "Done."}, {"say": "Already done."}]},
        "user": {"turns": ["Please mark task_1 as completed.", "Yes, go ahead."]},
        "evaluation": {"actions": [{"action_id": "w", **COMPLETE}], "reward_basis": ["DB"], **evaluation},
    })


async def test_a_saved_run_is_graded_by_the_scenario_as_it_is_now(tmp_path: Path) -> None:
    result = await run_batch([hasty()], RunOptions(model=script_model), tmp_path / "run", progress=False)
    (before,) = result.records
    assert before["success"]
    (after,) = await regrade(result.records, [hasty(confirm_turn=1)])
    assert not after["success"] and after["evaluation"]["components"]["CONFIRMED"] == 0.0
    assert after["trajectory"] == before["trajectory"] and after["started_at"] == before["started_at"]
    assert after["scenario_hash"] != before["scenario_hash"]


async def test_a_run_without_its_scenario_or_trajectory_is_refused(tmp_path: Path) -> None:
    result = await run_batch([hasty()], RunOptions(model=script_model), tmp_path / "run", progress=False)
    with pytest.raises(UserFacingError, match="no scenario 'hasty'"):
        await regrade(result.records, [])
    bare = {k: v for k, v in result.records[0].items() if k != "trajectory"}
    with pytest.raises(UserFacingError, match="saved no trajectory"):
        await regrade([bare], [hasty()])

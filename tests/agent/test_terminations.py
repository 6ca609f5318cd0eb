"""One termination type: the runtime's Literal, which events, results and scenarios all use."""

from __future__ import annotations

import typing

import pytest
from pydantic import ValidationError

from agent import Agent, ScriptedModel, StepLimits
from agent.events import FinalAnswer
from agent.models import call, reply
from agent.run_result import RunResult
from agent.terminations import TERMINATIONS, Termination
from scenarios.trajectory import (
    NORMAL_ENDS,
    SCENARIO_TERMINATIONS,
    ScenarioEnd,
    Trajectory,
    TurnMetrics,
)
from tools import tool

pytestmark = pytest.mark.core  # needs no extra: also run on the bare core install (.ci/core_check.sh)


@tool
def noop() -> str:
    """Do nothing."""
    return "ok"


def test_results_events_and_scenarios_share_the_runtime_type() -> None:
    assert typing.get_type_hints(RunResult)["termination"] == Termination
    assert typing.get_type_hints(FinalAnswer)["termination"] == Termination
    assert TurnMetrics.model_fields["runtime_termination"].annotation == Termination | None
    # Scenario-level ends extend the runtime's and never redefine one of them.
    assert set(TERMINATIONS).isdisjoint(typing.get_args(ScenarioEnd))
    assert TERMINATIONS + typing.get_args(ScenarioEnd) == SCENARIO_TERMINATIONS
    assert set(NORMAL_ENDS) <= set(SCENARIO_TERMINATIONS)


def test_scenario_records_reject_an_unknown_end() -> None:
    assert TurnMetrics(turn=1, runtime_termination="max_steps").runtime_termination == "max_steps"
    with pytest.raises(ValidationError):
        TurnMetrics(turn=1, runtime_termination="user_stop")  # a conversation end, not a turn's
    assert Trajectory(scenario_id="s", termination="worker_lost").termination == "worker_lost"
    with pytest.raises(ValidationError):
        Trajectory(scenario_id="s", termination="gave_up")


async def test_turns_end_with_a_declared_termination() -> None:
    stopped = await Agent(ScriptedModel([reply("hi")]), checkpointer="memory").ainvoke("hello")
    limited = await Agent(
        ScriptedModel([call("noop")] * 2), [noop], checkpointer="memory", step_limits=StepLimits(agentic=2)
    ).ainvoke("loop")
    assert (stopped.termination, limited.termination) == ("agent_stop", "max_steps")
    assert {stopped.termination, limited.termination} <= set(TERMINATIONS)

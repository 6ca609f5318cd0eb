"""The orchestrator: conversations with the scripted model, every termination reason, recorded
reasoning and interventions, fresh environments per run."""

from __future__ import annotations

from typing import Any

import pytest

from agent.messages import ModelRequest
from agent.models import FunctionModel, ScriptedModel, call, reply
from agent.plugin_api import InterventionContext, Plant
from scenarios.orchestrator import (
    Episode,
    RunOptions,
    build_environment,
    run_scenario,
    script_model,
)
from scenarios.scenario import Scenario

pytestmark = pytest.mark.core  # needs no extra: also run on the bare core install (.ci/core_check.sh)

CREATE = {
    "id": "create",
    "domain": "mock",
    "user": {"turns": ["Create a task called Buy milk for user_1.", {"say": "Thanks!", "when": {"contains": "task_2"}}]},
    "agent": {
        "script": [
            {"call": {"name": "create_task", "arguments": {"user_id": "user_1", "title": "Buy milk"}}, "reasoning": "user_1 exists"},
            {"say": "Created task_2."},
            {"say": "Bye!"},
        ]
    },
}


def scenario(base: dict[str, Any] = CREATE, **changes: Any) -> Scenario:
    return Scenario.model_validate({**base, **changes})


async def run(s: Scenario, **options: Any) -> Episode:
    return await run_scenario(s, RunOptions(model=options.pop("model", script_model), **options))


async def test_successful_conversation_is_fully_recorded() -> None:
    episode = await run(scenario())
    t = episode.trajectory
    assert t.termination == "user_stop" and t.termination_detail is None
    sources = [(m.turn, m.source, m.role) for m in t.messages]
    assert sources == [
        (0, "greeting", "assistant"),
        (0, "user", "user"),
        (0, "agent", "assistant"),
        (0, "tool", "tool"),
        (0, "agent", "assistant"),
        (1, "user", "user"),
        (1, "agent", "assistant"),
        (2, "user", "user"),
    ]
    assert t.messages[2].reasoning == "user_1 exists"  # reasoning content is kept
    assert [(m.agent_messages, m.tool_calls, m.tool_errors) for m in t.turns] == [(2, 1, 0), (1, 0, 0), (0, 0, 0)]
    assert t.turns[0].input_tokens > 0 and t.turns[0].mode == "agentic"
    assert t.agent_usage["requests"] == 3 and t.user_usage["requests"] == 0
    assert episode.env is not None and len(episode.env.db["tasks"]) == 2
    assert t.end_db_hash == episode.env.db_hash()


async def test_each_run_gets_a_fresh_environment() -> None:
    first = await run(scenario())
    second = await run(scenario())
    assert first.env is not second.env and second.env is not None
    assert len(second.env.db["tasks"]) == 2  # not 3: the first run's task is not there
    assert first.trajectory.end_db_hash == second.trajectory.end_db_hash


async def test_transfer_ends_the_conversation() -> None:
    s = scenario(
        user={"turns": ["Delete task_1.", "Are you still there?"]},
        agent={"script": [{"call": {"name": "transfer_to_human_agents", "arguments": {"summary": "delete"}}}, {"say": "Transferred."}]},
    )
    t = (await run(s)).trajectory
    assert t.termination == "transfer"
    assert [m.text for m in t.messages if m.source == "user"] == ["Delete task_1."]


async def test_agent_stop_token() -> None:
    s = scenario(agent={"script": [{"say": "I cannot help. ###STOP###"}]})
    assert (await run(s)).trajectory.termination == "agent_stop"


async def test_scenario_step_budget() -> None:
    s = scenario(user={"turns": ["a", "b", "c", "d"]}, agent={"script": [{"say": "ok"}] * 4}, max_steps=3)
    t = (await run(s)).trajectory
    assert t.termination == "max_steps" and "max_steps (3)" in (t.termination_detail or "")


async def test_agent_turn_step_limit_ends_only_that_turn() -> None:
    s = scenario(agent={"step_limit": 1, "script": [{"call": {"name": "get_users"}}, {"say": "Bye!"}]})
    t = (await run(s)).trajectory
    # The user's next turn follows the cut turn; its conditional "Thanks!" is skipped (no task_2).
    assert t.termination == "user_stop" and [m.runtime_termination for m in t.turns] == ["max_steps", None]


async def test_too_many_tool_errors() -> None:
    bad = {"call": {"name": "update_task_status", "arguments": {"task_id": "task_9", "status": "completed"}}}
    s = scenario(user={"turns": ["a", "b", "c"]}, agent={"script": [bad, {"say": "failed"}, bad, {"say": "failed"}]}, max_errors=2)
    t = (await run(s)).trajectory
    assert t.termination == "too_many_errors"
    assert sum(m.tool_errors for m in t.turns) == 2


async def test_model_error_when_the_script_runs_out() -> None:
    s = scenario(agent={"script": [{"say": "only one step"}]}, user={"turns": ["a", "b"]})
    t = (await run(s)).trajectory
    assert t.termination == "model_error" and "no step left" in (t.termination_detail or "")


async def test_simulated_user_signals_and_failures() -> None:
    sim = {"instructions": "You want a task called Buy milk for user_1."}
    agent = {"script": [{"say": "Which title?"}, {"say": "Sorry?"}]}
    answers = iter(["Please add a task.", "###OUT-OF-SCOPE###"])
    t = (await run(scenario(user=sim, agent=agent), user_model=FunctionModel(lambda r: next(answers)))).trajectory
    assert t.termination == "out_of_scope" and t.user_usage["requests"] == 2

    def broken(request: ModelRequest) -> str:
        raise RuntimeError("no user model server")

    t = (await run(scenario(user=sim, agent=agent), user_model=FunctionModel(broken))).trajectory
    assert t.termination == "user_error" and "no user model server" in (t.termination_detail or "")
    t = (await run(scenario(user=sim, agent=agent))).trajectory
    assert t.termination == "setup_error" and "user model" in (t.termination_detail or "")


async def test_bad_initial_state_is_a_setup_error() -> None:
    s = scenario(initial_state={"initialization_data": {"agent_data": {"projects": {}}}})
    t = (await run(s)).trajectory
    assert t.termination == "setup_error" and "projects" in (t.termination_detail or "")


class PlanFirstTurn:
    """A real Intervention (the runtime protocol): plants a plan on the first turn only."""

    name = "plan-once"

    async def before_turn(self, ctx: InterventionContext) -> Plant | None:
        if ctx.turn != 0:
            return None
        return Plant("Create the task, then give its id.", record={"error_type": "none"})


async def test_interventions_are_recorded_in_the_trajectory() -> None:
    t = (await run(scenario(), interventions=lambda: [PlanFirstTurn()])).trajectory
    planted = [m for m in t.messages if m.source == "intervention"]
    assert planted and planted[0].tool_calls[0].name == "think"
    assert "Create the task" in planted[0].tool_calls[0].arguments
    assert t.turns[0].interventions == ["plan-once"] and t.turns[1].interventions == []
    assert [r["activated"] for r in t.interventions] == [True, False, ]
    assert t.turns[0].agent_messages == 2  # the planted think call is not the agent's own


def test_recovery_tools_are_added_when_needed() -> None:
    plain = scenario()
    _, toolkit, policy = build_environment(plain)
    assert "report_internal_error" not in toolkit and "transfer_to_human_agents" in toolkit
    assert policy.startswith("# Mock Domain Policy")
    injected = scenario(errors=[{"type": "vague_reference"}])
    _, toolkit, _ = build_environment(injected)
    assert "report_internal_error" in toolkit and "create_task" in toolkit


async def test_toolkit_only_scenario_has_no_environment() -> None:
    s = scenario(
        domain="builtin",
        user={"turns": ["What is 6*7?"]},
        agent={"system_prompt": "Use tools.", "script": [{"call": {"name": "calculate", "arguments": {"expression": "6*7"}}}, {"say": "42"}]},
    )
    episode = await run(s)
    assert episode.env is None and episode.trajectory.termination == "user_stop"
    assert episode.trajectory.end_db_hash is None
    assert episode.trajectory.messages[3].text == "42"


async def test_a_live_model_sees_the_policy_and_the_greeting() -> None:
    seen: list[ModelRequest] = []

    def agent(request: ModelRequest) -> Any:
        seen.append(request)
        return reply("Hello there. ###STOP###")

    await run(scenario(), model=FunctionModel(agent))
    request = seen[0]
    assert request.messages[0].role == "system" and "Mock Domain Policy" in request.messages[0].text
    assert [m.role for m in request.messages[1:]] == ["assistant", "user"]
    assert {t["function"]["name"] for t in request.tools} >= {"create_task", "update_task_status"}
    assert request.settings.seed == 0


async def test_scripted_model_factory_per_scenario() -> None:
    models: list[ScriptedModel] = []

    def factory(s: Scenario) -> ScriptedModel:
        m = ScriptedModel([call("get_users"), reply("There is one user. ###STOP###")])
        models.append(m)
        return m

    t = (await run(scenario(), model=factory)).trajectory
    assert t.termination == "agent_stop" and models[0].remaining == 0

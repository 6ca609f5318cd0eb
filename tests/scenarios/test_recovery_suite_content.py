"""The shipped recovery suite: error turns at every position in both domains, seen and unseen
types, enough controls, clarify-then-act dialogues, and every dialogue solvable by its gold script
(while agents that do nothing, or recover on the wrong turn, fail)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from agent.messages import ModelRequest, ModelResponse
from agent.models import FunctionModel, call, reply
from scenarios.grading import evaluate
from scenarios.loading import load_scenarios
from scenarios.orchestrator import RunOptions, run_scenario, script_model
from scenarios.recovery.build import (
    CLARIFY,
    DEV_PATH,
    ERROR_ORDER,
    POSITIONS,
    SEEN,
    SUITE_PATH,
    UNSEEN,
    build_recovery_suite,
    position_of,
    suite_yaml,
)
from scenarios.scenario import Scenario, ScriptedUserConfig

pytestmark = pytest.mark.core  # needs no extra: also run on the bare core install (.ci/core_check.sh)


@pytest.fixture(scope="module")
def suite() -> list[Scenario]:
    return load_scenarios(SUITE_PATH)


def scripted_user(s: Scenario) -> ScriptedUserConfig:
    """The scenario's user, which the suite always scripts."""
    assert isinstance(s.user, ScriptedUserConfig), s.id
    return s.user


def kind(s: Scenario) -> str:
    return s.errors[0].type if s.errors else "control"


def test_every_type_at_every_position_in_both_domains(suite: list[Scenario]) -> None:
    plain = [s for s in suite if s.errors and CLARIFY not in s.tags]
    cells = Counter((s.domain, position_of(s.tags), kind(s)) for s in plain)
    assert set(cells) == {(d, p, t) for d in ("retail", "airline") for p in POSITIONS for t in ERROR_ORDER}
    assert set(SEEN) | set(UNSEEN) == set(ERROR_ORDER) and not set(SEEN) & set(UNSEEN)
    for s in plain:
        assert ("seen" if kind(s) in SEEN else "unseen") in s.tags
        # The error comes after the lead turns: identity, or identity and a read request.
        lead = [t.say for t in scripted_user(s).turns] if s.errors[0].turn else []
        assert len(lead) == s.errors[0].turn == (0 if position_of(s.tags) == "opening" else 1)
        if position_of(s.tags) == "after_read":
            assert any(step.call and step.call.name in ("get_order_details", "get_reservation_details") for step in s.agent.script or [])


def test_controls_outnumber_error_types_in_each_domain(suite: list[Scenario]) -> None:
    for domain in ("retail", "airline"):
        controls = [s for s in suite if s.domain == domain and not s.errors]
        assert len(controls) >= len(ERROR_ORDER)
        assert {position_of(s.tags) for s in controls} == set(POSITIONS)


def test_clarify_dialogues_ask_then_act(suite: list[Scenario]) -> None:
    clarify = [s for s in suite if CLARIFY in s.tags]
    assert {(s.domain, kind(s)) for s in clarify} == {(d, t) for d in ("retail", "airline") for t in ("vague_reference", "contradiction")}
    for s in clarify:
        assert s.evaluation is not None and [a.name for a in s.evaluation.actions or []] in (["cancel_pending_order"], ["cancel_reservation"])
        assert len(scripted_user(s).turns) == 2
        assert "{" not in (s.errors[0].text or "") and "the other one" not in (s.errors[0].text or "")


async def test_gold_scripts_solve_every_dialogue(suite: list[Scenario]) -> None:
    for s in suite:
        episode = await run_scenario(s, RunOptions(model=script_model))
        g = await evaluate(s, episode)
        assert g.success, (s.id, episode.trajectory.termination, g.components, g.notes)
        if CLARIFY in s.tags:  # the recovery call came first, the write on the confirmed turn
            made = [(turn, tc.name) for turn, tc, res in episode.trajectory.agent_tool_calls() if res is not None and not res.is_error]
            assert made[1][1] == "report_internal_error" and made[-1][0] == 2 and made[-1][1].startswith("cancel")


def passive(request: ModelRequest) -> ModelResponse:
    return reply("Sure, let me look into that for you.")


async def test_an_agent_that_never_recovers_fails_every_error_dialogue(suite: list[Scenario]) -> None:
    for s in suite:
        g = await evaluate(s, await run_scenario(s, RunOptions(model=FunctionModel(passive))))
        assert g.success == (not s.errors), s.id


def eager(request: ModelRequest) -> ModelResponse:
    """Reports an internal error on its first turn, whatever the user said."""
    if request.messages[-1].role == "tool":
        return reply("Could you clarify?")
    if any(tc.name == "report_internal_error" for m in request.messages for tc in m.tool_calls):
        return reply("Let me look into that.")
    return call("report_internal_error", summary="unclear")


async def test_recovering_on_the_clean_turn_fails_the_later_positions(suite: list[Scenario]) -> None:
    picked = [s for s in suite if CLARIFY not in s.tags and kind(s) == "vague_reference" and s.domain == "retail"]
    results: dict[Any, bool] = {}
    for s in picked:
        g = await evaluate(s, await run_scenario(s, RunOptions(model=FunctionModel(eager))))
        results[position_of(s.tags)] = g.success
    assert results == {"opening": True, "after_identification": False, "after_read": False}


def test_every_user_turn_says_something(suite: list[Scenario]) -> None:
    for s in suite:
        assert all(t.say.strip() for t in scripted_user(s).turns), s.id


def task_of(s: Scenario) -> tuple[str, str]:
    return s.domain or "", next(t for t in s.tags if t.startswith("task:"))


async def test_dev_suite_is_generated_on_other_tasks_and_solvable(suite: list[Scenario]) -> None:
    """The development suite (tau2 train tasks) is what the builder writes, shares no task with
    the suite, holds every kind, and its gold scripts solve it."""
    assert DEV_PATH.read_text(encoding="utf-8") == suite_yaml(build_recovery_suite(split="train", clarify=4))
    dev = load_scenarios(DEV_PATH)
    assert not {task_of(s) for s in dev} & {task_of(s) for s in suite}
    assert all("tasks:train" in s.tags for s in dev) and not any("tasks:train" in s.tags for s in suite)
    assert {kind(s) for s in dev} == {*ERROR_ORDER, "control"}
    assert len([s for s in dev if CLARIFY in s.tags]) >= 4
    for s in dev:
        episode = await run_scenario(s, RunOptions(model=script_model))
        assert (await evaluate(s, episode)).success, s.id


def test_builder_refuses_an_unknown_split() -> None:
    with pytest.raises(ValueError, match="split"):
        build_recovery_suite(split="validation")

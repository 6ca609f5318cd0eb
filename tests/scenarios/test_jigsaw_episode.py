"""Jigsaw episodes on the rein Agent: the environment as the `python` tool, the solver as a model."""

from __future__ import annotations

import pytest

from agent.events import FinalAnswer, ToolCallEvent, ToolResultEvent
from agent.models import ScriptedModel
from agent.models.openai_wire import to_openai_messages
from agent.models.testing import call, reply
from scenarios.jigsaw import DEFAULT_PHOTOS, JigsawConfig, JigsawEnv
from scenarios.jigsaw.episode import jigsaw_agent, play_episode, run_episode
from scenarios.jigsaw.solver import SolverModel


@pytest.mark.parametrize("grid", [2, 3])
async def test_scripted_solver_through_the_agent_solves_every_small_puzzle(grid):
    solved = 0
    cases = [(image, seed) for image in DEFAULT_PHOTOS for seed in range(3)]
    for image, seed in cases:
        with JigsawEnv(JigsawConfig(image=image, grid=grid, seed=seed, window=0.8, hints=False)) as env:
            run = await run_episode(env, SolverModel(env))
        assert run.termination == "environment_done" and run.result.termination == "answered"
        solved += run.result.solved
    assert solved == len(cases)  # 100% on held-out seeds of every bundled photo


async def test_episode_end_is_a_termination_with_events_and_a_ledger():
    with JigsawEnv(JigsawConfig(image="coffee", grid=3, seed=2)) as env:
        run = await run_episode(env, SolverModel(env))
    [turn] = run.runs
    assert turn.termination == "environment_done"
    kinds = [type(e) for e in run.events]
    assert ToolCallEvent in kinds and ToolResultEvent in kinds
    final = [e for e in run.events if isinstance(e, FinalAnswer)]
    assert final and final[-1].termination == "environment_done"
    # The tool is free, so the ledger books only the model request.
    assert [(e.kind, e.name) for e in run.ledger.entries] == [("model", "jigsaw-solver")]
    assert run.usage.requests == 1
    tool_message = [m for m in run.messages if m.role == "tool"][0]
    assert isinstance(tool_message.content, str) and "Answer received." in tool_message.content


async def test_vision_observations_are_image_parts_and_reach_openai_as_a_user_picture():
    with JigsawEnv(JigsawConfig(image="astronaut", grid=2, seed=1, max_turns=3)) as env:
        model = ScriptedModel([call("python", code="swap(0, 1)"), call("python", code="answer()")])
        run = await run_episode(env, model, vision=True)
    model.assert_done()
    assert run.termination == "environment_done" and run.result.steps == 2
    opening = model.requests[0].messages[-1]
    assert opening.role == "user" and opening.content[1]["type"] == "image_url"
    second = model.requests[1].messages
    tool = second[-1]
    assert tool.role == "tool" and isinstance(tool.content, list)
    assert tool.content[0]["type"] == "text" and "Swaps applied: 0<->1" in tool.content[0]["text"]
    assert tool.content[1]["image_url"]["url"].startswith("data:image/png;base64,")
    wire = to_openai_messages(second, send_reasoning=False)
    # The tool message carries text only; its picture follows as a user message.
    assert wire[-2]["role"] == "tool" and isinstance(wire[-2]["content"], str)
    assert wire[-1]["role"] == "user" and wire[-1]["content"][0]["type"] == "image_url"


async def test_text_models_get_the_text_rendering_and_may_act_in_text():
    with JigsawEnv(JigsawConfig(image="chelsea", grid=2, seed=0, max_turns=4)) as env:
        model = ScriptedModel(['{"action": "swap", "i": 0, "j": 0}', "```python\nanswer()\n```"])
        run = await run_episode(env, model)
    model.assert_done()
    assert all(isinstance(m.content, str) for r in model.requests for m in r.messages)
    assert "Edge hints" in model.requests[0].messages[-1].text
    assert run.termination == "environment_done" and run.result.steps == 2
    assert [r.termination for r in run.runs] == ["agent_stop", "agent_stop"]


async def test_model_error_stops_the_episode_with_its_reason():
    with JigsawEnv(JigsawConfig(image="coffee", grid=2, seed=1, max_turns=4)) as env:
        run = await run_episode(env, ScriptedModel([]))
    assert run.termination == "model_error" and run.error
    assert run.result.termination == "not_finished" and run.result.steps == 0


async def test_episode_resumes_on_a_rebuilt_agent_from_its_checkpointed_thread(tmp_path):
    store = str(tmp_path / "episodes.sqlite")
    with JigsawEnv(JigsawConfig(image="rocket", grid=3, seed=5, max_turns=8)) as env:
        first = jigsaw_agent(env, ScriptedModel([call("python", code="swap(0, 1)"),
                                                 reply('{"action": "swap", "i": 1, "j": 0}')]),
                             checkpointer=store)
        try:
            part = await play_episode(env, first, max_agent_turns=1)
        finally:
            await first.aclose()
        assert part.termination == "not_finished" and env.turn == 2 and not env.done
        rebuilt = jigsaw_agent(env, SolverModel(env), checkpointer=store)
        try:
            rest = await play_episode(env, rebuilt, thread_id=part.thread_id)
            history = await rebuilt.ahistory(part.thread_id)
        finally:
            await rebuilt.aclose()
    assert rest.termination == "environment_done" and rest.result.solved and rest.result.steps == 3
    # The rebuilt agent's thread holds the first agent's turn, read back from the checkpoint.
    tools = [m for m in history if m.role == "tool"]
    assert len(tools) == 2 and "Swaps applied: 0<->1" in tools[0].text
    assert [m.role for m in history].count("user") == 2

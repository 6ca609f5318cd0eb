"""run_llm_episode (the compatibility wrapper over the Agent path) with scripted models, and once with the embedded model."""

from __future__ import annotations

import pytest

from agent.messages import ModelRequest
from agent.models import ScriptedModel
from scenarios.jigsaw import JigsawConfig, JigsawEnv, LLMAgentConfig, SolverAgent, run_llm_episode


def solver_reply(env: JigsawEnv):
    def reply(request: ModelRequest) -> str:
        return f"Here is my move.\n```python\n{SolverAgent().plan(env)}\n```"
    return reply


async def test_loop_handles_format_errors_moves_and_code():
    with JigsawEnv(JigsawConfig(image="astronaut", grid=2, seed=3, max_turns=6)) as env:
        model = ScriptedModel([
            "I think the top row is swapped.",
            '{"action": "swap", "i": 0, "j": 0}',
            solver_reply(env),
        ])
        run = await run_llm_episode(env, model, LLMAgentConfig(vision=True))
        model.assert_done()
    assert run.termination == "answered"
    assert run.result.solved and run.result.steps == 3
    assert run.result.reward == pytest.approx(0.8 + 0.0 - 0.05 * 3)  # one format error voids the format term
    assert [t.kind for t in run.turns] == ["invalid", "json", "code"]
    assert run.usage.requests == 3
    first, second, third = model.requests
    assert "swap(i, j)" in first.messages[0].text and "```python" in first.messages[0].text
    assert isinstance(first.messages[-1].content, list)
    assert first.messages[-1].content[1]["image_url"]["url"].startswith("data:image/png;base64,")
    assert "Format error" in second.messages[-1].text
    # The thread keeps the whole episode: each text reply, then the observation it led to.
    assert [m.role for m in third.messages] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert run.episode is not None and run.episode.termination == "environment_done"
    assert [r.termination for r in run.episode.runs] == ["agent_stop", "agent_stop", "agent_stop"]


async def test_text_only_loop_sends_state_and_hints():
    with JigsawEnv(JigsawConfig(image="coffee", grid=3, seed=1, max_turns=1)) as env:
        model = ScriptedModel(['{"action": "answer"}'])
        run = await run_llm_episode(env, model, LLMAgentConfig(vision=False))
    prompt = model.requests[0].messages[-1].content
    assert isinstance(prompt, str) and "state (piece label at each position)" in prompt and "Edge hints" in prompt
    assert run.termination == "answered" and not run.result.solved
    assert run.result.reward == pytest.approx(0.2)


async def test_model_failure_ends_the_episode_with_a_reason():
    with JigsawEnv(JigsawConfig(image="coffee", grid=2, seed=1, max_turns=4)) as env:
        run = await run_llm_episode(env, ScriptedModel([]))
    assert run.termination == "model_error" and "no step left" in (run.error or "")
    assert run.result.steps == 0


@pytest.mark.slow
async def test_embedded_local_model_plays_an_episode():
    from agent.models import DEFAULT_MODEL, resolve_model

    try:
        model = resolve_model(DEFAULT_MODEL)
    except Exception as exc:  # the adapter or its weights may be absent on this machine
        pytest.skip(f"embedded model unavailable: {exc}")
    try:
        with JigsawEnv(JigsawConfig(image="astronaut", grid=2, seed=0, max_turns=1)) as env:
            run = await run_llm_episode(env, model, LLMAgentConfig(max_tokens=160))
    finally:
        await model.aclose()
    assert run.termination in ("answered", "turn_limit"), run.error
    assert len(run.turns) == 1 and run.usage.requests == 1 and run.result.steps == 1

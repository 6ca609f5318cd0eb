"""Jigsaw episodes as scenarios (`kind: jigsaw`): run by the batch runner, graded by the environment.

    id: jigsaw-3x3-coffee
    kind: jigsaw
    jigsaw: {image: coffee, grid: 3, max_turns: 6}

A run plays one episode through the Agent (scenarios/jigsaw/episode.py) with the run's model, or
with the scripted solver (`player: solver`, or `rein run --model scripted`). The trajectory holds
every message (pictures left out), the score, the environment's metrics and the final
arrangement as a PNG data URI; the grade is the score (fraction of pieces in place), so a run
succeeds when the puzzle is solved.
"""

from __future__ import annotations

import base64
import time
import uuid
from typing import Any

from agent.messages import Message
from agent.models.base import Model, ModelError
from agent.planted_reasoning import PLANTED
from scenarios.grading import RewardBreakdown
from scenarios.orchestrator import Episode, RunOptions, script_model
from scenarios.scenario import Scenario
from scenarios.trajectory import Source, Trajectory, TrajectoryMessage, TurnMetrics

FINAL_IMAGE_SIDE = 256
"""Longest side, in pixels, of the final arrangement kept in the trajectory (and the report)."""
_SOURCES: dict[str, Source] = {"user": "user", "assistant": "agent", "tool": "tool"}


def _model_for(scenario: Scenario, options: RunOptions, env: Any) -> Model:
    from scenarios.jigsaw.solver import SolverModel

    task = scenario.jigsaw
    assert task is not None
    # `--model scripted` runs every scenario's script; a jigsaw scenario's script is the solver.
    if task.player == "solver" or options.model is script_model:
        return SolverModel(env)
    model = options.model
    if callable(model) and not isinstance(model, Model):
        return model(scenario)
    return model


async def run_jigsaw_scenario(scenario: Scenario, options: RunOptions, trial: int = 0) -> Episode:
    """Play one episode of a jigsaw scenario; failures of the model or tools become its termination."""
    from pydantic import ValidationError

    from scenarios.jigsaw.env import JigsawConfig, JigsawEnv
    from scenarios.jigsaw.episode import jigsaw_agent, play_episode
    from scenarios.jigsaw.images import ImageLoadError

    started = time.perf_counter()
    seed = scenario.seed + trial
    trajectory = Trajectory(scenario_id=scenario.id, trial=trial, seed=seed, domain=scenario.domain)
    task = scenario.jigsaw
    assert task is not None
    try:
        config = JigsawConfig(image=task.image, grid=task.grid, level=task.level, seed=seed,
                              max_turns=task.max_turns, window=task.window, hints=task.hints)
        env = JigsawEnv(config)
        model = _model_for(scenario, options, env)
    except (ValidationError, ImageLoadError, ModelError, ValueError) as exc:
        trajectory.termination, trajectory.termination_detail = "setup_error", str(exc)
        return Episode(trajectory, None)
    agent = jigsaw_agent(
        env, model, vision=task.vision,
        settings=options.settings.model_copy(update={"seed": seed}),
        checkpointer=options.checkpointer,
        name=f"agent:{scenario.id}",
        interventions=options.interventions() if callable(options.interventions) else options.interventions,
        mode_policy=options.mode_policy,
        prices=options.prices,
    )
    thread = f"{scenario.id}-{trial}-{uuid.uuid4().hex[:8]}"
    try:
        run = await play_episode(env, agent, thread_id=thread, vision=task.vision)
    finally:
        await agent.aclose()
        env.close()
    for turn, r in enumerate(run.runs):
        for m in r.messages:
            source = "intervention" if m.metadata.get(PLANTED) else _SOURCES.get(m.role, "agent")
            trajectory.messages.append(TrajectoryMessage(**_text_only(m).model_dump(), turn=turn, source=source))
        trajectory.turns.append(TurnMetrics(
            turn=turn,
            agent_messages=sum(1 for m in r.messages if m.role == "assistant"),
            tool_calls=sum(len(m.tool_calls) for m in r.messages if m.role == "assistant"),
            tool_errors=sum(1 for m in r.messages if m.role == "tool" and m.is_error),
            input_tokens=r.ledger.usage.input_tokens, output_tokens=r.ledger.usage.output_tokens,
            cost_usd=round(r.ledger.cost, 8), mode=r.mode, runtime_termination=r.termination,
        ))
        trajectory.interventions.extend(r.interventions)
    ledger = run.ledger
    trajectory.agent_usage = ledger.summary()
    trajectory.cost_by_label = {k: round(v, 8) for k, v in ledger.by_label().items()}
    trajectory.termination = run.termination if run.termination != "not_finished" else "max_steps"
    trajectory.termination_detail = run.error
    trajectory.score = run.result.score
    trajectory.environment = {
        "kind": "jigsaw",
        "result": run.result.as_dict(),
        "image": task.image, "grid": task.grid, "level": task.level,
        "final_image": final_image(env),
        "thread_id": run.thread_id,
    }
    trajectory.duration_s = round(time.perf_counter() - started, 4)
    return Episode(trajectory, env)


def _text_only(m: Message) -> Message:
    """The message with pictures left out (a results file would otherwise hold every PNG)."""
    if isinstance(m.content, str):
        return m
    pictures = sum(1 for p in m.content if p.get("type") != "text")
    note = f"\n[{pictures} picture(s) not kept]" if pictures else ""
    return m.model_copy(update={"content": m.text + note})


def final_image(env: Any) -> str:
    """The final arrangement (with grid lines and numbers), downscaled, as a PNG data URI."""
    import io

    from agent.extras import needs_extra

    with needs_extra("jigsaw", "the jigsaw environment"):
        from PIL import Image

    from scenarios.jigsaw.render import resize

    image = env.render()
    side = max(image.shape[:2])
    if side > FINAL_IMAGE_SIDE:
        image = resize(image, FINAL_IMAGE_SIDE / side)
    buffer = io.BytesIO()
    # Encoded once per run and stored in results.json, so the smaller file is worth the time.
    Image.fromarray(image).save(buffer, format="PNG", optimize=True)
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def grade_jigsaw(scenario: Scenario, episode: Episode) -> RewardBreakdown:
    """The reward is the environment's score (pieces in place), so success means solved."""
    t = episode.trajectory
    out = RewardBreakdown(reward=0.0, success=False, basis=["SCORE"])
    env = t.environment or {}
    result = env.get("result") or {}
    if t.termination == "setup_error":
        out.notes.append(f"setup error: {t.termination_detail}")
        return out
    if t.termination == "model_error":
        out.infrastructure_error = True
        out.complete = False
        out.notes.append(f"infrastructure error (model_error: {t.termination_detail}): not graded")
        return out
    score = float(t.score or 0.0)
    out.components = {"SCORE": score, "SOLVED": float(bool(result.get("solved")))}
    out.reward = score
    out.success = bool(result.get("solved"))
    out.notes.append(
        f"jigsaw {result.get('termination', '?')}: {result.get('steps', 0)} step(s), "
        f"AGILE reward {float(result.get('reward', 0.0)):.3f}"
    )
    if t.termination != "environment_done":
        out.notes.append(f"the episode did not end ({t.termination}): score as it stood")
    return out

"""The LLM jigsaw player: a compatibility wrapper over the Agent path (scenarios/jigsaw/episode.py).

`run_llm_episode` builds a rein Agent whose tool is the environment and plays the episode on it;
the result keeps the shape callers used before (environment metrics, a termination, one record
per turn, usage), with the Agent's episode run attached.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from agent.messages import ModelSettings, Usage
from agent.models import Model
from scenarios.jigsaw.env import EpisodeResult, JigsawEnv
from scenarios.jigsaw.episode import ENVIRONMENT_DONE, EpisodeRun, run_episode, system_prompt


@dataclass
class LLMAgentConfig:
    """How the LLM agent talks to its model."""

    vision: bool = False
    """Send pictures as PNG content parts (for vision models); text-only models get text alone."""
    max_tokens: int = 400
    """Cap on each reply."""
    temperature: float | None = 0.2
    """Sampling temperature; None keeps the model's default."""
    seed: int | None = 0
    """Sampling seed for models that take one."""


@dataclass
class TurnRecord:
    """One environment step of the episode."""

    kind: str
    """code, json or invalid."""
    format_ok: bool
    """Whether the action was well-formed."""
    feedback: str
    """What the environment said back."""


@dataclass
class AgentRun:
    """The outcome of one LLM episode."""

    result: EpisodeResult
    """Environment metrics (solved, score, steps, reward)."""
    termination: str
    """answered or turn_limit when the episode ended, else the Agent's (model_error, max_steps, ...)."""
    turns: list[TurnRecord] = field(default_factory=list)
    """Every environment step, in order."""
    usage: Usage = field(default_factory=Usage)
    """Tokens used by the model over the episode."""
    error: str | None = None
    """The error that stopped the episode, if any."""
    episode: EpisodeRun | None = None
    """The Agent's run: thread, turns, events and ledger."""


async def run_llm_episode(env: JigsawEnv, model: Model | str | None = None,
                          config: LLMAgentConfig | None = None) -> AgentRun:
    """Play the environment's current episode with a model (a Model or a name for resolve_model)."""
    cfg = config or LLMAgentConfig()
    settings = ModelSettings(temperature=cfg.temperature, max_tokens=cfg.max_tokens, seed=cfg.seed)
    episode = await run_episode(env, model, vision=cfg.vision, settings=settings)
    result = episode.result
    termination = result.termination if episode.termination == ENVIRONMENT_DONE else episode.termination
    turns = [TurnRecord(kind=t["kind"], format_ok=t["format_ok"], feedback=t["feedback"]) for t in env.log]
    return AgentRun(result=result, termination=termination, turns=turns, usage=episode.usage,
                    error=episode.error, episode=episode)


__all__ = ["AgentRun", "LLMAgentConfig", "TurnRecord", "run_llm_episode", "system_prompt"]

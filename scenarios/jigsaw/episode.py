"""A jigsaw episode played by the rein Agent: the environment is its `python` tool.

The first user message is the opening observation. The agent acts by calling the tool (one
environment step per call); the step that ends the episode ends the turn (`environment_done`).
A reply without a tool call is read as an action the way text-only models write them (a
```python block or a JSON move, scenarios/jigsaw/actions.py), and the next observation goes
back as the next user message, so models that cannot call tools still play, one turn each.
The whole episode is one thread: interventions, modes, checkpoints, stream events and the cost
ledger apply as to any agent run, and an episode continues on a rebuilt agent from its thread.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass, field
from typing import Any, Literal

from agent.events import StreamEvent
from agent.ledger import CostLedger
from agent.messages import Message, ModelSettings, Usage
from agent.models import Model
from agent.modes import StepLimits
from agent.runtime import Agent, RunResult
from agent.terminations import Termination
from scenarios.jigsaw.env import EpisodeResult, JigsawEnv
from scenarios.jigsaw.observe import Observation
from scenarios.jigsaw.toolkit import ENVIRONMENT_DONE, jigsaw_toolkit

SYSTEM_PROMPT = """\
You are solving a jigsaw puzzle. A photo was cut into a {n}x{n} grid and the pieces were shuffled.
Positions are numbered row by row from 0 (top left) to {last} (bottom right). The variable `state`
lists the piece label at each position; labels are arbitrary ids, not the answer.

Act by calling the `python` tool with code that uses these functions (no imports):
  swap(i, j)                   exchange the pieces at positions i and j
  observation(state)           picture of the arrangement; you see it after the step
  crop(img, [x1, y1, x2, y2])  region of a picture, coordinates from 0 to 1
  zoom(img, factor)            enlarge a picture (factor up to 4)
  answer()                     submit; this ends the puzzle
Each tool call is one turn and returns the next observation. Models that cannot call tools may
reply with one ```python block, or one JSON action such as {{"action": "swap", "i": 0, "j": 1}}.

How to solve: the edge hints give, for each piece label, the label that fits best to its right
and below it (lower score = better fit). Move pieces with swap() until every seam in "worst
seams now" scores below 0.3, and only then call answer(). Calling answer() early fails the
puzzle. You have {turns} turns; solving in fewer turns scores higher."""


def system_prompt(env: JigsawEnv) -> str:
    """The system prompt for this puzzle."""
    n = env.config.grid
    return SYSTEM_PROMPT.format(n=n, last=n * n - 1, turns=env.config.max_turns)


@dataclass
class EpisodeRun:
    """A jigsaw episode played through the Agent."""

    result: EpisodeResult
    """Environment metrics (solved, score, steps, reward) at the end."""
    termination: Termination | Literal["not_finished"]
    """environment_done when the episode ended; else the last turn's (model_error, max_steps,
    too_many_errors, ...), or not_finished when the caller's turn budget ran out first."""
    thread_id: str
    """The agent thread holding the episode's messages and checkpoints."""
    runs: list[RunResult] = field(default_factory=list)
    """Every agent turn, in order."""
    error: str | None = None
    """Error detail of the turn that stopped the episode, if any."""

    @property
    def ledger(self) -> CostLedger:
        """What the episode spent, over every turn."""
        total = CostLedger()
        for run in self.runs:
            total.merge(run.ledger)
        return total

    @property
    def usage(self) -> Usage:
        """Tokens used over the episode."""
        return self.ledger.usage

    @property
    def events(self) -> list[StreamEvent]:
        """Every stream event of every turn."""
        return [e for run in self.runs for e in run.events]

    @property
    def messages(self) -> list[Message]:
        """Messages the episode's turns added (inputs included)."""
        return [m for run in self.runs for m in run.messages]


def observation_message(observation: Observation, vision: bool) -> Message:
    """A user message carrying an observation (with the picture for vision models)."""
    return Message.user(observation.content_parts(include_image=True) if vision else observation.text())


def jigsaw_agent(
    env: JigsawEnv,
    model: Model | str | None,
    *,
    vision: bool = False,
    settings: ModelSettings | None = None,
    checkpointer: Any = "memory",
    name: str = "jigsaw",
    **agent_options: Any,
) -> Agent:
    """An Agent whose tool is the environment; each turn may take up to the episode's turn limit."""
    limits = StepLimits(agentic=env.config.max_turns + 1)
    return Agent(model, jigsaw_toolkit(env, vision=vision), system_prompt(env), step_limits=limits,
                 settings=settings, checkpointer=checkpointer, name=name, **agent_options)


async def play_episode(
    env: JigsawEnv,
    agent: Agent,
    *,
    thread_id: str | None = None,
    vision: bool = False,
    max_agent_turns: int | None = None,
) -> EpisodeRun:
    """Play the environment's current episode with the agent, to its end.

    `thread_id` of an earlier call continues that episode (the thread's history is kept, e.g. on a
    rebuilt agent with the same checkpointer); `max_agent_turns` stops after that many turns.
    """
    out = EpisodeRun(result=env.result(), termination="not_finished", thread_id=thread_id or uuid.uuid4().hex)
    message = observation_message(env.last_observation, vision)
    while not env.done and (max_agent_turns is None or len(out.runs) < max_agent_turns):
        run = await agent.ainvoke(message, out.thread_id)
        out.runs.append(run)
        if env.done:
            break
        if run.termination != "agent_stop":
            out.termination, out.error = run.termination, run.error
            break
        # No tool call: read the reply as a text action, as the pre-tool protocol did.
        step = await asyncio.to_thread(env.step, run.output)
        message = observation_message(step.observation, vision)
    if env.done:
        out.termination = ENVIRONMENT_DONE
    out.result = env.result()
    return out


async def run_episode(
    env: JigsawEnv,
    model: Model | str | None,
    *,
    vision: bool = False,
    settings: ModelSettings | None = None,
    checkpointer: Any = "memory",
) -> EpisodeRun:
    """Build the agent, play the current episode, close the agent (a model given by name too)."""
    agent = jigsaw_agent(env, model, vision=vision, settings=settings, checkpointer=checkpointer)
    try:
        return await play_episode(env, agent, vision=vision)
    finally:
        await agent.aclose()
        if not isinstance(model, Model):
            await agent.model.aclose()  # built here from a name, so released here

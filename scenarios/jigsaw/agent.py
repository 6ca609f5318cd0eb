"""The LLM agent loop for jigsaw puzzles, as a LangGraph state machine: observe → act → feedback.

`observe` turns the environment's latest observation (plus a short history) into a model request,
`act` asks the model, `feedback` runs the reply in the environment (a ```python block goes to the
sandbox, a JSON move is applied directly, anything else is a format error the model is told
about), and the loop ends when the episode does. Works with any rein model.
"""

from __future__ import annotations

import asyncio
import operator
from dataclasses import dataclass, field
from typing import Annotated, Any, TypedDict

from langgraph.graph import END, START, StateGraph

from agent.messages import Message, ModelRequest, ModelSettings, Usage
from agent.models import Model, ModelError, resolve_model
from scenarios.jigsaw.env import EpisodeResult, JigsawEnv

SYSTEM_PROMPT = """\
You are solving a jigsaw puzzle. A photo was cut into a {n}x{n} grid and the pieces were shuffled.
Positions are numbered row by row from 0 (top left) to {last} (bottom right). The variable `state`
lists the piece label at each position; labels are arbitrary ids, not the answer.

Each turn, reply with one ```python block that uses these functions (no imports):
  swap(i, j)                   exchange the pieces at positions i and j
  observation(state)           picture of the arrangement; you see it after the step
  crop(img, [x1, y1, x2, y2])  region of a picture, coordinates from 0 to 1
  zoom(img, factor)            enlarge a picture (factor up to 4)
  answer()                     submit; this ends the puzzle
Models that do not write code may reply with one JSON action instead, such as
{{"action": "swap", "i": 0, "j": 1}}.

How to solve: the edge hints give, for each piece label, the label that fits best to its right
and below it (lower score = better fit). Move pieces with swap() until every seam in "worst
seams now" scores below 0.3, and only then call answer(). Calling answer() early fails the
puzzle. You have {turns} turns; solving in fewer turns scores higher.

Example reply:
```python
swap(0, 3)
swap(1, 2)
observation(state)
```"""


@dataclass
class LLMAgentConfig:
    """How the LLM agent talks to its model."""

    vision: bool = False
    """Send the picture as a PNG content part (for vision models); text-only models get text alone."""
    history_turns: int = 2
    """Earlier (observation, reply) pairs kept in each request."""
    max_tokens: int = 400
    """Cap on each reply."""
    temperature: float | None = 0.2
    """Sampling temperature; None keeps the model's default."""
    seed: int | None = 0
    """Sampling seed for models that take one."""


@dataclass
class TurnRecord:
    """One turn of the loop."""

    reply: str
    """The model's reply."""
    kind: str
    """code, json or invalid."""
    format_ok: bool
    """Whether the reply held a well-formed action."""
    feedback: str
    """What the environment said back."""


@dataclass
class AgentRun:
    """The outcome of one LLM episode."""

    result: EpisodeResult
    """Environment metrics (solved, score, steps, reward)."""
    termination: str
    """answered, turn_limit or model_error."""
    turns: list[TurnRecord] = field(default_factory=list)
    """Every turn, in order."""
    usage: Usage = field(default_factory=Usage)
    """Tokens used by the model over the episode."""
    error: str | None = None
    """The model error that stopped the episode, if any."""


class _LoopState(TypedDict, total=False):
    request: dict[str, Any]
    reply: str
    turns: Annotated[list[dict[str, Any]], operator.add]
    usage: Annotated[list[dict[str, Any]], operator.add]
    done: bool
    error: str | None


def system_prompt(env: JigsawEnv) -> str:
    """The system prompt for this puzzle."""
    n = env.config.grid
    return SYSTEM_PROMPT.format(n=n, last=n * n - 1, turns=env.config.max_turns)


def build_loop(env: JigsawEnv, model: Model, config: LLMAgentConfig | None = None) -> Any:
    """The compiled observe → act → feedback graph for one environment episode."""
    cfg = config or LLMAgentConfig()
    settings = ModelSettings(temperature=cfg.temperature, max_tokens=cfg.max_tokens, seed=cfg.seed)
    system = Message.system(system_prompt(env))

    def observe(state: _LoopState) -> dict[str, Any]:
        history: list[Message] = []
        for turn in (state.get("turns") or [])[-cfg.history_turns:] if cfg.history_turns else []:
            history.append(Message.user(turn["observation"]))
            history.append(Message.assistant(turn["reply"]))
        current = env.last_observation
        content: str | list[dict[str, Any]] = (
            current.content_parts(include_image=True) if cfg.vision else current.text()
        )
        request = ModelRequest(messages=[system, *history, Message.user(content)], settings=settings)
        return {"request": request.model_dump(mode="json")}

    async def act(state: _LoopState) -> dict[str, Any]:
        request = ModelRequest.model_validate(state["request"])
        try:
            response = await model.complete(request)
        except ModelError as exc:
            return {"error": str(exc), "done": True}
        return {"reply": response.text, "usage": [response.usage.model_dump()]}

    async def feedback(state: _LoopState) -> dict[str, Any]:
        seen = env.last_observation.text()
        step = await asyncio.to_thread(env.step, state.get("reply", ""))
        record = {"observation": seen, "reply": state.get("reply", ""), "kind": step.info.get("kind", ""),
                  "format_ok": bool(step.info.get("format_ok")), "feedback": step.observation.feedback}
        return {"turns": [record], "done": step.done}

    def after_act(state: _LoopState) -> str:
        return END if state.get("error") else "feedback"

    def after_feedback(state: _LoopState) -> str:
        return END if state.get("done") else "observe"

    graph = StateGraph(_LoopState)
    graph.add_node("observe", observe)
    graph.add_node("act", act)
    graph.add_node("feedback", feedback)
    graph.add_edge(START, "observe")
    graph.add_edge("observe", "act")
    graph.add_conditional_edges("act", after_act, ["feedback", END])
    graph.add_conditional_edges("feedback", after_feedback, ["observe", END])
    return graph.compile()


async def run_llm_episode(env: JigsawEnv, model: Model | str | None = None,
                          config: LLMAgentConfig | None = None) -> AgentRun:
    """Play the environment's current episode with a model (a Model or a name for resolve_model)."""
    resolved = resolve_model(model)
    loop = build_loop(env, resolved, config)
    try:
        final = await loop.ainvoke({"turns": [], "usage": []},
                                   config={"recursion_limit": 4 * env.config.max_turns + 8})
    finally:
        if not isinstance(model, Model):
            await resolved.aclose()  # built here from a name, so released here
    usage = Usage()
    for item in final.get("usage") or []:
        usage = usage + Usage.model_validate(item)
    turns = [TurnRecord(reply=t["reply"], kind=t["kind"], format_ok=t["format_ok"], feedback=t["feedback"])
             for t in final.get("turns") or []]
    error = final.get("error")
    result = env.result()
    termination = "model_error" if error else result.termination
    return AgentRun(result=result, termination=termination, turns=turns, usage=usage, error=error)

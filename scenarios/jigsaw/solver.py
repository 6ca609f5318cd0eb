"""The classical solver agent: reads the picture, searches for the best arrangement, acts through code.

It sees what any agent sees (the current picture, without overlays, and the `state` labels), cuts
the picture into cells, scores every pair of edges (scenarios.jigsaw.edges), finds the
arrangement with the lowest total seam cost (exact branch and bound up to 3×3, beam search with
swap refinement beyond), and sends one code action: the swaps, a final observation, `answer()`.

`SolverModel` is the solver as a rein model: it answers each request with one call of the
environment's `python` tool, so it plays through the Agent like any LLM (scenarios/jigsaw/episode.py).
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass

from agent.messages import ModelRequest, ModelResponse, ToolCall, Usage
from agent.models.base import Model
from scenarios.jigsaw.edges import edge_costs
from scenarios.jigsaw.env import EpisodeResult, JigsawEnv
from scenarios.jigsaw.puzzle import cut, swaps_to
from scenarios.jigsaw.search import Placement, solve


@dataclass
class SolverAgent:
    """Baseline and reference agent for the jigsaw environment."""

    exact_up_to: int = 3
    """Largest grid solved by exact branch and bound; larger ones use beam search."""
    beam_width: int = 300
    """Partial arrangements kept per position by the beam search."""
    node_limit: int = 2_000_000
    """Node budget of the exact search; past it the best arrangement found so far is used."""
    last_placement: Placement | None = None
    """The search result behind the last plan."""

    def plan(self, env: JigsawEnv) -> str:
        """The code action that rearranges the current puzzle into the best arrangement found."""
        grid = env.config.grid
        cells = cut(env.pixels(), grid)
        lr, tb = edge_costs(cells)
        placement = solve(lr, tb, grid, exact_up_to=self.exact_up_to, beam_width=self.beam_width,
                          node_limit=self.node_limit)
        self.last_placement = placement
        state = env.state
        target = [state[cell] for cell in placement.arrangement]
        how = "exact branch and bound" if placement.exact else "beam search + swap refinement"
        lines = [f"# classical solver: edge dissimilarity, {how}, total seam cost {placement.cost:.3f}"]
        lines += [f"swap({i}, {j})" for i, j in swaps_to(state, target)]
        lines += ["observation(state)", "answer()"]
        return "\n".join(lines)

    def run_episode(self, env: JigsawEnv) -> EpisodeResult:
        """Play the current episode to its end through the Agent and return its metrics."""
        from scenarios.jigsaw.episode import run_episode

        run = asyncio.run(run_episode(env, SolverModel(env, self)))
        return run.result


class SolverModel(Model):
    """The solver as a model: it reads the puzzle it is bound to and calls the `python` tool.

    It sees what the old solver saw (the picture without overlays and the `state` labels, read
    from the environment rather than from the PNG in the request, whose overlays would hide the
    edges); after the episode it answers with text, which ends the turn.
    """

    def __init__(self, env: JigsawEnv, solver: SolverAgent | None = None, name: str = "jigsaw-solver") -> None:
        self.env = env
        self.solver = solver or SolverAgent()
        self.name = name
        self.calls = 0

    async def complete(self, request: ModelRequest) -> ModelResponse:
        self.calls += 1
        if self.env.done:
            return ModelResponse(text="The puzzle is answered.", usage=Usage(requests=1), model=self.name)
        code = await asyncio.to_thread(self.solver.plan, self.env)
        return ModelResponse(
            tool_calls=[ToolCall(name="python", arguments=_json_arguments(code))],
            finish_reason="tool_calls", usage=Usage(requests=1), model=self.name,
        )


def _json_arguments(code: str) -> str:
    return json.dumps({"code": code})


@dataclass(frozen=True)
class CodeReply:
    """A reply holding one fenced python block, as a model would write it."""

    code: str
    """The code."""

    @property
    def text(self) -> str:
        """The reply text."""
        return f"```python\n{self.code}\n```"

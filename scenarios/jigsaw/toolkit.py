"""The jigsaw environment as rein tools: one `python` tool whose calls are the episode's code actions.

Each call is one environment step: the code runs in the environment's sandbox session (with
swap / observation / crop / zoom / answer bound), and the tool result is the next observation,
as its text rendering, or as content parts with the picture for vision models. The step that
ends the episode (answer() or the turn limit) ends the agent's turn with the termination
`environment_done`.
"""

from __future__ import annotations

from typing import Final

from scenarios.jigsaw.actions import CodeAction
from scenarios.jigsaw.env import JigsawEnv
from scenarios.jigsaw.observe import Observation
from tools.errors import ToolError
from tools.execute import ToolOutput
from tools.registry import Toolkit
from tools.tool import Tool, ToolKind, tool

ENVIRONMENT_DONE: Final = "environment_done"
"""The termination of the turn in which the episode ended."""

_DESCRIPTION = (
    "Run one action on the puzzle: Python code that may call swap(i, j), observation(state), "
    "crop(img, [x1, y1, x2, y2]), zoom(img, factor) and answer(); `state` lists the piece label at "
    "each position. Each call uses one turn; the result is the next observation. answer() submits "
    "the arrangement and ends the puzzle. No imports."
)


def observation_output(observation: Observation, vision: bool) -> ToolOutput:
    """A tool result for an observation: text, the picture for vision models, the end of the episode."""
    return ToolOutput(
        text=observation.text(),
        parts=observation.content_parts(include_image=True) if vision else None,
        end_turn=ENVIRONMENT_DONE if observation.done else None,
    )


def jigsaw_tool(env: JigsawEnv, *, vision: bool = False, name: str = "python") -> Tool:
    """The code-action tool bound to one environment."""

    def python(code: str) -> ToolOutput:
        """Run one code action on the puzzle.

        Args:
            code: Python source using swap, observation, crop, zoom and answer.
        """
        if env.done:
            raise ToolError("the puzzle is over; no more actions are taken")
        step = env.step(CodeAction(code=code))
        return observation_output(step.observation, vision)

    limits = env.sandbox_limits
    # WRITE: each call changes the puzzle, so calls run one at a time and are journaled.
    built = tool(name=name, description=_DESCRIPTION, kind=ToolKind.WRITE,
                 timeout_s=limits.wall_s + limits.startup_s + 5)(python)
    built.metadata["jigsaw_env"] = env
    return built


def jigsaw_toolkit(env: JigsawEnv, *, vision: bool = False) -> Toolkit:
    """A toolkit holding the environment's `python` tool."""
    return Toolkit([jigsaw_tool(env, vision=vision)], name="jigsaw")

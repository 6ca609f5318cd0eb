"""AGILE-style jigsaw puzzles: an interactive environment with code actions, played by the rein Agent.

Public names load on first use, so `rein jigsaw --help` and `import scenarios.jigsaw` stay light.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent.lazy import lazy_exports

_EXPORTS = {
    "ActionFormatError": "scenarios.jigsaw.actions",
    "CodeAction": "scenarios.jigsaw.actions",
    "MoveAction": "scenarios.jigsaw.actions",
    "parse_action": "scenarios.jigsaw.actions",
    "AgentRun": "scenarios.jigsaw.agent",
    "LLMAgentConfig": "scenarios.jigsaw.agent",
    "run_llm_episode": "scenarios.jigsaw.agent",
    "EpisodeRun": "scenarios.jigsaw.episode",
    "jigsaw_agent": "scenarios.jigsaw.episode",
    "play_episode": "scenarios.jigsaw.episode",
    "run_episode": "scenarios.jigsaw.episode",
    "jigsaw_toolkit": "scenarios.jigsaw.toolkit",
    "SolverModel": "scenarios.jigsaw.solver",
    "EpisodeOver": "scenarios.jigsaw.env",
    "EpisodeResult": "scenarios.jigsaw.env",
    "JigsawConfig": "scenarios.jigsaw.env",
    "JigsawEnv": "scenarios.jigsaw.env",
    "StepResult": "scenarios.jigsaw.env",
    "BenchCell": "scenarios.jigsaw.jigsaw_eval",
    "solver_bench": "scenarios.jigsaw.jigsaw_eval",
    "BUNDLED_PHOTOS": "scenarios.jigsaw.images",
    "DEFAULT_PHOTOS": "scenarios.jigsaw.images",
    "ImageLoadError": "scenarios.jigsaw.images",
    "load_image": "scenarios.jigsaw.images",
    "Observation": "scenarios.jigsaw.observe",
    "SolverAgent": "scenarios.jigsaw.solver",
}

if TYPE_CHECKING:
    from scenarios.jigsaw.actions import ActionFormatError, CodeAction, MoveAction, parse_action
    from scenarios.jigsaw.agent import AgentRun, LLMAgentConfig, run_llm_episode
    from scenarios.jigsaw.env import EpisodeOver, EpisodeResult, JigsawConfig, JigsawEnv, StepResult
    from scenarios.jigsaw.episode import EpisodeRun, jigsaw_agent, play_episode, run_episode
    from scenarios.jigsaw.images import BUNDLED_PHOTOS, DEFAULT_PHOTOS, ImageLoadError, load_image
    from scenarios.jigsaw.jigsaw_eval import BenchCell, solver_bench
    from scenarios.jigsaw.observe import Observation
    from scenarios.jigsaw.solver import SolverAgent, SolverModel
    from scenarios.jigsaw.toolkit import jigsaw_toolkit


__getattr__ = lazy_exports(__name__, _EXPORTS)


__all__ = [
    "ActionFormatError",
    "AgentRun",
    "BUNDLED_PHOTOS",
    "BenchCell",
    "CodeAction",
    "DEFAULT_PHOTOS",
    "EpisodeOver",
    "EpisodeResult",
    "EpisodeRun",
    "ImageLoadError",
    "JigsawConfig",
    "JigsawEnv",
    "LLMAgentConfig",
    "MoveAction",
    "Observation",
    "SolverAgent",
    "SolverModel",
    "StepResult",
    "jigsaw_agent",
    "jigsaw_toolkit",
    "load_image",
    "parse_action",
    "play_episode",
    "run_episode",
    "run_llm_episode",
    "solver_bench",
]

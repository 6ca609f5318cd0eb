"""AGILE-style jigsaw puzzles: an interactive environment with code actions, a solver and an LLM agent loop.

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
    "EpisodeOver": "scenarios.jigsaw.env",
    "EpisodeResult": "scenarios.jigsaw.env",
    "JigsawConfig": "scenarios.jigsaw.env",
    "JigsawEnv": "scenarios.jigsaw.env",
    "StepResult": "scenarios.jigsaw.env",
    "BenchCell": "scenarios.jigsaw.evaluate",
    "solver_bench": "scenarios.jigsaw.evaluate",
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
    from scenarios.jigsaw.evaluate import BenchCell, solver_bench
    from scenarios.jigsaw.images import BUNDLED_PHOTOS, DEFAULT_PHOTOS, ImageLoadError, load_image
    from scenarios.jigsaw.observe import Observation
    from scenarios.jigsaw.solver import SolverAgent


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
    "ImageLoadError",
    "JigsawConfig",
    "JigsawEnv",
    "LLMAgentConfig",
    "MoveAction",
    "Observation",
    "SolverAgent",
    "StepResult",
    "load_image",
    "parse_action",
    "run_llm_episode",
    "solver_bench",
]

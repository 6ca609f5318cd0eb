"""What each mode means for a model request: which tools are offered and how many steps it gets."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agent.hooks import Mode
from agent.messages import ModelSettings


@dataclass(frozen=True)
class StepLimits:
    """Maximum model calls per user turn, per mode."""

    instant: int = 1
    """Instant answers in one call."""
    reasoning: int = 2
    """A reasoning step, then the answer."""
    agentic: int = 12
    """Plan, tool calls, answer."""

    def for_mode(self, mode: Mode) -> int:
        """The cap of one mode."""
        return int(getattr(self, mode))


def offered_tools(mode: Mode, tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Only the agentic mode acts with tools; instant and reasoning answer from the model alone."""
    return tools if mode == "agentic" else []


def settings_for(mode: Mode, base: ModelSettings) -> ModelSettings:
    """Request settings of a mode: tools are switched off outside the agentic mode."""
    if mode == "agentic":
        return base
    return base.model_copy(update={"tool_choice": None})

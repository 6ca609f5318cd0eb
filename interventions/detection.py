"""Inception modules' common shape: a detector maps the dialogue to "no error" or an error type."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from agent.messages import Message
from agent.plugin_api import InterventionContext
from interventions.error_map import NO_ERROR


@dataclass
class Detection:
    """A detector's verdict on the latest user turn."""

    error_type: str
    """An error type of the map, or "none"."""
    confidence: float = 1.0
    """The detector's probability (or 1.0 when it gives none) for error_type."""
    rationale: str = ""
    """Why, when the detector says (the LLM detector does)."""
    detector: str = ""
    """Which detector decided: "offline" or "llm"."""
    scores: dict[str, float] = field(default_factory=dict)
    """Per-label scores, when the detector has them."""

    @property
    def is_error(self) -> bool:
        """Whether an error was found."""
        return self.error_type != NO_ERROR


@runtime_checkable
class Detector(Protocol):
    """Maps the dialogue at the start of a user turn to a Detection."""

    name: str

    async def detect(self, ctx: InterventionContext, labels: list[str]) -> Detection:
        """Diagnose the latest user turn; labels are the error types the map knows."""
        ...


def latest_user_turn(dialogue: list[Message]) -> str:
    """Text of the last user message, or "" when the dialogue does not end with one."""
    return dialogue[-1].text if dialogue and dialogue[-1].role == "user" else ""


def previous_agent_turn(dialogue: list[Message]) -> str:
    """Text of the assistant message right before the last user message, or ""."""
    if len(dialogue) >= 2 and dialogue[-1].role == "user" and dialogue[-2].role == "assistant":
        return dialogue[-2].text
    return ""

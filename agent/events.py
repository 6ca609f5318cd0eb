"""Typed stream events: a union of small classes told apart by their `type` field."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from agent.terminations import Termination


@dataclass(frozen=True)
class ModeDecided:
    """The mode slot chose how this turn is answered."""

    mode: str
    """instant, reasoning or agentic."""
    reason: str = ""
    """Why (e.g. "forced", "router").""" 
    scores: dict[str, float] = field(default_factory=dict)
    """Per-mode scores from the router, when there is one."""
    type: Literal["mode"] = "mode"


@dataclass(frozen=True)
class InterventionApplied:
    """An intervention ran at the start of the turn."""

    name: str
    """Intervention name."""
    activated: bool
    """Whether it planted anything."""
    record: dict[str, Any] = field(default_factory=dict)
    """What it diagnosed and planted."""
    type: Literal["intervention"] = "intervention"


@dataclass(frozen=True)
class TokenDelta:
    """A piece of answer text from the model."""

    text: str
    """The new text."""
    type: Literal["token"] = "token"


@dataclass(frozen=True)
class ReasoningDelta:
    """A piece of reasoning from the model."""

    text: str
    """The new reasoning text."""
    type: Literal["reasoning"] = "reasoning"


@dataclass(frozen=True)
class ToolCallEvent:
    """The model called a tool."""

    call_id: str
    """Id of the call."""
    name: str
    """Tool name."""
    arguments: str
    """Raw JSON arguments."""
    type: Literal["tool_call"] = "tool_call"


@dataclass(frozen=True)
class ToolResultEvent:
    """A tool call was answered."""

    call_id: str
    """Id of the call."""
    name: str
    """Tool name."""
    content: str
    """Text of the tool message."""
    is_error: bool = False
    """Whether the call failed."""
    type: Literal["tool_result"] = "tool_result"


@dataclass(frozen=True)
class ApprovalRequested:
    """The run paused: these calls need a human's approval (resume with approve or reject)."""

    calls: list[dict[str, Any]]
    """The calls awaiting approval: id, name, arguments."""
    type: Literal["approval"] = "approval"


@dataclass(frozen=True)
class GuardrailTriggered:
    """A guardrail fired: it blocked, rewrote, paused or planted a plan (agent/guardrails.py)."""

    name: str
    """Guardrail name."""
    kind: str
    """What it checked: input, output or tool_result."""
    action: str
    """allow (with a plan), block, rewrite or pause."""
    reason: str = ""
    """Why, in a few words."""
    tool: str | None = None
    """For tool_result: the tool whose result it checked."""
    call_id: str | None = None
    """For tool_result: the call whose result it checked."""
    planted: bool = False
    """Whether it planted a plan in the agent's reasoning."""
    record: dict[str, Any] = field(default_factory=dict)
    """What the guardrail recorded (scores, cues…)."""
    type: Literal["guardrail"] = "guardrail"


@dataclass(frozen=True)
class FinalAnswer:
    """The turn ended."""

    text: str
    """The agent's last answer text (may be empty)."""
    termination: Termination
    """Why the turn ended."""
    type: Literal["final"] = "final"


StreamEvent = (
    ModeDecided
    | InterventionApplied
    | TokenDelta
    | ReasoningDelta
    | ToolCallEvent
    | ToolResultEvent
    | ApprovalRequested
    | GuardrailTriggered
    | FinalAnswer
)


def event_to_dict(event: StreamEvent) -> dict[str, Any]:
    """A JSON-ready dict of an event."""
    return asdict(event)

"""The runtime's plug-in interfaces: interventions (before each user turn) and mode policies.

Plug-ins implement these protocols; the runtime finds them by name through agent.plugins, so the
core never imports the packages that provide them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

from agent.messages import Message, ModelResponse

if TYPE_CHECKING:
    from agent.ledger import CostLedger
    from agent.models.base import Model
    from tools import Tool

Mode = Literal["instant", "reasoning", "agentic"]
MODES: tuple[Mode, ...] = ("instant", "reasoning", "agentic")

PlantVia = Literal["think_tool", "reasoning_block", "tool_call", "system_prompt"]


@dataclass
class InterventionContext:
    """What an intervention sees at the start of a user turn."""

    dialogue: list[Message]
    """The surface dialogue so far: user and assistant text turns, no tool internals."""
    tools: list[dict[str, Any]]
    """The agent's tools as OpenAI function schemas."""
    turn: int
    """Index of this user turn in the thread (0-based)."""
    model: Model
    """The agent's model, for interventions that think with it."""
    ledger: CostLedger
    """Book any model spend here (label it with the intervention's name)."""
    system_prompt: str = ""
    """The agent's system prompt (its stated purpose), read-only: interventions never change it."""
    planted: dict[int, str] = field(default_factory=dict)
    """The earlier user turns in which a plan was planted, with the intervention that planted it."""


@dataclass
class Plant:
    """Reasoning an intervention plants for this turn."""

    text: str
    """The planted reasoning (e.g. a diagnosis and recovery plan)."""
    via: PlantVia = "think_tool"
    """How it enters the context: a synthetic think-tool call (default), a reasoning block on a
    synthetic assistant message, a synthetic call of another tool answered by `text` (context a
    node fetched for the agent, e.g. retrieval), or, for the naive-prompt-injection baseline only,
    the system prompt."""
    tool: str | None = None
    """For via="tool_call": the tool the synthetic call names."""
    arguments: dict[str, Any] = field(default_factory=dict)
    """For via="tool_call": the arguments of the synthetic call."""
    record: dict[str, Any] = field(default_factory=dict)
    """What to record in the trajectory (error type, recovery tool, scores…)."""


@runtime_checkable
class Intervention(Protocol):
    """Runs at the start of each user turn and may plant reasoning; never edits weights."""

    name: str

    async def before_turn(self, ctx: InterventionContext) -> Plant | None:
        """Diagnose the dialogue; return a Plant, or None when nothing is wrong."""
        ...


@runtime_checkable
class ToolProvider(Protocol):
    """Optional: an intervention that declares tools to the agent (ReIn's recovery tools).

    The agent adds each one it does not already have; a tool of the agent's own with the same name
    wins. A declared tool marked PLAN_ONLY (tools.builtin) is offered only in turns where a plan
    was planted.
    """

    def declared_tools(self) -> list[Tool]:
        """The tools to declare to the agent."""
        ...


@runtime_checkable
class ResponseReviewer(Protocol):
    """Optional second hook: review a model response before its tool calls run (self-refine)."""

    name: str

    async def review(
        self, ctx: InterventionContext, messages: list[Message], response: ModelResponse
    ) -> ModelResponse | None:
        """Return a revised response, or None to keep it."""
        ...


@dataclass
class ModeDecision:
    """The mode chosen for a turn."""

    mode: Mode
    """instant, reasoning or agentic."""
    reason: str = ""
    """Why (e.g. "forced", "router", "cost-aware").""" 
    scores: dict[str, float] = field(default_factory=dict)
    """Per-mode scores, when the policy has them."""


@runtime_checkable
class ModePolicy(Protocol):
    """Chooses the mode of each user turn."""

    async def decide(self, ctx: InterventionContext) -> ModeDecision:
        """Pick a mode for the current turn."""
        ...


@dataclass
class FixedMode:
    """A mode policy that always picks the same mode."""

    mode: Mode = "agentic"
    """The mode every turn gets."""

    async def decide(self, ctx: InterventionContext) -> ModeDecision:
        return ModeDecision(self.mode, reason="fixed")

"""What every simulated user shares: the view of the conversation it answers, and its reply."""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import Any, Literal

from agent.ledger import CostLedger
from agent.messages import Message, ToolCall

STOP = "###STOP###"
"""The user is done (goal reached or given up)."""
TRANSFER = "###TRANSFER###"
"""The user has been transferred to another agent."""
OUT_OF_SCOPE = "###OUT-OF-SCOPE###"
"""The user's instructions do not cover what the agent asks."""

Signal = Literal["stop", "transfer", "out_of_scope"]
SIGNALS: dict[str, Signal] = {STOP: "stop", TRANSFER: "transfer", OUT_OF_SCOPE: "out_of_scope"}


def signal_of(text: str) -> Signal | None:
    """The control token a user message carries, if any (the first one in the text wins)."""
    found = [(text.find(token), name) for token, name in SIGNALS.items() if token in text]
    return min(found)[1] if found else None


def strip_signals(text: str) -> str:
    """The text without control tokens."""
    for token in SIGNALS:
        text = text.replace(token, "")
    return text.strip()


class UserSimulationError(RuntimeError):
    """The user could not produce a message (its model failed, or it broke the guidelines)."""


@dataclass
class UserView:
    """What a user sees before its turn: the surface conversation and the agent's last actions."""

    dialogue: list[Message]
    """User and assistant text messages so far, the agent's greeting first (no tool traffic)."""
    turn: int
    """Index of the user turn to produce (0 = the opening message)."""
    tool_calls: list[ToolCall] = field(default_factory=list)
    """Tool calls the agent made since the user's last message."""

    @property
    def agent_text(self) -> str:
        """The agent's last message text ('' before it has said anything)."""
        return next((m.text for m in reversed(self.dialogue) if m.role == "assistant"), "")

    @property
    def tool_names(self) -> list[str]:
        """Names of the agent's tool calls since the user's last message."""
        return [c.name for c in self.tool_calls]


@dataclass
class UserReply:
    """One user message and what producing it cost."""

    text: str
    """The message, control tokens included."""
    reasoning: str | None = None
    """The simulator's reasoning, when its model gave any."""
    ledger: CostLedger = field(default_factory=CostLedger)
    """Model spend of the simulator (label "user_sim")."""
    record: dict[str, Any] = field(default_factory=dict)
    """Annotations for the trajectory (e.g. an injected error's type and recovery tool)."""

    @property
    def signal(self) -> Signal | None:
        """stop, transfer or out_of_scope when the message carries that token."""
        return signal_of(self.text)


class User(abc.ABC):
    """A conversation partner for the agent; one instance per run."""

    name: str = "user"

    @abc.abstractmethod
    async def respond(self, view: UserView) -> UserReply:
        """The user's next message."""

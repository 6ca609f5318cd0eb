"""What one request's turn gave the client: its reply, thread, mode, usage and pending approvals,
and how each protocol reads it (finish reason, error, rein's metadata)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agent.messages import Usage
from agent.server.approvals import PendingCall
from agent.server.errors import ApiError


@dataclass
class TurnOutcome:
    """The result of one request's turn, as the client sees it."""

    thread_id: str
    """Thread id to send back (X-Rein-Thread) to continue."""
    action: str
    """append, replay, rerun or resume."""
    forked_from: str | None = None
    """Parent thread when the conversation moved to a fork."""
    reply: str = ""
    """The committed reply text."""
    reasoning: str | None = None
    """The model's reasoning on the final answer, when it gave any."""
    mode: str | None = None
    """The mode the turn ran in."""
    interventions: list[dict[str, Any]] = field(default_factory=list)
    """Intervention records of the turn."""
    termination: str = "agent_stop"
    """Why the turn ended."""
    error: str | None = None
    """Error detail for failed turns."""
    usage: Usage = field(default_factory=Usage)
    """Tokens the turn used (interventions and routing included)."""
    cost: float = 0.0
    """Dollars the turn cost."""
    pending: list[PendingCall] = field(default_factory=list)
    """The calls the turn is paused on, waiting for decisions (termination "interrupted")."""

    @property
    def finish_reason(self) -> str:
        """OpenAI's finish reason: "tool_calls" when the turn paused for approval, "length" when
        the agent ran out of steps, else "stop"."""
        if self.pending:
            return "tool_calls"
        return "length" if self.termination == "max_steps" else "stop"

    def failed(self) -> ApiError | None:
        """The error to answer instead of a reply: a model failure that left no answer."""
        if self.termination == "model_error" and not self.reply:
            return ApiError(
                502,
                f"the agent's model failed: {self.error or 'unknown error'}. The user message is "
                "kept in the thread; resend the same request (the same Idempotency-Key, or the whole "
                "history) to run the turn again.",
                type="model_error",
                code="model_error",
            )
        return None

    def metadata(self) -> dict[str, Any]:
        """The `rein` field of the final response object or chunk."""
        return {
            "thread_id": self.thread_id,
            "forked_from": self.forked_from,
            "action": self.action,
            "mode": self.mode,
            "interventions": self.interventions,
            "termination": self.termination,
            "approval": {"pending": [c.as_dict() for c in self.pending]} if self.pending else None,
            "error": self.error,
            "usage": {
                "input_tokens": self.usage.input_tokens,
                "output_tokens": self.usage.output_tokens,
                "requests": self.usage.requests,
                "cost_usd": round(self.cost, 6),
            },
        }

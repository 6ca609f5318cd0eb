"""What one run of an Agent returns, and how the graph's stream is folded into it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agent import tracing
from agent.events import ApprovalRequested, FinalAnswer, StreamEvent
from agent.ledger import CostLedger, LedgerEntry
from agent.messages import Message, Usage
from agent.terminations import Termination


@dataclass
class RunResult:
    """The outcome of one user turn (or one resume)."""

    thread_id: str
    """Thread the turn belongs to."""
    output: str
    """The agent's final answer text."""
    termination: Termination
    """Why the turn ended: agent_stop, max_steps, too_many_errors, interrupted, model_error, tool_error,
    or environment_done (a tool's result ended the turn, e.g. a jigsaw episode's answer); see
    agent/terminations.py."""
    messages: list[Message]
    """Messages this run added: for a new turn the input message(s) first, then everything the
    graph appended; for a resume or a continue, only what was appended after it (a resume never
    repeats what the paused run returned, so a turn is its first result joined with its resumes')."""
    ledger: CostLedger
    """What this turn spent."""
    mode: str | None = None
    """The mode the turn ran in."""
    interventions: list[dict[str, Any]] = field(default_factory=list)
    """What interventions diagnosed and planted this turn."""
    pending_approval: list[dict[str, Any]] = field(default_factory=list)
    """Calls awaiting approval when termination is interrupted."""
    error: str | None = None
    """Error detail for model_error, tool_error and too_many_errors."""
    events: list[StreamEvent] = field(default_factory=list)
    """Every stream event of the turn."""
    appended_from: int = 0
    """Where the graph's own messages start in `messages`: after the input message(s) of a new
    turn, 0 for a resume or a continue."""

    @property
    def produced(self) -> list[Message]:
        """The messages the graph appended this run: `messages` without the inputs."""
        return self.messages[self.appended_from :]

    @property
    def usage(self) -> Usage:
        """Tokens used this turn."""
        return self.ledger.usage

    @property
    def cost(self) -> float:
        """Dollars spent this turn."""
        return self.ledger.cost


def empty_result(thread_id: str) -> RunResult:
    return RunResult(thread_id=thread_id, output="", termination="agent_stop", messages=[], ledger=CostLedger())


def absorb(result: RunResult, updates: dict[str, Any]) -> None:
    """Fold one superstep's node updates into the run result (no extra checkpoint read)."""
    for update in updates.values():
        if not isinstance(update, dict):
            continue
        result.messages.extend(Message.model_validate(m) for m in update.get("messages") or ())
        result.ledger.entries.extend(LedgerEntry.model_validate(e) for e in update.get("ledger") or ())
        result.interventions.extend(update.get("interventions") or ())
        turn = update.get("turn") or {}
        if turn.get("mode"):
            result.mode = turn["mode"]
        if turn.get("error"):
            result.error = turn["error"]
        if turn.get("termination"):
            result.termination = turn["termination"]


def record(event: StreamEvent, collect: RunResult | None, span: Any) -> StreamEvent:
    """An event of the turn, added to the result being collected and to the trace."""
    if collect is not None:
        collect.events.append(event)
    if span is not None:
        tracing.turn_event(span, event)
    return event


def stream_event(kind: str, chunk: Any, collect: RunResult | None) -> StreamEvent | None:
    """The event a graph stream chunk carries; node updates fold into the result instead."""
    if kind == "custom":
        return chunk
    if "__interrupt__" in chunk:
        value = chunk["__interrupt__"][0].value
        return ApprovalRequested(calls=list(value.get("calls", [])))
    if collect is not None:
        absorb(collect, chunk)
    return None


def finish(result: RunResult) -> RunResult:
    approvals = [e for e in result.events if isinstance(e, ApprovalRequested)]
    finals = [e for e in result.events if isinstance(e, FinalAnswer)]
    if finals:
        result.output = finals[-1].text
    elif approvals:
        result.termination = "interrupted"
        result.pending_approval = approvals[-1].calls
    return result


__all__ = ["RunResult", "absorb", "empty_result", "finish", "record", "stream_event"]

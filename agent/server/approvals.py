"""Approvals over HTTP: the calls a paused turn waits on, the decisions that answer them, and what a
request that carries decisions does to its thread.

A turn that reaches a tool needing approval pauses at a LangGraph interrupt, checkpointed with the
calls it waits on. The server reads them from the checkpoint (so they survive a restart and are
seen by every process sharing the database), shows them to Chat Completions clients as an assistant
message with `tool_calls` and `finish_reason: "tool_calls"`, and resumes the turn from its
checkpoint once every paused call has a decision. The rules (docs/server.md, "Approvals"):

- A paused thread takes no new user message (409 `approval_pending`): the paused calls are never run
  and never dropped by one. A retry of the request that paused (the same Idempotency-Key, or the
  same history) returns the same pause and runs nothing.
- Decisions must answer every paused call at once: the runtime resumes an interrupt once, and a call
  left out would otherwise be rejected without anyone deciding it.
- A decision sent again (a retry) returns what the first one produced; the tool journal runs each
  call at most once, even when the first resume was cut off by a crash.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from agent.messages import Message
from agent.runtime import Agent
from agent.server.errors import ApiError, bad_request
from agent.server.threads import turn_reply

DECISION_FORM = '{"approved": true} or {"approved": false, "reason": "why"}'
"""What the content of a tool message that answers a paused call must be (as JSON text)."""


@dataclass(frozen=True)
class PendingCall:
    """A tool call that a paused turn waits on."""

    id: str
    """The call id: a decision names it (Chat Completions: the tool message's `tool_call_id`)."""
    name: str
    """The tool's name."""
    arguments: str
    """The call's arguments as JSON text (OpenAI's `function.arguments`)."""
    reason: str | None = None
    """Why it waits when the tool itself does not ask for approval (a guardrail held the write)."""

    @classmethod
    def from_payload(cls, entry: dict[str, Any]) -> PendingCall:
        """One entry of the runtime's approval interrupt (`ApprovalRequested.calls`)."""
        args = entry.get("arguments", {})
        return cls(str(entry["id"]), str(entry["name"]), args if isinstance(args, str) else json.dumps(args),
                   entry.get("reason"))

    def as_dict(self) -> dict[str, Any]:
        """The call in rein's metadata (`rein.approval.pending`)."""
        return {"id": self.id, "name": self.name, "arguments": self.arguments, "reason": self.reason}

    def as_tool_call(self) -> dict[str, Any]:
        """The call as an OpenAI `tool_calls` entry of an assistant message."""
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}


@dataclass(frozen=True)
class Decision:
    """A human's answer to one paused call."""

    call_id: str
    """The paused call it answers."""
    approved: bool
    """Run the call (True) or decline it (False)."""
    reason: str | None = None
    """For a declined call: why, shown to the model in the call's tool message."""

    def resume_value(self) -> dict[str, Any]:
        """The decision as the runtime's resume value for its call."""
        return {"approved": self.approved, "reason": self.reason}


@dataclass
class Ruling:
    """What a request that answers paused calls does to its thread."""

    action: Literal["resume", "replay", "rerun"]
    """resume the paused turn; replay what an earlier, identical decision produced; rerun a turn
    whose model failed after that decision."""
    resume: dict[str, dict[str, Any]] = field(default_factory=dict)
    """For resume: the runtime's resume value, call id → {approved, reason}."""
    reply: str = ""
    """For replay: the text the turn said after those decisions."""
    pending: list[PendingCall] = field(default_factory=list)
    """For replay: the calls the thread waits on now (the turn paused again after the decisions)."""


def parse_decision(call_id: str, text: str) -> Decision:
    """The decision a tool message's text holds; a 400 ApiError naming the call otherwise."""
    try:
        value = json.loads(text)
    except ValueError:
        value = None
    reason = value.get("reason") if isinstance(value, dict) else None
    if (
        not isinstance(value, dict)
        or not isinstance(value.get("approved"), bool)
        or not set(value) <= {"approved", "reason"}
        or not (reason is None or isinstance(reason, str))
    ):
        raise bad_request(
            f"the tool message answering call {call_id!r} must hold a decision, {DECISION_FORM}; got {text[:200]!r}",
            param="messages",
        )
    return Decision(call_id, value["approved"], reason)


async def pending_calls(agent: Agent, thread: str) -> list[PendingCall]:
    """The calls the thread's checkpoint says its turn is paused on (none when it is not paused).

    Read from the checkpoint rather than the messages: a turn cut off by a crash after its model
    asked for tools also ends with unanswered calls, and must be continued, not put to a human.
    Call it only for a thread whose last message is open (`threads.is_open`): it loads the checkpoint.
    """
    # The runtime has no public reader for a thread's interrupts yet; its compiled graph has.
    graph = await agent._graph_for_loop()  # noqa: SLF001
    snapshot = await graph.aget_state({"configurable": {"thread_id": thread}})
    calls: list[PendingCall] = []
    for interrupt in snapshot.interrupts:
        value = interrupt.value
        if isinstance(value, dict) and value.get("type") == "approval":
            calls.extend(PendingCall.from_payload(c) for c in value.get("calls", []))
    return calls


def rule(decisions: Sequence[Decision], pending: Sequence[PendingCall], history: Sequence[Message]) -> Ruling:
    """What decisions do to a thread paused on `pending` (empty: not paused) with this history; an
    ApiError when they cannot apply (400 for calls left out or decided twice, 409 when nothing they
    name waits)."""
    ids = [d.call_id for d in decisions]
    if len(set(ids)) != len(ids):
        raise bad_request("each paused call takes one decision: a tool_call_id is answered twice", param="messages")
    waiting = {c.id for c in pending}
    if waiting and set(ids) <= waiting:
        missing = [c.id for c in pending if c.id not in ids]
        if missing:
            raise ApiError(
                400,
                f"the turn waits on {len(pending)} calls and every one needs a decision in the same request; "
                f"missing: {', '.join(missing)}",
                code="approval_incomplete", param="messages",
            )
        return Ruling("resume", resume={d.call_id: d.resume_value() for d in decisions})
    last = _last_answer(history, set(ids))
    if last is not None:
        # Every call named was answered already: a retry of decisions whose turn went on.
        reply = turn_reply(history, last)
        if not reply and not waiting and not any(m.role == "user" for m in history[last + 1 :]) and _ended_without_answer(history):
            return Ruling("rerun")
        return Ruling("replay", reply=reply, pending=list(pending))
    if waiting:
        raise ApiError(
            409,
            f"the turn waits on {_describe(pending)}; these calls are not among them: "
            f"{', '.join(i for i in ids if i not in waiting)}",
            code="approval_mismatch", param="messages",
        )
    raise ApiError(
        409,
        "no call awaits approval on this thread: tool messages answer only the calls of a paused turn "
        "(its response had finish_reason \"tool_calls\" and rein.approval.pending)",
        code="no_pending_approval", param="messages",
    )


def approval_pending(pending: Iterable[PendingCall]) -> ApiError:
    """409 for a new message on a thread whose turn waits for decisions."""
    return ApiError(
        409,
        f"this thread's turn is paused on {_describe(pending)}: answer each with a tool message "
        f"(tool_call_id and {DECISION_FORM}) before sending a new message",
        code="approval_pending", param="messages",
    )


def _describe(pending: Iterable[PendingCall]) -> str:
    return "calls awaiting approval (" + ", ".join(f"{c.id}: {c.name}" for c in pending) + ")"


def _last_answer(history: Sequence[Message], ids: set[str]) -> int | None:
    """Where the last tool message answering one of `ids` is, when every one of them has one."""
    found: dict[str, int] = {}
    for i, m in enumerate(history):
        if m.role == "tool" and m.tool_call_id in ids:
            found[m.tool_call_id] = i
    return max(found.values()) if ids and found.keys() == ids else None


def _ended_without_answer(history: Sequence[Message]) -> bool:
    """Whether the thread ends on tool results the model never answered (its model failed)."""
    return bool(history) and history[-1].role == "tool"

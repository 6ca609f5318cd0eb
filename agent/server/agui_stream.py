"""A rein turn's stream as AG-UI events, built with the protocol's own event classes and encoder.

What the client sees, in order: RUN_STARTED; for each step, CUSTOM `rein.mode` (the mode the turn
runs in) and CUSTOM `rein.intervention` (each intervention's record), a reasoning message with the
text an intervention planted, the model's own reasoning as reasoning messages, answer text as text
messages (a new one after each tool call), TOOL_CALL_START/ARGS/END and TOOL_CALL_RESULT for the
agent's own tools; then a STATE_SNAPSHOT of the turn's rein metadata and RUN_FINISHED, or
RUN_ERROR when the turn failed. A turn that paused on tools needing approval finishes with the
interrupt outcome: one interrupt per paused call, its id and toolCallId the call's id, its
responseSchema the decision the next run's `resume` carries (agui_input.py).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncGenerator
from typing import Any

from agent.extras import needs_extra

with needs_extra("agui", "rein's AG-UI endpoint"):
    from ag_ui.core import (
        BaseEvent,
        CustomEvent,
        Interrupt,
        ReasoningEndEvent,
        ReasoningMessageContentEvent,
        ReasoningMessageEndEvent,
        ReasoningMessageStartEvent,
        ReasoningStartEvent,
        RunErrorEvent,
        RunFinishedEvent,
        RunFinishedInterruptOutcome,
        RunFinishedSuccessOutcome,
        RunStartedEvent,
        StateSnapshotEvent,
        TextMessageContentEvent,
        TextMessageEndEvent,
        TextMessageStartEvent,
        TokenUsage,
        ToolCallArgsEvent,
        ToolCallEndEvent,
        ToolCallResultEvent,
        ToolCallStartEvent,
    )
    from ag_ui.core.version import PROTOCOL_VERSION
    from ag_ui.encoder import EventEncoder

from agent.server.approvals import PendingCall
from agent.server.chat_turns import TurnHandle, TurnOutcome
from agent.server.errors import ApiError
from agent.server.sse import next_item
from agent.server.threads import REPLY_SEPARATOR

log = logging.getLogger("rein.server")

MODE_EVENT = "rein.mode"
"""CUSTOM event name: the mode the turn runs in (value: mode, reason, scores)."""
INTERVENTION_EVENT = "rein.intervention"
"""CUSTOM event name: an intervention ran (value: name, activated, record)."""
PLANTED_BY = "rein.planted_by"
"""Metadata key on a reasoning message an intervention planted: the intervention's name."""
APPROVAL_REASON = "tool_approval"
"""The reason of an interrupt that waits for a decision on a tool call."""
DECISION_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"approved": {"type": "boolean"}, "reason": {"type": "string"}},
    "required": ["approved"],
    "additionalProperties": False,
}
"""The responseSchema of an approval interrupt: the payload of its resume entry."""


class RunEvents:
    """Translates one turn's stream items into AG-UI events.

    At most one text message, reasoning message or tool call is open at a time, and each is closed
    before another opens and before the run ends: the order `@ag-ui/client` verifies."""

    def __init__(self, thread_id: str, run_id: str) -> None:
        self.thread_id = thread_id
        """The client's threadId, echoed on RUN_STARTED and RUN_FINISHED."""
        self.run_id = run_id
        """The client's runId."""
        self._text: str | None = None
        self._reasoning: str | None = None
        self._after_tool = False  # the next answer text starts a new message
        self._shown = False  # whether any answer text went out

    def started(self) -> list[BaseEvent]:
        """The run's first event."""
        return [RunStartedEvent(thread_id=self.thread_id, run_id=self.run_id, protocol_version=PROTOCOL_VERSION)]

    def token(self, text: str) -> list[BaseEvent]:
        """Answer text."""
        out: list[BaseEvent] = []
        if self._text is None:
            out += self._close()
            if self._after_tool and text.startswith(REPLY_SEPARATOR):
                # The separator joins the texts around a tool call in Chat Completions' one
                # message; here each text is a message of its own.
                text = text[len(REPLY_SEPARATOR) :]
            self._after_tool = False
            self._text = _new_id()
            out.append(TextMessageStartEvent(message_id=self._text, role="assistant"))
        if text:
            self._shown = True
            out.append(TextMessageContentEvent(message_id=self._text, delta=text))
        return out

    def reasoning(self, text: str, metadata: dict[str, Any] | None = None) -> list[BaseEvent]:
        """Reasoning text: the model's, or (with metadata) an intervention's plant."""
        out: list[BaseEvent] = []
        if self._reasoning is None or metadata is not None:
            out += self._close()
            self._reasoning = _new_id()
            out += [
                ReasoningStartEvent(message_id=self._reasoning),
                ReasoningMessageStartEvent(message_id=self._reasoning, role="reasoning", metadata=metadata),
            ]
        if text:
            out.append(ReasoningMessageContentEvent(message_id=self._reasoning, delta=text))
        if metadata is not None:
            out += self._close()  # a plant is whole; the model's reasoning is a message of its own
        return out

    def event(self, item: dict[str, Any]) -> list[BaseEvent]:
        """A rein event (`event_to_dict` of a ModeDecided, InterventionApplied, ToolCallEvent or
        ToolResultEvent)."""
        kind = item.get("type")
        if kind == "mode":
            return [CustomEvent(name=MODE_EVENT, value={k: item.get(k) for k in ("mode", "reason", "scores")})]
        if kind == "intervention":
            value = {k: item.get(k) for k in ("name", "activated", "record")}
            out: list[BaseEvent] = [CustomEvent(name=INTERVENTION_EVENT, value=value)]
            planted = (item.get("record") or {}).get("text")
            if item.get("activated") and isinstance(planted, str) and planted:
                out += self.reasoning(planted, metadata={PLANTED_BY: item.get("name")})
            return out
        if kind == "tool_call":
            parent = self._text
            out = self._close()
            call_id = item["call_id"]
            out += [
                ToolCallStartEvent(tool_call_id=call_id, tool_call_name=item["name"], parent_message_id=parent),
                ToolCallArgsEvent(tool_call_id=call_id, delta=item.get("arguments") or "{}"),
                ToolCallEndEvent(tool_call_id=call_id),
            ]
            self._after_tool = True
            return out
        if kind == "tool_result":
            out = self._close()
            meta = {"rein.is_error": True} if item.get("is_error") else None
            out.append(
                ToolCallResultEvent(
                    message_id=_new_id(), tool_call_id=item["call_id"], content=item.get("content") or "",
                    role="tool", metadata=meta,
                )
            )
            self._after_tool = True
            return out
        return []

    def finished(self, outcome: TurnOutcome) -> list[BaseEvent]:
        """The run's last events for a turn that ended with an answer."""
        out = self._close()
        if not self._shown and outcome.reply:
            out += self.token(outcome.reply)  # a replayed answer, or one continued after a crash
            out += self._close()
        usage = outcome.usage
        ending = (
            RunFinishedInterruptOutcome(interrupts=[_interrupt(c) for c in outcome.pending])
            if outcome.pending else RunFinishedSuccessOutcome()
        )
        return [
            *out,
            StateSnapshotEvent(snapshot=outcome.metadata()),
            RunFinishedEvent(
                thread_id=self.thread_id, run_id=self.run_id, outcome=ending,
                usage=[TokenUsage(input_tokens=usage.input_tokens, output_tokens=usage.output_tokens,
                                  total_tokens=usage.input_tokens + usage.output_tokens)],
            ),
        ]

    def failed(self, exc: BaseException) -> list[BaseEvent]:
        """The run's last events for a turn that failed."""
        if isinstance(exc, ApiError):
            message, code = exc.message, exc.code or exc.type
        else:
            message, code = f"internal error: {type(exc).__name__}: {exc}", "server_error"
        return [*self._close(), RunErrorEvent(message=message, code=code)]

    def _close(self) -> list[BaseEvent]:
        out: list[BaseEvent] = []
        if self._text is not None:
            out.append(TextMessageEndEvent(message_id=self._text))
            self._text = None
        if self._reasoning is not None:
            out += [ReasoningMessageEndEvent(message_id=self._reasoning), ReasoningEndEvent(message_id=self._reasoning)]
            self._reasoning = None
        return out


async def run_stream(
    handle: TurnHandle, events: RunEvents, deadline: float, timeout_s: float
) -> AsyncGenerator[bytes, None]:
    """The SSE body of one AG-UI run.

    As in the Chat Completions stream, the events queued by the time the stream would wait go out
    in one write. A run that passes the deadline ends with RUN_ERROR; its turn still runs to its
    end and is committed, unless it was still waiting for an earlier turn of the thread."""
    encoder = EventEncoder()

    def encoded(batch: list[BaseEvent]) -> list[bytes]:
        return [encoder.encode(e).encode() for e in batch]

    pending = encoded(events.started())
    items = handle.items
    while True:
        if pending and items.empty():
            yield b"".join(pending)
            pending = []
        try:
            kind, value = await next_item(items, deadline)
        except TimeoutError:
            pending += encoded(events.failed(_timeout(handle, timeout_s)))
            break
        if kind == "token":
            pending += encoded(events.token(value))
        elif kind == "reasoning":
            pending += encoded(events.reasoning(value))
        elif kind == "event":
            pending += encoded(events.event(value))
        elif kind == "error":
            pending += encoded(events.failed(value))
            break
        else:
            failure = value.failed()
            pending += encoded(events.finished(value) if failure is None else events.failed(failure))
            break
    yield b"".join(pending)


def _interrupt(call: PendingCall) -> Interrupt:
    held = f" ({call.reason})" if call.reason else ""
    return Interrupt(
        id=call.id, reason=APPROVAL_REASON, tool_call_id=call.id, response_schema=DECISION_SCHEMA,
        message=f"Approve {call.name}({call.arguments}){held}?",
        metadata={"rein.tool": call.name, "rein.arguments": call.arguments, "rein.held_by": call.reason},
    )


def _timeout(handle: TurnHandle, timeout_s: float) -> ApiError:
    if handle.started:
        detail = "the turn keeps running and is committed to its thread; run again with the same messages to get its answer"
    else:
        # Still queued behind another turn of the same thread: nothing ran, so drop it.
        if handle.task is not None:
            handle.task.cancel()
        detail = "it was still waiting for an earlier turn of the same thread and was dropped"
    return ApiError(504, f"the agent did not answer within {timeout_s:g} s; {detail}", type="timeout", code="request_timeout")


def _new_id() -> str:
    return uuid.uuid4().hex

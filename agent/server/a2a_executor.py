"""Running an A2A message as a rein turn: the task's contextId names the thread.

Each message runs through `ServerState.start` like a chat request, so the server's limits, tenants,
one-turn-per-thread and retry handling apply: the contextId is the thread key (as if sent in the
`X-Rein-Thread` header), the message's text parts are the user message, and its messageId is the
Idempotency-Key, so a client that resends a message gets the committed answer, never a second run.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

from agent.extras import needs_extra
from agent.messages import Message
from agent.server.a2a_approvals import pause_parts, read_decisions
from agent.server.chat_turns import ServerState, TurnHandle, TurnOutcome, TurnRequest
from agent.server.errors import ApiError
from agent.server.retries import MAX_IDEMPOTENCY_KEY, RetrySignal
from agent.server.threads import Turn, check_key

with needs_extra("a2a", "the A2A endpoint"):
    from a2a.helpers import new_task_from_user_message, new_text_part
    from a2a.server.agent_execution import AgentExecutor, RequestContext
    from a2a.server.events import EventQueue
    from a2a.server.tasks import TaskUpdater
    from a2a.types.a2a_pb2 import TaskState
    from a2a.utils.errors import InvalidParamsError

TENANT = "rein_tenant"
"""Key of the request's tenant in the A2A call context's state (set after the key check)."""
STREAMING_METHODS = frozenset({"SendStreamingMessage", "message/stream"})
"""JSON-RPC methods (A2A 1.0 and 0.3 names) whose answer tokens are streamed as artifact chunks."""
ANSWER = "answer"
"""Name of the artifact that holds a turn's reply."""


class ReinExecutor(AgentExecutor):
    """Runs each A2A message of one served agent as a turn on the thread its contextId names."""

    def __init__(self, state: ServerState, agent: str) -> None:
        self.state = state
        """The server's agents and running turns."""
        self.agent = agent
        """The served agent's name."""

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        """Publish the task, stream the turn's tokens as chunks of its answer artifact, and end
        it completed (failed when the model failed, input-required when the turn paused for
        approval: a message with decisions then resumes it, `agent.server.a2a_approvals`)."""
        message = context.message
        if message is None or context.context_id is None:
            raise InvalidParamsError(message="the request carries no message")
        try:
            key = check_key(context.context_id, "the contextId")
        except ValueError as exc:
            raise InvalidParamsError(message=str(exc)) from None
        # Checked before the task exists, so a malformed request leaves no task behind.
        decisions = read_decisions(message)
        task = context.current_task
        if task is None:
            task = new_task_from_user_message(message)
            await event_queue.enqueue_event(task)
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        paused = task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
        text = context.get_user_input()
        if decisions is None and not text.strip():
            await updater.reject(updater.new_agent_message([new_text_part("send the message as a text part")]))
            return
        stream = context.call_context.state.get("method") in STREAMING_METHODS
        tenant = context.call_context.state.get(TENANT)
        retry = RetrySignal(_idempotency_key(message.message_id))
        await updater.start_work()
        try:
            if decisions is not None:
                handle = self.state.decide(self.agent, key, decisions, tenant=tenant, stream=stream, retry=retry)
            else:
                handle = self.state.start(TurnRequest(
                    self.agent, key, "header", tenant, [Turn("user", text)], [Message.user(text)], stream=stream, retry=retry,
                ))
        except ApiError as exc:
            await updater.failed(updater.new_agent_message([new_text_part(exc.message)]))
            return
        await _relay(handle, updater, paused)

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        """Mark the task canceled; a turn already running still ends and is committed to its
        thread (rein never cuts a turn)."""
        if context.task_id is None or context.context_id is None:
            return
        await TaskUpdater(event_queue, context.task_id, context.context_id).cancel()


async def _relay(handle: TurnHandle, updater: TaskUpdater, paused: bool) -> None:
    """The turn's stream items as A2A events, up to its final state. A task that was paused for
    approval stays paused when the client's answer is refused (a plain message, a decision missing)."""
    artifact_id = uuid.uuid4().hex
    sent = False
    async for kind, value in _coalesced(handle.items):
        if kind == "token":
            await updater.add_artifact([new_text_part(value)], artifact_id, name=ANSWER, append=sent)
            sent = True
        elif kind == "event":
            # mode decisions and interventions, as the chat stream sends them
            await updater.update_status(TaskState.TASK_STATE_WORKING, metadata={"rein": {"event": _plain(value)}})
        elif kind == "error":
            detail = value.message if isinstance(value, ApiError) else f"internal error: {type(value).__name__}"
            refused = paused and isinstance(value, ApiError) and value.status < 500
            state = TaskState.TASK_STATE_INPUT_REQUIRED if refused else TaskState.TASK_STATE_FAILED
            await updater.update_status(state, updater.new_agent_message([new_text_part(detail)]))
            return
        elif kind == "done":
            await _finish(handle, updater, value, artifact_id, sent)
            return


async def _finish(handle: TurnHandle, updater: TaskUpdater, outcome: TurnOutcome, artifact_id: str, sent: bool) -> None:
    metadata = {"rein": _plain(outcome.metadata())}
    failure = outcome.failed()
    if failure is not None:
        await updater.update_status(
            TaskState.TASK_STATE_FAILED, updater.new_agent_message([new_text_part(failure.message)]), metadata=metadata
        )
        return
    # The committed reply is the answer: the streamed chunks are its start (a replayed turn
    # streams nothing), so the last chunk adds the rest, or replaces them if they differ.
    streamed = "".join(handle.streamed)
    append = sent and outcome.reply.startswith(streamed)
    rest = outcome.reply[len(streamed):] if append else outcome.reply
    if sent or rest:
        await updater.add_artifact([new_text_part(rest)], artifact_id, name=ANSWER, append=append, last_chunk=True)
    if outcome.pending:
        await updater.update_status(
            TaskState.TASK_STATE_INPUT_REQUIRED, updater.new_agent_message(pause_parts(outcome.pending)), metadata=metadata
        )
        return
    await updater.update_status(TaskState.TASK_STATE_COMPLETED, metadata=metadata)


async def _coalesced(items: asyncio.Queue[tuple[str, Any]]) -> AsyncIterator[tuple[str, Any]]:
    """The handle's items, with tokens already queued together joined into one: each A2A event is
    a task-store write, so a fast model's tokens travel in as few chunks as the client can read."""
    pending: tuple[str, Any] | None = None
    while True:
        kind, value = pending if pending is not None else await items.get()
        pending = None
        if kind == "token":
            texts = [value]
            while not items.empty():
                nxt = items.get_nowait()
                if nxt[0] != "token":
                    pending = nxt
                    break
                texts.append(nxt[1])
            value = "".join(texts)
        elif kind == "reasoning":
            continue
        yield kind, value
        if kind in ("done", "error"):
            return


def _idempotency_key(message_id: str) -> str | None:
    """A message's id as the turn's Idempotency-Key, when it is one (printable ASCII, not too long)."""
    ok = message_id and len(message_id) <= MAX_IDEMPOTENCY_KEY and message_id.isascii() and message_id.isprintable()
    return message_id if ok else None


def _plain(value: Any) -> Any:
    """JSON-safe data for a protobuf Struct (intervention records may hold odd values)."""
    return json.loads(json.dumps(value, default=str))

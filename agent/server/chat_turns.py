"""Running chat turns on the served agents: one turn at a time per thread, reconciled histories,
turns that always run to their end (a timed-out or disconnected request never cuts a turn)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from agent import tracing
from agent.errors import UserFacingError
from agent.events import (
    ApprovalRequested,
    FinalAnswer,
    InterventionApplied,
    ModeDecided,
    ReasoningDelta,
    TokenDelta,
    ToolCallEvent,
    ToolResultEvent,
    event_to_dict,
)
from agent.ledger import CostLedger
from agent.messages import Message
from agent.planted_reasoning import PLANTED
from agent.runtime import Agent, RunResult
from agent.server.approvals import Decision, PendingCall, approval_pending, pending_calls, rule
from agent.server.auth import ApiKeys
from agent.server.deliveries import Deliveries
from agent.server.errors import ApiError
from agent.server.keyed_locks import KeyedLocks
from agent.server.retries import KeyReused, RetrySignal, find_earlier, is_resend, stamp
from agent.server.storage_health import StorageHealth
from agent.server.threads import (
    MAX_FORK_HOPS,
    REPLY_SEPARATOR,
    KeySource,
    Turn,
    compare,
    compare_window,
    fork_id,
    is_open,
    reply_text,
    storage_id,
    thread_turns,
)
from agent.server.turn_outcome import TurnOutcome

log = logging.getLogger("rein.server")


@dataclass
class ServerConfig:
    """Limits of the HTTP server."""

    max_body_bytes: int = 4 * 1024 * 1024
    """Largest request body accepted; larger ones get 413."""
    request_timeout_s: float = 300.0
    """How long a request waits for its turn (queueing included) before 504; the turn itself
    still runs to its end and is committed."""
    shutdown_grace_s: float = 30.0
    """How long shutdown waits for turns still running after their request gave up."""
    body_timeout_s: float = 60.0
    """How long a request may take to send its whole body once its headers are in; then 408 and
    the connection is closed."""
    max_messages: int = 2048
    """Most messages one request may carry; more get 400 before any work (each message costs
    the server time on its shared event loop when the thread is reconciled and committed)."""


@dataclass
class TurnRequest:
    """One chat request, resolved to an agent and a thread key."""

    agent: str
    """Served agent name."""
    key: str
    """Thread key (header, `user` field, or derived)."""
    key_source: KeySource
    """Where the key came from."""
    tenant: str | None
    """The tenant of the request's API key, which owns the thread; None on an open server."""
    turns: list[Turn]
    """The client's surface history, ending with a user message."""
    messages: Sequence[Message]
    """The messages that commit each of `turns` (`schema.CommitMessages` builds each when read)."""
    stream: bool = False
    """Whether tokens and events are queued for a stream."""
    retry: RetrySignal = field(default_factory=RetrySignal)
    """The request's Idempotency-Key and SDK retry count, which tell a retry from a new turn."""
    decisions: list[Decision] | None = None
    """Decisions on the calls the thread's turn is paused on: the request resumes that turn instead
    of adding a user message (`turns` then holds the client's history, or nothing)."""
    tool_events: bool = False
    """Whether a stream also queues the agent's tool calls and results as "event" items (AG-UI
    shows them; Chat Completions has no place for the server's own tools)."""


@dataclass
class Plan:
    """What a request does to which thread."""

    action: Literal["append", "replay", "rerun", "resume"]
    """append new messages and run a turn; replay the last reply; rerun an unanswered turn; resume
    a turn paused for approval."""
    thread_id: str
    """The thread (a fork of the key's thread when histories diverged)."""
    forked_from: str | None = None
    """The thread this one forked from, when it is a fork."""
    messages: list[Message] = field(default_factory=list)
    """For append: the messages to add."""
    reply: str = ""
    """For replay: the reply."""
    resume: dict[str, Any] = field(default_factory=dict)
    """For resume: the runtime's resume value, call id → {approved, reason}."""
    pending: list[PendingCall] = field(default_factory=list)
    """For replay: the calls the replayed turn is paused on."""


class TurnHandle:
    """A running turn: its plan, its stream items and its outcome."""

    def __init__(self) -> None:
        loop = asyncio.get_running_loop()
        self.plan: asyncio.Future[Plan] = loop.create_future()
        self.done: asyncio.Future[TurnOutcome] = loop.create_future()
        self.items: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        self.started = False
        """Set once the agent runs; before that, a request that gives up cancels the turn."""
        self.streamed: list[str] = []
        self.task: asyncio.Task[None] | None = None

    def put(self, kind: str, value: Any) -> None:
        """Queue a stream item."""
        self.items.put_nowait((kind, value))


class ServerState:
    """The served agents and the turns running on them."""

    def __init__(
        self, agents: Mapping[str, Agent], config: ServerConfig | None = None, keys: ApiKeys | None = None
    ) -> None:
        if not agents:
            raise UserFacingError("serve at least one agent")
        for name in agents:
            if not name or not isinstance(name, str):
                raise UserFacingError(f"served agent names must be non-empty strings, got {name!r}")
            if name.startswith("@"):
                raise UserFacingError(f"served agent name {name!r} may not start with '@' (it marks tenant-scoped thread ids)")
        self.agents = dict(agents)
        self.config = config or ServerConfig()
        self.keys = keys or ApiKeys()
        self.locks = KeyedLocks()
        self.tasks: set[asyncio.Task[None]] = set()
        self.closing = False
        self.storage = StorageHealth()
        self.deliveries = Deliveries()
        """Replies clients received, which a request that is not a retry never gets again."""

    def agent(self, name: str) -> Agent:
        """The agent served under this name; 404 otherwise."""
        agent = self.agents.get(name)
        if agent is None:
            raise ApiError(
                404,
                f"the model {name!r} does not exist; this server has: {', '.join(sorted(self.agents))}",
                code="model_not_found",
                param="model",
            )
        return agent

    async def history(
        self, agent: str, thread_id: str, *, api_key: str | None = None, tenant: str | None = None
    ) -> list[Message]:
        """Every message of a served thread as a client sees it, by the id the client uses (for
        inspection and tests).

        On a server with API keys the thread is the one of the tenant named by `tenant`, or by
        `api_key`'s tenant; one of them is required there, so nobody reads a thread without
        saying whose.
        """
        return await self.agent(agent).ahistory(storage_id(agent, thread_id, self.owner(api_key, tenant)))

    async def pending_approvals(
        self, agent: str, thread_id: str, *, api_key: str | None = None, tenant: str | None = None
    ) -> list[PendingCall]:
        """The calls a served thread's turn is paused on, waiting for decisions (empty when it is
        not paused); the owner is named as for `history`. Any protocol may list them this way."""
        served = self.agent(agent)
        sid = storage_id(agent, thread_id, self.owner(api_key, tenant))
        return await pending_calls(served, sid) if is_open(await served.ahistory_view(sid)) else []

    def decide(
        self, agent: str, thread_id: str, decisions: list[Decision], *, tenant: str | None = None,
        stream: bool = False, retry: RetrySignal | None = None,
    ) -> TurnHandle:
        """Start the turn that answers a paused thread's calls (every one of them) and resumes it from
        its checkpoint, for any protocol; the handle's outcome is what it said next, or its next
        pause. `tenant` is the thread's owner (the request key's tenant; None on an open server).
        Sent again, the same decisions replay their outcome and run nothing."""
        return self.start(TurnRequest(agent, thread_id, "header", tenant, [], [], stream=stream,
                                      retry=retry or RetrySignal(), decisions=decisions))

    def owner(self, api_key: str | None = None, tenant: str | None = None) -> str | None:
        """The tenant named by an API key or a tenant id; None on an open server."""
        if not self.keys.enabled:
            if api_key is not None or tenant is not None:
                raise ValueError("this server has no API keys, so its threads have no tenant")
            return None
        if (api_key is None) == (tenant is None):
            raise ValueError("this server has API keys: name the thread's owner by api_key= or tenant=")
        if api_key is not None:
            owner = self.keys.tenant(api_key)
            if owner is None:
                raise ValueError("that API key is not one of this server's keys")
            return owner
        if tenant not in self.keys.tenants:
            raise ValueError(f"{tenant!r} is not a tenant of this server (a key's own tenant is agent.server.key_id(key))")
        return tenant

    def delivered(self, request: TurnRequest, outcome: TurnOutcome) -> None:
        """Record that the request's client received the outcome's reply (`deliveries`)."""
        if outcome.reply:
            self.deliveries.add(storage_id(request.agent, outcome.thread_id, request.tenant), outcome.reply)

    async def open(self) -> None:
        """Open every agent's checkpointer now, so a bad database fails at startup."""
        for agent in self.agents.values():
            await agent.__aenter__()
        self.storage.watch(self.agents.values())

    async def aclose(self) -> None:
        """Wait (bounded) for running turns, then close the agents' checkpointers."""
        self.closing = True
        pending = set(self.tasks)
        if pending:
            _, late = await asyncio.wait(pending, timeout=self.config.shutdown_grace_s)
            for task in late:
                log.warning("shutdown: cancelling a turn still running after %ss", self.config.shutdown_grace_s)
                task.cancel()
            await asyncio.gather(*late, return_exceptions=True)
        for agent in self.agents.values():
            await agent.aclose()

    # --- running turns ----------------------------------------------------------------------

    def start(self, request: TurnRequest) -> TurnHandle:
        """Start a turn in the background; the caller waits on the handle."""
        if self.closing:
            raise ApiError(503, "the server is shutting down", type="server_error", code="shutting_down")
        self.storage.check()
        handle = TurnHandle()
        task = asyncio.create_task(self._run(request, handle), name=f"rein-turn:{request.key}")
        handle.task = task
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return handle

    async def _run(self, request: TurnRequest, handle: TurnHandle) -> None:
        try:
            agent = self.agent(request.agent)
            # The threads the plan reads stay held (across processes too) until the turn it decided
            # on has committed: otherwise two processes given the same request could both read the
            # thread before either ran it, both plan "append", and run the turn twice.
            async with self.locks.hold(storage_id(request.agent, request.key, request.tenant)), contextlib.AsyncExitStack() as held:
                plan = await self._plan(agent, request, handle, held)
                handle.plan.set_result(plan)
                with tracing.conversation(plan.thread_id):  # the client's id, not the stored one
                    outcome = await self._execute(agent, request, plan, handle)
        except BaseException as exc:
            answer = self.storage.failure(exc)  # a storage fault: 503 naming its cause
            _fail(handle, answer)
            if not isinstance(exc, Exception):
                raise
            if not isinstance(answer, ApiError):
                log.exception("turn on %s/%s failed", request.agent, request.key)
            return
        self.storage.recovered()
        handle.done.set_result(outcome)
        handle.put("done", outcome)

    async def _plan(self, agent: Agent, request: TurnRequest, handle: TurnHandle, held: contextlib.AsyncExitStack) -> Plan:
        thread, parent = request.key, None
        delta_ok = request.key_source == "header" and all(t.role == "user" for t in request.turns)
        for _ in range(MAX_FORK_HOPS):
            sid = storage_id(request.agent, thread, request.tenant)
            await held.enter_async_context(agent.hold_thread(sid))
            history = await agent.ahistory_view(sid)
            # A turn paused for approval waits for decisions; any other open turn was cut off.
            pending = await pending_calls(agent, sid) if is_open(history) else []
            if is_open(history) and not pending and await self._finish_cut_turn(agent, sid, handle):
                history = await agent.ahistory_view(sid)
            if request.decisions is not None:
                # Decisions apply to the thread the client's history is on (its fork, if it moved).
                where = compare(request.turns, thread_turns(history, compare_window(request.turns))) if request.turns else None
                if where is None or where.kind != "diverges" or (delta_ok and parent is None):
                    ruling = rule(request.decisions, pending, history)
                    return Plan(ruling.action, thread, parent, reply=ruling.reply, resume=ruling.resume, pending=ruling.pending)
                parent, thread = thread, fork_id(request.key, thread, request.turns, where.index)
                continue
            # A client that sends only its new message is compared with the thread's first turns
            # alone: reading the whole thread on every request made a turn cost grow with it.
            try:
                earlier = find_earlier(history, request.retry, request.turns, delta=delta_ok)
            except KeyReused as exc:
                raise ApiError(422, str(exc), code="idempotency_key_reused", param="Idempotency-Key") from None
            if earlier is not None:
                # A retry of a turn this thread already holds: its answer, never a second run.
                if pending and not any(m.role == "user" for m in history[earlier.index + 1 :]):
                    return Plan("replay", thread, parent, reply=earlier.reply, pending=pending)
                if not earlier.reply and not any(m.role == "user" for m in history[earlier.index + 1 :]):
                    return Plan("rerun", thread, parent)
                return Plan("replay", thread, parent, reply=earlier.reply)
            outcome = compare(request.turns, thread_turns(history, compare_window(request.turns)))
            if pending and (outcome.kind != "diverges" or (delta_ok and parent is None)):
                # The paused request again (its history, or its lone message): the same pause.
                if outcome.kind in ("replay", "unanswered"):
                    return Plan("replay", thread, parent, reply=outcome.reply, pending=pending)
                raise approval_pending(pending)
            if outcome.kind == "extends":
                return Plan("append", thread, parent, _stamped(request.messages[outcome.index :], request.retry))
            if outcome.kind == "replay":
                if is_resend(request.retry, self.deliveries.seen(sid, outcome.reply)):
                    return Plan("replay", thread, parent, reply=outcome.reply)
                if not delta_ok:
                    # Another answer to the same history: never the stored one, and never on the
                    # thread of whoever got it (it may be another end user of the same key).
                    parent, thread = thread, fork_id(request.key, thread, request.turns, outcome.index, _nonce(request))
                    continue
            if outcome.kind == "unanswered":
                return Plan("rerun", thread, parent)
            if delta_ok and parent is None:
                # A client that names its thread and sends only user messages keeps no history:
                # its messages are new turns.
                return Plan("append", thread, None, _stamped(request.messages, request.retry))
            parent, thread = thread, fork_id(request.key, thread, request.turns, outcome.index, _nonce(request))
        raise ApiError(
            409,
            f"the conversation diverged from thread {request.key!r} more than {MAX_FORK_HOPS} times; "
            "start a new thread (send a new X-Rein-Thread header)",
            code="too_many_forks",
        )

    async def _finish_cut_turn(self, agent: Agent, sid: str, handle: TurnHandle) -> bool:
        """Continue a turn cut off mid-way (a crash) from its checkpoint; False when it had ended."""
        handle.started = True
        finished = False
        async for event in agent.astream(None, sid, stream_tokens=False, live=False):
            finished = finished or isinstance(event, FinalAnswer)
        return finished

    async def _execute(self, agent: Agent, request: TurnRequest, plan: Plan, handle: TurnHandle) -> TurnOutcome:
        outcome = TurnOutcome(thread_id=plan.thread_id, action=plan.action, forked_from=plan.forked_from)
        if plan.action == "replay":
            outcome.reply = plan.reply
            outcome.pending = plan.pending
            if plan.pending:
                outcome.termination = "interrupted"
            return outcome
        handle.started = True
        sid = storage_id(request.agent, plan.thread_id, request.tenant)
        inputs = plan.messages if plan.action == "append" else None if plan.action == "resume" else []
        # collect gathers the turn's ledger as the graph runs; events carry everything else.
        collected = RunResult(thread_id=sid, output="", termination="agent_stop", messages=[], ledger=CostLedger())
        tokens = _TokenJoiner(handle) if request.stream else None
        final: FinalAnswer | None = None
        # A plain request only gathers the turn's events: they may come at each step's end.
        resume = plan.resume if plan.action == "resume" else None
        async for event in agent.astream(
            inputs, sid, stream_tokens=request.stream, resume=resume, collect=collected, live=request.stream
        ):
            if isinstance(event, ModeDecided):
                outcome.mode = event.mode
            elif isinstance(event, InterventionApplied):
                outcome.interventions.append({"name": event.name, "activated": event.activated, **event.record})
            elif isinstance(event, FinalAnswer):
                final = event
            elif isinstance(event, ApprovalRequested):
                outcome.termination = "interrupted"
                outcome.pending = [PendingCall.from_payload(c) for c in event.calls]
            if tokens is None:
                continue
            if isinstance(event, TokenDelta):
                tokens.text(event.text)
            elif isinstance(event, ReasoningDelta):
                handle.put("reasoning", event.text)
            elif isinstance(event, ToolCallEvent | ToolResultEvent):
                tokens.boundary()
                if request.tool_events:
                    handle.put("event", event_to_dict(event))
            elif isinstance(event, ModeDecided | InterventionApplied):
                handle.put("event", event_to_dict(event))
        if final is not None:
            outcome.termination = final.termination
        elif outcome.termination != "interrupted":
            outcome.termination = collected.termination
        outcome.error = collected.error
        outcome.usage = collected.ledger.usage
        outcome.cost = collected.ledger.cost
        # The turn's own messages hold its reply: the thread only ever grows (its reducer adds),
        # so reading the whole thread back would cost a checkpoint load that grows with it.
        added = collected.messages
        outcome.reply = reply_text(added)
        last = added[-1] if added else None
        if last is not None and last.role == "assistant" and last.reasoning and not last.metadata.get(PLANTED):
            outcome.reasoning = last.reasoning
        return outcome


class _TokenJoiner:
    """Queues answer tokens, separating the texts of assistant messages split by tool calls the
    way `reply_text` joins them."""

    def __init__(self, handle: TurnHandle) -> None:
        self.handle = handle
        self.broken = False

    def text(self, text: str) -> None:
        if not text:
            return
        if self.broken and self.handle.streamed:
            text = REPLY_SEPARATOR + text
        self.broken = False
        self.handle.streamed.append(text)
        self.handle.put("token", text)

    def boundary(self) -> None:
        self.broken = True


def _stamped(messages: Sequence[Message], signal: RetrySignal) -> list[Message]:
    """The messages a request appends, its user messages stamped so a retry of it is recognized."""
    last_user = max((i for i, m in enumerate(messages) if m.role == "user"), default=-1)
    no_key = RetrySignal(None, signal.attempt)
    return [stamp(m, signal if i == last_user else no_key) if m.role == "user" else m for i, m in enumerate(messages)]


def _nonce(request: TurnRequest) -> str:
    """What keeps a request for a new answer on a fork of its own: its Idempotency-Key, so that
    its resends find that fork, else a random value."""
    return request.retry.key or secrets.token_hex(8)


def _fail(handle: TurnHandle, exc: BaseException) -> None:
    error = exc if isinstance(exc, Exception) else ApiError(503, "the turn was cancelled", type="server_error")
    for future in (handle.plan, handle.done):
        if not future.done():
            future.set_exception(error)
            future.exception()  # marks it retrieved: nobody may be waiting any more
    handle.put("error", error)

"""The Agent: a model, tools and plug-ins compiled into a LangGraph graph, run per thread."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Coroutine, Iterable, Iterator, Sequence
from typing import Any, TypeVar

from langgraph.types import Command

from agent import guardrail_run, run_result, tracing
from agent.checkpoint import (
    WriteBatching,
    durability_for,
    latest_checkpoint_id,
    open_checkpointer,
)
from agent.checkpoint_batching import Batch
from agent.errors import ThreadBusy
from agent.events import ApprovalRequested, ModeDecided, StreamEvent
from agent.graph import EVENT_SINK, GraphDeps, build_graph, cut_run_messages, new_turn, start_run
from agent.guardrails import Guardrail, GuardrailContext
from agent.journal import TURN_LOG_KEY, ToolJournal
from agent.ledger import PriceTable
from agent.messages import Message, ModelSettings
from agent.models import Model, resolve_model
from agent.modes import PLAIN_AGENTIC, ModeConfig, StepLimits
from agent.nodes.history import ThreadViews
from agent.plugin_api import FixedMode, Intervention, Mode, ModePolicy, ToolProvider
from agent.run_result import RunResult
from agent.sync_portal import Portal
from agent.thread_lease import Hold, ThreadLeases, leases_for
from tools import Tool, Toolkit

T = TypeVar("T")


class Agent:
    """A tool-using agent on a LangGraph state machine.

    Threads persist in the checkpointer (SQLite by default) and resume after a crash. Use the async
    methods (`ainvoke`, `astream`, `aresume`) inside an event loop, or the sync ones (`invoke`,
    `stream`, `resume`) from plain code; the sync ones run on a private event loop.
    """

    def __init__(
        self,
        model: Model | str | None = None,
        tools: Iterable[Tool] | Toolkit = (),
        system_prompt: str = "",
        *,
        interventions: Sequence[Intervention] = (),
        guardrails: Sequence[Guardrail] = (),
        mode_policy: ModePolicy | None = None,
        step_limits: StepLimits | None = None,
        mode_config: ModeConfig | None = None,
        settings: ModelSettings | None = None,
        checkpointer: Any = "sqlite",
        prices: PriceTable | None = None,
        name: str = "agent",
        thread_wait_s: float | None = None,
    ) -> None:
        self.name = name
        self.model = resolve_model(model)
        self.tools = Toolkit(tools, name=name) if not isinstance(tools, Toolkit) else tools
        self.system_prompt = system_prompt
        self.interventions = list(interventions)
        self.guardrails = list(guardrails)
        self._input_guards = guardrail_run.of_kind(self.guardrails, "input")
        for intervention in self.interventions:
            if isinstance(intervention, ToolProvider):
                self.tools = self.tools.merged(intervention.declared_tools())
        self.deps = GraphDeps(
            model=self.model,
            tools=self.tools.as_dict(),
            system_prompt=system_prompt,
            interventions=self.interventions,
            guardrails=self.guardrails,
            mode_policy=mode_policy or FixedMode("agentic"),
            step_limits=step_limits or StepLimits(),
            mode_config=mode_config or PLAIN_AGENTIC,
            settings=settings or ModelSettings(),
            prices=prices or PriceTable(),
        )
        self.checkpointer_spec = checkpointer
        self._durability = durability_for(checkpointer, bool(self.tools.as_dict()))
        # One commit per turn with tools: the runs journal their model steps that ask for tools.
        self._turn_journal = self._durability == "exit" and bool(self.tools.as_dict())
        self._journals: dict[asyncio.AbstractEventLoop, ToolJournal] = {}
        self._graph = build_graph(self.deps)
        self._compiled: dict[asyncio.AbstractEventLoop, Any] = {}
        self._stacks: dict[asyncio.AbstractEventLoop, contextlib.AsyncExitStack] = {}
        self._open_lock: dict[asyncio.AbstractEventLoop, asyncio.Lock] = {}
        self._portal: Portal | None = None
        # How long a turn waits for another turn of its thread (None: as long as it takes).
        self.thread_wait_s = thread_wait_s
        self._leases: ThreadLeases | None = None
        # The server's reconciliation read, answered without a checkpoint load while a thread is unchanged.
        self._views = ThreadViews()

    @classmethod
    def from_spec(cls, spec: Any, **overrides: Any) -> Agent:
        """Build an agent from an AgentSpec, a dict, or a YAML/JSON file path."""
        from agent.spec import agent_options

        return cls(**agent_options(spec, **overrides))

    # --- graph per event loop -------------------------------------------------------------

    async def _graph_for_loop(self) -> Any:
        loop = asyncio.get_running_loop()
        compiled = self._compiled.get(loop)
        if compiled is not None:
            return compiled
        lock = self._open_lock.setdefault(loop, asyncio.Lock())
        async with lock:
            if loop not in self._compiled:
                from agent.journal import JOURNAL_KEY
                from agent.journal_sql import open_journal

                stack = contextlib.AsyncExitStack()
                saver = await open_checkpointer(self.checkpointer_spec, stack)
                # The tool journal sits beside the checkpoints and closes with them.
                journal = await open_journal(self.checkpointer_spec, stack)
                self._journals[loop] = journal
                self._stacks[loop] = stack
                compiled = self._graph.compile(checkpointer=saver, name=self.name)
                self._compiled[loop] = compiled.with_config(configurable={JOURNAL_KEY: journal})
        return self._compiled[loop]

    async def aclose(self) -> None:
        """Close this loop's checkpointer connection, tool sessions (MCP servers) and the model."""
        loop = asyncio.get_running_loop()
        self._compiled.pop(loop, None)
        self._journals.pop(loop, None)
        stack = self._stacks.pop(loop, None)
        if stack is not None:
            await stack.aclose()
        if self._leases is not None:
            await self._leases.aclose()
        # Tools that hold connections (MCP toolsets) name their owner in metadata; close each once.
        owners = {id(o): o for t in self.tools if (o := t.metadata.get("mcp_toolset")) is not None}
        for owner in owners.values():
            await owner.aclose()

    def close(self) -> None:
        """Close everything the sync API opened."""
        if self._portal is not None:
            self._portal.run(self.aclose())
            self._portal.stop()
            self._portal = None

    async def __aenter__(self) -> Agent:
        await self._graph_for_loop()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # --- running --------------------------------------------------------------------------

    def _thread_leases(self) -> ThreadLeases:
        # Built on first use: by then _graph_for_loop has opened (and so validated) the spec.
        if self._leases is None:
            self._leases = leases_for(self.checkpointer_spec, self)
        return self._leases

    @contextlib.asynccontextmanager
    async def hold_thread(self, thread_id: str) -> AsyncIterator[Hold]:
        """Hold a thread across several steps of this task: turns it starts on the thread run inside
        the hold, while turns of other tasks and processes wait (up to thread_wait_s) until it ends.

        For a read that decides what turn to run (the server reconciling a request with the thread):
        nobody can change the thread between the read and the turn.
        """
        await self._graph_for_loop()
        async with self._thread_leases().hold(thread_id, self.thread_wait_s, share=True) as hold:
            yield hold

    async def astream(
        self,
        message: str | Message | list[Message] | None,
        thread_id: str | None = None,
        *,
        mode: Mode | None = None,
        stream_tokens: bool = True,
        resume: Any = None,
        collect: RunResult | None = None,
        live: bool = True,
    ) -> AsyncIterator[StreamEvent]:
        """Run one user turn and yield typed events as they happen.

        message=None continues the thread from its last checkpoint (after a crash); resume= answers
        an approval pause. Pass a RunResult as collect= to have it filled as the run goes (messages,
        ledger, mode, interventions, termination), as ainvoke does. live=False yields a step's
        events when the step ends rather than as they happen (tokens included), which spares a
        hand-off through LangGraph's stream per event: for callers that only gather them.
        """
        # Closing this stream early closes the turn at once, which gives its thread back.
        quiet = not live
        async with contextlib.aclosing(self._run_turn(message, thread_id, mode, stream_tokens, resume, collect, quiet=quiet)) as events:
            async for event in events:
                yield event

    async def _run_turn(
        self,
        message: str | Message | list[Message] | None,
        thread_id: str | None,
        mode: Mode | None,
        stream_tokens: bool,
        resume: Any,
        collect: RunResult | None,
        *,
        quiet: bool,
    ) -> AsyncGenerator[StreamEvent, None]:
        graph = await self._graph_for_loop()
        thread_id = thread_id or uuid.uuid4().hex
        async with self._thread_leases().hold(thread_id, self.thread_wait_s) as hold:
            span = tracing.start_turn(self.name, thread_id, self.model.name)  # None unless tracing
            configurable: dict[str, Any] = {"thread_id": thread_id, "rein_mode": mode, "rein_stream_tokens": stream_tokens}
            sink: list[StreamEvent] = []
            if quiet:
                # Nobody watches events as they happen: nodes append them to a list instead of
                # LangGraph's custom stream, which costs a queue hand-off per event.
                configurable[EVENT_SINK] = sink
            config = {"configurable": configurable, "recursion_limit": 4 * self.deps.step_limits.agentic + 16}
            # A view of the thread survives this run only if the run ends normally and extends it.
            view = self._views.held_by(thread_id, hold)
            self._views.drop(thread_id)
            first_new = len(collect.messages) if collect is not None else 0
            inputs, decided = self._turn_inputs(message, mode, resume, collect)
            if self._input_guards and isinstance(inputs, dict):
                with tracing.current(span):
                    inputs, found = await guardrail_run.guard_input(self._input_guards, inputs, self._guard_context(thread_id))
                if collect is not None:
                    # What the graph starts from, as it will be stored (rewritten, refused, planted).
                    collect.messages[first_new:] = [Message.model_validate(m) for m in inputs["messages"]]
                for finding in found:
                    yield run_result.record(finding, collect, span)
            journal = self._journals[asyncio.get_running_loop()] if self._turn_journal else None
            # Set even when None: a run started by a tool inherits the configuration of the run around it.
            configurable[TURN_LOG_KEY] = log = await start_run(graph, journal, thread_id, inputs) if journal else None
            if decided is not None:
                if span is not None:
                    tracing.mode_decided(span, decided.mode, decided.reason)
                yield run_result.record(decided, collect, span)
            modes = ["updates"] if quiet else ["custom", "updates"]
            # A run's step writes and its checkpoint commit in one transaction (SQLite, Postgres).
            async with _batched(graph.checkpointer, thread_id, self._durability) as batch:
                stream = graph.astream(inputs, config, stream_mode=modes, durability=self._durability)
                failure: BaseException | None = None
                try:
                    while True:
                        if hold.lost:
                            raise ThreadBusy(thread_id, "this turn lost its lease to another process and stopped after its last committed step")
                        # Tasks the graph starts inherit the mark, so a tool that starts a turn on this
                        # thread fails at once instead of waiting for itself.
                        # The turn's span is current only while the graph runs, so its nodes nest under it.
                        with hold.running(), tracing.current(span):
                            try:
                                kind, chunk = await anext(stream)
                            except StopAsyncIteration:
                                break
                        for queued in sink:
                            yield run_result.record(queued, collect, span)
                        sink.clear()
                        event = run_result.stream_event(kind, chunk, collect)
                        if event is not None:
                            yield run_result.record(event, collect, span)
                except Exception as exc:
                    failure = exc
                    raise
                finally:
                    # Close the graph's stream (cancelling what it still runs) before the thread is let go.
                    await stream.aclose()
                    tracing.end_turn(span, failure, collect.error if collect is not None else None,
                                     collect.ledger.usage if collect is not None else None)
            if log is not None:
                # The run ended (or paused) normally, so its one checkpoint is committed.
                await log.close()
            if view is not None and collect is not None and not any(isinstance(e, ApprovalRequested) for e in collect.events):
                # The thread is what the view showed plus what this run added (its reducer only
                # appends, and nobody else could write it under this hold).
                # The run's own checkpoint is the thread's latest (it holds the thread): no query.
                version = batch.checkpoint_id if batch is not None and batch.checkpoint_id else \
                    await latest_checkpoint_id(graph.checkpointer, thread_id)
                self._views.put(thread_id, version, view + collect.messages[first_new:], hold)

    def _guard_context(self, thread_id: str) -> GuardrailContext:
        return GuardrailContext("input", "", self.deps.tools, system_prompt=self.system_prompt, thread_id=thread_id)

    def _turn_inputs(
        self, message: str | Message | list[Message] | None, mode: Mode | None, resume: Any, collect: RunResult | None
    ) -> tuple[Any, ModeDecided | None]:
        """What the graph is started with, and the mode decided before it starts (if any)."""
        if resume is not None:
            return Command(resume=resume), None
        if message is None:
            return None, None
        new = _as_messages(message)
        if collect is not None:
            collect.messages.extend(new)
            collect.appended_from = len(collect.messages)
        inputs = {"messages": tuple(m.model_dump() for m in new), "turn": new_turn()}
        known = mode or (self.deps.mode_policy.mode if isinstance(self.deps.mode_policy, FixedMode) else None)
        if not known:
            return inputs, None
        # A forced or fixed mode is decided here, sparing the graph a superstep.
        decided = ModeDecided(known, "forced" if mode else "fixed")
        inputs["turn"] = new_turn(known, decided.reason)
        if collect is not None:
            collect.mode = known
        return inputs, decided

    async def ainvoke(
        self,
        message: str | Message | list[Message] | None,
        thread_id: str | None = None,
        *,
        mode: Mode | None = None,
    ) -> RunResult:
        """Run one user turn to its end (or to an approval pause) and return the result."""
        thread_id = thread_id or uuid.uuid4().hex
        result = run_result.empty_result(thread_id)
        async for _ in self._run_turn(message, thread_id, mode, False, None, result, quiet=True):
            pass
        return run_result.finish(result)

    async def aresume(self, thread_id: str, decision: Any = True) -> RunResult:
        """Continue a turn paused for approval: True/False, or {call_id: bool | {approved, reason}}."""
        result = run_result.empty_result(thread_id)
        async for _ in self._run_turn(None, thread_id, None, False, decision, result, quiet=True):
            pass
        return run_result.finish(result)

    async def acontinue(self, thread_id: str) -> RunResult:
        """Continue a thread from its last checkpoint, e.g. after the process died mid-turn."""
        return await self.ainvoke(None, thread_id)

    async def ahistory(self, thread_id: str) -> list[Message]:
        """Every message of a thread (new objects, the caller's to change)."""
        _, raw, _ = await self._raw_history(thread_id)
        return [Message.model_validate(m) for m in raw]

    async def ahistory_view(self, thread_id: str) -> list[Message]:
        """Every message of a thread, for reading only: the Message objects are the ones the agent
        keeps (validated once per thread, not on every read), so a caller must not change them. The
        list itself is the caller's.

        While the thread's latest checkpoint is the one this agent last saw (read, or committed by
        its own turn), this costs one checkpoint-id query rather than a checkpoint load. Read under
        `hold_thread`, the view is also kept up to date by the turns run in that hold."""
        graph = await self._graph_for_loop()
        hold = self._thread_leases().shared_hold(thread_id)
        version = await latest_checkpoint_id(graph.checkpointer, thread_id)
        journal = self._journals[asyncio.get_running_loop()] if self._turn_journal else None
        # Journal records mean a run cut off (or running elsewhere) has steps no checkpoint shows.
        if journal is None or not await journal.turn(thread_id):
            cached = self._views.get(thread_id, version, hold)
            if cached is not None:
                return cached
        version, raw, journaled = await self._raw_history(thread_id)
        messages = self.deps._history.messages(thread_id, raw)
        if not journaled:
            self._views.put(thread_id, version, messages, hold)
        return messages

    async def _raw_history(self, thread_id: str) -> tuple[str | None, list[dict[str, Any]], bool]:
        """The thread's latest checkpoint id and its messages as stored, with what a run in progress
        (or cut off by a crash) has journaled but not checkpointed yet, as a thread committing every
        step would show; and whether there were such journaled messages."""
        graph = await self._graph_for_loop()
        snapshot = await graph.aget_state({"configurable": {"thread_id": thread_id}})
        version = (snapshot.config.get("configurable") or {}).get("checkpoint_id")
        messages: list[dict[str, Any]] = snapshot.values.get("messages", [])
        if not self._turn_journal:
            return version, messages, False
        cut = await cut_run_messages(self._journals[asyncio.get_running_loop()], thread_id, messages)
        return version, messages + cut, bool(cut)

    # --- sync facade ------------------------------------------------------------------------

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        if self._portal is None:
            self._portal = Portal()
        return self._portal.run(coro)

    def invoke(self, message: str | Message | list[Message] | None, thread_id: str | None = None, *, mode: Mode | None = None) -> RunResult:
        """Sync ainvoke."""
        return self._run(self.ainvoke(message, thread_id, mode=mode))

    def resume(self, thread_id: str, decision: Any = True) -> RunResult:
        """Sync aresume."""
        return self._run(self.aresume(thread_id, decision))

    def continue_thread(self, thread_id: str) -> RunResult:
        """Sync acontinue."""
        return self._run(self.acontinue(thread_id))

    def history(self, thread_id: str) -> list[Message]:
        """Sync ahistory."""
        return self._run(self.ahistory(thread_id))

    def stream(self, message: str | Message | list[Message] | None, thread_id: str | None = None, *, mode: Mode | None = None) -> Iterator[StreamEvent]:
        """Sync astream: yields events as the private loop produces them."""
        if self._portal is None:
            self._portal = Portal()
        yield from self._portal.iterate(self.astream(message, thread_id, mode=mode))


def _as_messages(message: str | Message | list[Message]) -> list[Message]:
    if isinstance(message, str):
        return [Message.user(message)]
    if isinstance(message, Message):
        return [message]
    return list(message)


def _batched(saver: Any, thread_id: str, durability: str) -> contextlib.AbstractAsyncContextManager[Batch | None]:
    """Where the saver can (rein's SQLite and Postgres savers), a run that commits once (durability
    "exit") commits its step writes with its checkpoint; the Batch also records that checkpoint's id."""
    if durability == "exit" and isinstance(saver, WriteBatching):
        return saver.batch(thread_id)
    return contextlib.nullcontext()


def build_agent(source: Any, **overrides: Any) -> Agent:
    """An Agent from a spec (an AgentSpec, a dict, or a YAML/JSON file path); keyword overrides
    replace spec fields. The same as Agent.from_spec."""
    return Agent.from_spec(source, **overrides)

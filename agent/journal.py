"""The tool journal: each tool call's outcome, stored the moment it is known.

LangGraph checkpoints the tools step only when every call of it has returned. A process killed
in between would run the finished calls again on resume; the journal remembers them instead. It
lives in the checkpointer's own database (table `rein_tool_journal`, own connection) or, for the
memory and custom checkpointers, in the process. Rows of a step are dropped once a later tools
step of the same thread runs, since by then the step's checkpoint is committed (under a TurnLog,
below: when a run with a later tools step commits).

Under durability "exit" (one checkpoint per turn) a second table, `rein_turn_journal`, holds what
a run did before its checkpoint: each time a model step asks for tools, the state updates since
the run's previous record are committed (`TurnLog`), before any of those tools start. A run cut
off by a crash is put back into the checkpoint from them (`Agent` does it before the thread's next
run), so its tools step runs again with the same calls and the per-call rows above apply.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from tools import CallRequest, Tool, ToolKind, ToolResult
from tools.execute import CallHooks, interrupted

log = logging.getLogger(__name__)

JOURNAL_KEY = "__rein_journal"
"""Configurable key of the ToolJournal the tools node uses (the leading __ keeps it out of
checkpoint metadata)."""

TABLE = "rein_tool_journal"

State = Literal["started", "finished", "late"]


@dataclass(frozen=True)
class Entry:
    """One journal row: a call's start, its answer, or the late end of a timed-out call."""

    thread: str
    """Thread id (with the parent checkpoint namespace, inside a subgraph)."""
    step: str
    """The tools step: index of the assistant message in the thread plus a hash of its calls, so
    call ids a model reuses across turns ("call_1") never collide."""
    call_id: str
    """The model's id for the call."""
    state: State
    """started (a WRITE call began), finished (it has its answer) or late (a timed-out call's
    thread ended after its answer was sent)."""
    seq: int
    """Index of the step's assistant message; for a late entry already surfaced, of the step
    that surfaced it."""
    result: dict[str, Any] | None = None
    """The ToolResult as a dict, for finished and late entries."""
    surfaced: bool = False
    """For a late entry: attached to the thread's history already."""

    def tool_result(self) -> ToolResult:
        """The stored answer."""
        return ToolResult(**(self.result or {}))


@dataclass(frozen=True)
class TurnRecord:
    """One stretch of a run that no checkpoint holds yet: its state updates since the previous record."""

    thread: str
    """Thread id."""
    index: int
    """Order of the record within its run (0 first)."""
    base: int
    """How many messages the thread's checkpoint held when the run started."""
    tip: str
    """A hash of the checkpoint's last message then ("" for an empty thread): with `base`, it
    tells whether the records still continue the thread's checkpoint."""
    updates: list[dict[str, Any]]
    """The run's input (first record of a new turn) and node updates, in order."""

    def continues(self, messages: Sequence[Mapping[str, Any]]) -> bool:
        """Whether this run started from a checkpoint holding exactly `messages` (its records are
        then not checkpointed yet)."""
        return len(messages) == self.base and message_tip(messages, self.base) == self.tip


def message_tip(messages: Sequence[Mapping[str, Any]], base: int) -> str:
    """A short hash of messages[base - 1], "" when base is 0."""
    if base <= 0 or base > len(messages):
        return ""
    text = json.dumps(messages[base - 1], sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class ToolJournal(ABC):
    """Storage of journal entries; `record` is durable when it returns."""

    @abstractmethod
    async def record(self, entry: Entry) -> None:
        """Store an entry, replacing one with the same thread, step, call and state."""

    @abstractmethod
    async def step(self, thread: str, step: str) -> list[Entry]:
        """The started and finished entries of one step."""

    @abstractmethod
    async def late(self, thread: str, seq: int) -> list[Entry]:
        """Late entries not surfaced yet, plus those step `seq` surfaced (it may be running again
        after a crash)."""

    @abstractmethod
    async def forget(self, thread: str, before_seq: int) -> None:
        """Drop the entries of steps before `before_seq` and the late entries they surfaced."""

    @abstractmethod
    async def record_turn(self, record: TurnRecord) -> None:
        """Store one record of a run not yet checkpointed, replacing one with the same thread and index."""

    @abstractmethod
    async def turn(self, thread: str) -> list[TurnRecord]:
        """The thread's turn records, in order (none once its run has committed)."""

    @abstractmethod
    async def drop_turn(self, thread: str) -> None:
        """Drop the thread's turn records (its run's checkpoint holds them now, or they are stale)."""

    async def end_run(self, thread: str, before_seq: int | None) -> None:
        """A run's checkpoint is committed: drop the thread's turn records and, when before_seq
        is given, what `forget` drops."""
        await self.drop_turn(thread)
        if before_seq is not None:
            await self.forget(thread, before_seq)

    async def aclose(self) -> None:  # noqa: B027  (a journal without a connection has nothing to close)
        """Release the connection."""


class MemoryJournal(ToolJournal):
    """In-process journal, for the memory checkpointer (nothing survives the process anyway) and
    for custom savers, whose database rein cannot open."""

    def __init__(self) -> None:
        # Kept per thread: a process with many threads must not scan them all at every tools step.
        self.entries: dict[str, dict[tuple[str, str, str], Entry]] = {}
        self.turns: dict[str, dict[int, TurnRecord]] = {}

    async def record(self, entry: Entry) -> None:
        self.entries.setdefault(entry.thread, {})[(entry.step, entry.call_id, entry.state)] = entry

    async def step(self, thread: str, step: str) -> list[Entry]:
        return [e for e in self.entries.get(thread, {}).values() if e.step == step and e.state != "late"]

    async def late(self, thread: str, seq: int) -> list[Entry]:
        return [e for e in self.entries.get(thread, {}).values() if _late_pending(e, seq)]

    async def forget(self, thread: str, before_seq: int) -> None:
        entries = self.entries.get(thread)
        if not entries:
            return
        for key, e in list(entries.items()):
            if e.seq < before_seq and (e.state != "late" or e.surfaced):
                del entries[key]
        if not entries:
            del self.entries[thread]

    async def record_turn(self, record: TurnRecord) -> None:
        self.turns.setdefault(record.thread, {})[record.index] = record

    async def turn(self, thread: str) -> list[TurnRecord]:
        return [r for _, r in sorted(self.turns.get(thread, {}).items())]

    async def drop_turn(self, thread: str) -> None:
        self.turns.pop(thread, None)


def _late_pending(e: Entry, seq: int) -> bool:
    return e.state == "late" and (not e.surfaced or e.seq == seq)


def step_key(messages: Sequence[Mapping[str, Any]]) -> tuple[str, int]:
    """The journal key of the tools step answering the last message, and that message's index."""
    seq = len(messages) - 1
    calls = json.dumps(messages[-1].get("tool_calls") or [], sort_keys=True, default=str)
    return f"{seq}:{hashlib.sha256(calls.encode()).hexdigest()[:16]}", seq


class StepJournal(CallHooks):
    """Journals the calls of one tools step and answers the calls a crash left behind."""

    def __init__(self, journal: ToolJournal | None, thread: str, step: str, seq: int, *, forget: bool = True) -> None:
        self.journal = journal
        self.thread = thread
        self.step = step
        self.seq = seq
        self.forget = forget
        """Drop earlier steps' rows when the step starts; a run with a TurnLog (durability "exit")
        drops them when it commits instead (`TurnLog.close`), in the same journal commit as its
        turn records."""
        self.outcomes: dict[str, ToolResult] = {}
        """Answers known in this run, journaled or replayed."""

    async def replay(
        self, calls: Sequence[CallRequest], tools: Mapping[str, Tool]
    ) -> tuple[dict[str, ToolResult], list[CallRequest]]:
        """Answers for calls an earlier run of this step left in the journal, and the calls to run.

        Finished calls get their stored answer. A WRITE call that started and never finished has
        an unknown outcome: unless its tool is idempotent it is answered as interrupted (and that
        answer journaled), never silently run again. Everything else runs.
        """
        if self.journal is None:
            return {}, list(calls)
        if self.forget:
            await self.journal.forget(self.thread, self.seq)
        entries = {(e.call_id, e.state): e for e in await self.journal.step(self.thread, self.step)}
        answered: dict[str, ToolResult] = {}
        to_run: list[CallRequest] = []
        for call in calls:
            done = entries.get((call.id, "finished"))
            t = tools.get(call.name)
            if done is not None:
                answered[call.id] = done.tool_result()
            elif (call.id, "started") in entries and t is not None and t.kind is ToolKind.WRITE and not t.idempotent:
                # It did run (cost and all); only its outcome is lost.
                answered[call.id] = dataclasses.replace(interrupted(call), cost=t.cost)
                await self.finished(call, answered[call.id])
            else:
                to_run.append(call)
        self.outcomes.update(answered)
        return answered, to_run

    async def started(self, call: CallRequest, tool: Tool) -> None:
        if self.journal is not None:
            await self.journal.record(Entry(self.thread, self.step, call.id, "started", self.seq))

    async def finished(self, call: CallRequest, result: ToolResult) -> None:
        self.outcomes[call.id] = result
        if self.journal is not None:
            await self.journal.record(
                Entry(self.thread, self.step, call.id, "finished", self.seq, _result_dict(result))
            )

    async def late(self, call: CallRequest, result: ToolResult) -> None:
        if self.journal is None:
            return
        try:
            await self.journal.record(Entry(self.thread, self.step, call.id, "late", self.seq, _result_dict(result)))
        except Exception:  # the agent closed meanwhile: nothing is left to report to
            log.warning("could not journal the late end of tool call %s (%s)", call.id, call.name, exc_info=True)

    async def surface(self) -> list[Entry]:
        """Late completions to attach to this step's messages; marked as surfaced by this step."""
        if self.journal is None:
            return []
        found = await self.journal.late(self.thread, self.seq)
        for e in found:
            if not e.surfaced:
                await self.journal.record(dataclasses.replace(e, seq=self.seq, surfaced=True))
        return found


def _result_dict(result: ToolResult) -> dict[str, Any]:
    """A result's fields as an Entry keeps them. Not dataclasses.asdict, whose deep copy cost more
    than the rest of a step's journaling: the SQL journals serialize the dict at once, and the
    memory journal may share `parts` with the tool message, which shares it already."""
    return dict(vars(result))


def journal_thread(configurable: Mapping[str, Any]) -> str:
    """The journal's thread key: the thread id, plus the parent namespace inside a subgraph (the
    node's own namespace segment is left out: it names the task, not the thread)."""
    thread = str(configurable.get("thread_id", ""))
    parent = str(configurable.get("checkpoint_ns") or "").rpartition("|")[0]
    return f"{thread}|{parent}" if parent else thread


TURN_LOG_KEY = "__rein_turn_log"
"""Configurable key of the run's TurnLog (None when the run journals no model steps)."""


class TurnLog:
    """What one run (a turn, a resume, a continue) has done since the checkpoint it started from.

    Under durability "exit" nothing of a run is checkpointed until it ends. Every node's update
    is kept here in memory; when a model step asks for tools, the updates gathered since the last
    record are committed to the journal (`commit`) before the tools start. After a crash the
    records rebuild the checkpoint up to that model step, so the model is not asked again and
    the tools journal's per-call rows match the calls they were made for.
    """

    def __init__(self, journal: ToolJournal, thread: str, inputs: Mapping[str, Any] | None, n_inputs: int) -> None:
        self.journal = journal
        self.thread = thread
        """The run's thread id: nodes of another thread's run (an agent run by a tool, which
        inherits this run's configuration) leave the log alone."""
        self.base: int | None = None
        self.tip = ""
        self.n_inputs = n_inputs
        self.pending: list[dict[str, Any]] = [dict(inputs)] if inputs is not None else []
        self.records = 0
        self.tools_seq: int | None = None
        """The seq of the run's last tools step: older steps' rows go when the run commits."""

    def add(self, thread: str, messages: Sequence[Mapping[str, Any]], update: Any) -> bool:
        """Keep a node's update; `messages` is the state the node ran on. False for another thread's node."""
        if not self.owns(thread) or not isinstance(update, dict):
            return False
        if self.base is None:
            # The run's first node sees the checkpoint's messages plus the run's input.
            self.base = len(messages) - self.n_inputs
            self.tip = message_tip(messages, self.base)
        self.pending.append(update)
        return True

    async def commit(self) -> None:
        """Journal the updates gathered since the last record; durable when it returns."""
        if self.base is None or not self.pending:
            return
        await self.journal.record_turn(TurnRecord(self.thread, self.records, self.base, self.tip, self.pending))
        self.records += 1
        self.pending = []

    def owns(self, thread: str) -> bool:
        """Whether a node of `thread` runs in this log's run."""
        return thread == self.thread

    async def close(self) -> None:
        """The run's checkpoint is committed: its records, and the rows of tools steps before its
        last one, are not needed any more (one journal commit)."""
        if self.records or self.tools_seq is not None:
            await self.journal.end_run(self.thread, self.tools_seq)

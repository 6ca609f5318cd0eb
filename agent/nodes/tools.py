"""The tools node: answers every tool call of the last model message.

Calls that need approval pause the graph first (`interrupt`); each answer is journaled as it
comes, so a run cut off mid-step answers its finished calls from the journal when the step runs
again (agent/journal.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, cast

from langchain_core.runnables import RunnableConfig
from langgraph.types import interrupt

from agent import guardrail_run, tracing
from agent.events import ToolResultEvent
from agent.guardrails import Guardrail, GuardrailContext
from agent.journal import (
    JOURNAL_KEY,
    TURN_LOG_KEY,
    Entry,
    StepJournal,
    TurnLog,
    journal_thread,
    step_key,
)
from agent.ledger import CostLedger
from agent.nodes.state import AgentState, GraphDeps, cfg, emitter, with_turn
from agent.terminations import Termination
from tools import CallRequest, ToolKind, ToolResult, execute_calls
from tools.errors import ToolExecutionError, ToolRetryBudgetExceeded
from tools.execute import describe_exception, rejected

REPEATED_FAILURE_LIMIT = 3
"""How often one identical call may fail within a turn before the turn ends (too_many_errors)."""

Decisions = dict[str, tuple[bool, str | None]]


@dataclass
class ToolsNode:
    """Runs the approved calls and answers each call with a tool message."""

    deps: GraphDeps
    """The graph's dependencies."""

    async def __call__(self, state: AgentState, config: RunnableConfig) -> dict[str, Any]:
        calls = [CallRequest(tc["id"], tc["name"], tc["arguments"]) for tc in state["messages"][-1]["tool_calls"]]
        hold = state["turn"].get("hold_writes")
        decisions = self._approvals(calls, hold)
        approved = [c for c in calls if decisions.get(c.id, (True, None))[0]]
        counts = dict(state["turn"].get("argument_errors") or {})
        step_id, seq = step_key(state["messages"])
        thread = journal_thread(config.get("configurable") or {})
        log: TurnLog | None = cfg(config, TURN_LOG_KEY)
        if log is not None and log.owns(thread):
            log.tools_seq = seq
        # Under a TurnLog the rows of earlier steps may still be needed until the run commits.
        journal = StepJournal(cfg(config, JOURNAL_KEY), thread, step_id, seq, forget=log is None or not log.owns(thread))
        done, termination, error = await self._execute(approved, counts, journal)
        by_id = {r.call_id: r for r in done}
        failures, repeated = _count_failures(state, approved, by_id)
        if termination is None and repeated is not None:
            termination, error = "too_many_errors", repeated
        results = [by_id[c.id] if c.id in by_id else rejected(c, decisions[c.id][1]) for c in calls]
        writer = emitter(config)
        ledger = CostLedger()
        messages = []
        guarded = Guarded()
        arguments = {c.id: c.arguments if isinstance(c.arguments, str) else json.dumps(c.arguments) for c in calls}
        for r in results:
            # Replayed answers are booked too: the run that got them died before its ledger update.
            ledger.book_tool(r.name, r.cost)
            # A tool whose environment has ended (an episode answered) ends the turn with its reason.
            if r.end_turn and termination is None:
                termination = cast(Termination, r.end_turn)  # a plain str in tools/, which imports nothing of ours
            message = _tool_message(r)
            if self.guards and guarded.blocked is None:
                await guarded.check(self.deps, self.guards, r, arguments.get(r.call_id, ""), message, config, writer)
            writer(ToolResultEvent(r.call_id, r.name, message["content"] if isinstance(message["content"], str) else r.content, r.is_error))
            messages.append(message)
        _attach_late(messages, await journal.surface(), journal.step)
        changes: dict[str, Any] = {"argument_errors": counts, "failures": failures}
        if hold and any(self._is_write(c) for c in calls):
            changes["hold_writes"] = None  # the held write was put to a human; later ones run as declared
        if guarded.pause:
            changes["hold_writes"] = guarded.pause
        if guarded.blocked is not None and termination is None:
            # The turn stops before the model reads the result; `finish` answers with the refusal.
            termination, error = "blocked", f"guardrail {guarded.blocked.blocked_by} blocked a tool result"
            messages.append(guardrail_run.refusal_message(guarded.blocked))
        else:
            messages.extend(guarded.plans)
        if termination:
            changes.update(termination=termination, error=error)
        update: dict[str, Any] = {"messages": messages, **with_turn(state, **changes)}
        if ledger.entries:
            update["ledger"] = [e.model_dump() for e in ledger.entries]
        return update

    def __post_init__(self) -> None:
        self.guards = guardrail_run.of_kind(self.deps.guardrails, "tool_result")

    def _is_write(self, call: CallRequest) -> bool:
        tool = self.deps.tools.get(call.name)
        return tool is not None and tool.kind == ToolKind.WRITE

    def _approvals(self, calls: list[CallRequest], hold: str | None = None) -> Decisions:
        """Pause for the calls whose tool needs approval, and for WRITE calls while a guardrail
        holds the turn's next write (`hold`, its reason); the resume value decides them."""
        needing = [
            c for c in calls
            if (t := self.deps.tools.get(c.name)) is not None and (t.needs_approval or (hold and t.kind == ToolKind.WRITE))
        ]
        if not needing:
            return {}
        listed = []
        for c in needing:
            entry: dict[str, Any] = {"id": c.id, "name": c.name, "arguments": c.arguments}
            if hold and self._is_write(c):
                entry["reason"] = f"guardrail {hold}"
            listed.append(entry)
        answer = interrupt({"type": "approval", "calls": listed})
        return _decisions(answer, needing)

    async def _execute(
        self, approved: list[CallRequest], counts: dict[str, int], journal: StepJournal
    ) -> tuple[list[ToolResult], Termination | None, str | None]:
        """The approved calls' results (from the journal when a crash left them there), and the
        termination and error when a call ended the turn."""
        replayed, to_run = await journal.replay(approved, self.deps.tools)
        try:
            return [*replayed.values(), *await execute_calls(to_run, self.deps.tools, counts, tracing.tool_hooks(journal))], None, None
        except (ToolRetryBudgetExceeded, ToolExecutionError) as exc:
            termination: Termination = "too_many_errors" if isinstance(exc, ToolRetryBudgetExceeded) else "tool_error"
            reason = f"tool {exc.tool!r} failed: {describe_exception(exc.cause)}" if isinstance(exc, ToolExecutionError) else str(exc)
            # Calls that did run keep their real answer: telling the model a finished write
            # was "not executed" would invite it to do the write again.
            done = [
                journal.outcomes.get(c.id)
                or ToolResult(c.id, c.name, f"Not executed: the run stopped ({reason}).", True, "execution")
                for c in approved
            ]
            return done, termination, str(exc)


@dataclass
class Guarded:
    """The tool_result guardrails' findings over one step's answers."""

    blocked: guardrail_run.Checked | None = None
    """The check that blocked the turn, if one did (answers after it are not checked)."""
    pause: str | None = None
    """Why the next WRITE call must wait for approval, if a guardrail paused."""
    plans: list[dict[str, Any]] = field(default_factory=list)
    """Planted messages that follow the step's tool messages."""

    async def check(
        self, deps: GraphDeps, guards: list[Guardrail], r: ToolResult, arguments: str, message: dict[str, Any],
        config: RunnableConfig, writer: Any,
    ) -> None:
        """Check one answer; rewrite or withhold its message in place, and note pauses and plans."""
        ctx = GuardrailContext(
            "tool_result", r.content, deps.tools, tool=r.name, arguments=arguments,
            system_prompt=deps.system_prompt, thread_id=cfg(config, "thread_id"),
        )
        checked = await guardrail_run.check(guards, ctx, r.call_id)
        for event in checked.events:
            writer(event)
        if checked.blocked_by is not None:
            self.blocked = checked
            message["content"] = guardrail_run.withheld(checked)
            message.setdefault("metadata", {})[guardrail_run.GUARDRAIL_META] = checked.note()
            return
        if checked.changed:
            message["content"] = checked.text
            message.setdefault("metadata", {})[guardrail_run.GUARDRAIL_META] = checked.note()
        self.pause = self.pause or checked.pause
        self.plans.extend(guardrail_run.planted(checked))


def _count_failures(
    state: AgentState, approved: list[CallRequest], by_id: dict[str, ToolResult]
) -> tuple[dict[str, int], str | None]:
    """The turn's failure counts per identical call, and the error when one reached the limit.

    The same call (tool and arguments) failing again and again will not start working: a model
    stuck in that loop ends the turn instead of burning the step budget.
    """
    failures = dict(state["turn"].get("failures") or {})
    repeated: str | None = None
    for c in approved:
        r = by_id.get(c.id)
        if r is not None and r.is_error and r.error_kind in ("execution", "timeout"):
            key = f"{c.name} {c.arguments if isinstance(c.arguments, str) else json.dumps(c.arguments, sort_keys=True)}"
            failures[key] = failures.get(key, 0) + 1
            if failures[key] >= REPEATED_FAILURE_LIMIT and repeated is None:
                repeated = f"the call {key} failed {failures[key]} times in this turn"
    return failures, repeated


def _tool_message(r: ToolResult) -> dict[str, Any]:
    """A plain dict in Message's shape: fields left out take their defaults when read back."""
    msg: dict[str, Any] = {
        "role": "tool", "content": r.content, "tool_call_id": r.call_id, "name": r.name, "is_error": r.is_error,
    }
    if r.error_kind:
        msg["metadata"] = {"error_kind": r.error_kind}
    if r.parts:
        msg["content"] = r.parts
    return msg


async def after_tools(state: AgentState) -> str:
    """Where a turn goes after its tool calls are answered."""
    return "finish" if state["turn"].get("termination") else "model"


def _attach_late(messages: list[dict[str, Any]], late: list[Entry], step: str) -> None:
    """Put late completions of timed-out calls into the history: on the call's own tool message
    when it ended during this step (`late_result`), else on this step's first tool message
    (`late_results`, a list naming each call)."""
    by_call = {m["tool_call_id"]: m for m in messages}
    for e in late:
        r = e.tool_result()
        note = {"call_id": r.call_id, "name": r.name, "content": r.content, "is_error": r.is_error}
        own = by_call.get(e.call_id) if e.step == step else None
        if own is not None:
            own.setdefault("metadata", {})["late_result"] = note
        elif messages:
            messages[0].setdefault("metadata", {}).setdefault("late_results", []).append(note)


def _decisions(answer: Any, calls: list[CallRequest]) -> Decisions:
    """Normalise a resume value: True/False for all, or {call_id: bool | {"approved", "reason"}}."""
    if isinstance(answer, bool):
        return {c.id: (answer, None) for c in calls}
    if isinstance(answer, str) and answer.lower() in ("approve", "approved", "yes", "reject", "rejected", "no"):
        ok = answer.lower() in ("approve", "approved", "yes")
        return {c.id: (ok, None) for c in calls}
    if isinstance(answer, dict):
        out: Decisions = {}
        for c in calls:
            value = answer.get(c.id, False)
            if isinstance(value, dict):
                out[c.id] = (bool(value.get("approved")), value.get("reason"))
            else:
                out[c.id] = (bool(value), None)
        return out
    raise ValueError(
        "resume an approval with True/False, 'approve'/'reject', or {call_id: bool | {'approved': bool, 'reason': str}}"
    )

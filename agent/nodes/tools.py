"""The tools node: answers every tool call of the last model message.

Calls that need approval pause the graph first (`interrupt`); each answer is journaled as it
comes, so a run cut off mid-step answers its finished calls from the journal when the step runs
again (agent/journal.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, cast

from langchain_core.runnables import RunnableConfig
from langgraph.types import interrupt

from agent import tracing
from agent.events import ToolResultEvent
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
from tools import CallRequest, ToolResult, execute_calls
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
        decisions = self._approvals(calls)
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
        for r in results:
            writer(ToolResultEvent(r.call_id, r.name, r.content, r.is_error))
            # Replayed answers are booked too: the run that got them died before its ledger update.
            ledger.book_tool(r.name, r.cost)
            # A tool whose environment has ended (an episode answered) ends the turn with its reason.
            if r.end_turn and termination is None:
                termination = cast(Termination, r.end_turn)  # a plain str in tools/, which imports nothing of ours
            messages.append(_tool_message(r))
        _attach_late(messages, await journal.surface(), journal.step)
        changes: dict[str, Any] = {"argument_errors": counts, "failures": failures}
        if termination:
            changes.update(termination=termination, error=error)
        update: dict[str, Any] = {"messages": messages, **with_turn(state, **changes)}
        if ledger.entries:
            update["ledger"] = [e.model_dump() for e in ledger.entries]
        return update

    def _approvals(self, calls: list[CallRequest]) -> Decisions:
        """Pause for the calls whose tool needs approval; the resume value decides them."""
        needing = [c for c in calls if (t := self.deps.tools.get(c.name)) is not None and t.needs_approval]
        if not needing:
            return {}
        answer = interrupt(
            {"type": "approval", "calls": [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in needing]}
        )
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

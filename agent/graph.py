"""The agent as a LangGraph state machine.

intervene → mode → model ⇄ tools, ending at the model's final answer or at `finish`. Each user
turn enters at `intervene` (present when interventions are configured); interventions may plant
reasoning there, the mode slot picks instant / reasoning / agentic, the model node calls the
model, the tools node answers every tool call (pausing for approval where a tool needs it, and journaling
each answer so a crash never runs a finished call twice, see agent/journal.py). A model answer
without tool calls ends the turn (agent_stop); `finish` ends turns that stop early (max_steps,
model_error, too_many_errors, tool_error, or a tool result's `end_turn`, such as environment_done
when a tool's environment ended its episode) with their reason. Messages live in the state as plain dicts so checkpoints stay
small and readable.
"""

from __future__ import annotations

import json
import operator
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, TypedDict

from langchain_core.runnables import RunnableConfig
from langgraph.config import get_stream_writer
from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt

from agent import tracing
from agent.events import (
    FinalAnswer,
    InterventionApplied,
    ModeDecided,
    ReasoningDelta,
    TokenDelta,
    ToolCallEvent,
    ToolResultEvent,
)
from agent.hooks import (
    FixedMode,
    Intervention,
    InterventionContext,
    ModeDecision,
    ModePolicy,
    ResponseReviewer,
)
from agent.journal import JOURNAL_KEY, Entry, StepJournal, journal_thread, step_key
from agent.ledger import CostLedger, Price, PriceTable
from agent.messages import Message, ModelRequest, ModelResponse, ModelSettings, ToolCall
from agent.models import base as model_base
from agent.modes import PLAIN_AGENTIC, ModeConfig, StepLimits, loops_back, mode_step, step_message
from agent.plant import plant_messages, surface_dialogue
from tools import CallRequest, Tool, ToolResult, execute_calls
from tools.errors import ToolExecutionError, ToolRetryBudgetExceeded
from tools.execute import describe_exception, rejected


class TurnState(TypedDict, total=False):
    """Bookkeeping of the current user turn, replaced as a whole by each node (one channel keeps
    checkpoints cheap)."""

    mode: str | None
    mode_reason: str
    mode_scores: dict[str, float]
    steps: int
    termination: str | None
    error: str | None
    argument_errors: dict[str, int]
    failures: dict[str, int]
    system_suffix: str | None


class AgentState(TypedDict, total=False):
    """The checkpointed state of one thread."""

    messages: Annotated[list[dict[str, Any]], operator.add]
    turn: TurnState
    ledger: Annotated[list[dict[str, Any]], operator.add]
    interventions: Annotated[list[dict[str, Any]], operator.add]


@dataclass
class GraphDeps:
    """Everything the nodes need besides the state."""

    model: model_base.Model
    """The model that answers."""
    tools: dict[str, Tool]
    """Tools by name."""
    system_prompt: str = ""
    """The agent's system prompt; interventions never change it (the NPI baseline appends per turn)."""
    interventions: Sequence[Intervention] = ()
    """Run in order at the start of each user turn."""
    mode_policy: ModePolicy = field(default_factory=FixedMode)
    """Chooses each turn's mode."""
    step_limits: StepLimits = field(default_factory=StepLimits)
    """Model calls allowed per turn, per mode."""
    mode_config: ModeConfig = PLAIN_AGENTIC
    """Mode paths: PLAIN_AGENTIC (agentic is a bare tool loop) or agent.modes.A2FM_MODES (A²FM:
    plan, tool rounds, periodic summaries, answer)."""
    settings: ModelSettings = field(default_factory=ModelSettings)
    """Sampling settings for every request."""
    prices: PriceTable = field(default_factory=PriceTable)
    """Prices for the cost ledger."""

    _prices: dict[str, Price] = field(default_factory=dict, repr=False)

    def schemas(self) -> list[dict[str, Any]]:
        """The tools as OpenAI function schemas."""
        return [t.openai_schema() for t in self.tools.values()]

    def price(self, model: str) -> Price:
        """The price of a model, looked up once per name."""
        found = self._prices.get(model)
        if found is None:
            found = self._prices[model] = self.prices.price_for(model)
        return found


REPEATED_FAILURE_LIMIT = 3
"""How often one identical call may fail within a turn before the turn ends (too_many_errors)."""


def new_turn(mode: str | None = None, reason: str = "") -> TurnState:
    """The bookkeeping a user turn starts from, sent with the user's message; the mode is set when
    it is known before the turn starts (forced, or a fixed policy)."""
    return TurnState(
        mode=mode, mode_reason=reason, mode_scores={}, steps=0, termination=None, error=None,
        argument_errors={}, failures={}, system_suffix=None,
    )


def _with(state: AgentState, **changes: Any) -> dict[str, Any]:
    """A `turn` update: the current turn state with some fields changed."""
    return {"turn": {**state.get("turn", new_turn()), **changes}}


def _turn_index(state: AgentState) -> int:
    return sum(1 for m in state["messages"] if m["role"] == "user") - 1


EVENT_SINK = "__rein_events"
"""Configurable key of a list that collects events when the caller is not streaming them."""


def _emitter(config: RunnableConfig | None) -> Any:
    """Where a node sends its events: the caller's list when it only collects them (cheaper than
    LangGraph's custom stream), else the custom stream writer."""
    sink = _cfg(config, EVENT_SINK)
    return sink.append if sink is not None else get_stream_writer()


def _cfg(config: RunnableConfig | None, key: str, default: Any = None) -> Any:
    return ((config or {}).get("configurable") or {}).get(key, default)


def build_graph(deps: GraphDeps) -> StateGraph:
    """The uncompiled graph; compile it with a checkpointer."""
    schemas = deps.schemas()
    reviewers = [i for i in deps.interventions if isinstance(i, ResponseReviewer)]

    def context(state: AgentState, ledger: CostLedger) -> InterventionContext:
        """What plug-ins see; built only when a plug-in runs, since it validates the whole history."""
        history = [Message.model_validate(m) for m in state["messages"]]
        return InterventionContext(
            dialogue=surface_dialogue(history),
            tools=schemas,
            turn=_turn_index(state),
            model=deps.model,
            ledger=ledger,
        )

    async def intervene(state: AgentState, config: RunnableConfig) -> dict[str, Any]:
        turn = _turn_index(state)
        writer = _emitter(config)
        ledger = CostLedger()
        ctx = context(state, ledger)
        planted: list[dict[str, Any]] = []
        records: list[dict[str, Any]] = []
        suffix: list[str] = []
        for intervention in deps.interventions:
            started = time.perf_counter()
            with tracing.intervention(intervention.name, turn) as span:
                plant = await intervention.before_turn(ctx)
                if span is not None:
                    tracing.intervened(span, plant and plant.text, plant and plant.via, plant.record if plant else {})
            record = {
                "name": intervention.name,
                "turn": turn,
                "activated": plant is not None,
                "latency_s": round(time.perf_counter() - started, 4),
                **(plant.record if plant else {}),
            }
            if plant is not None:
                record["via"] = plant.via
                record["text"] = plant.text
                if plant.via == "system_prompt":
                    suffix.append(plant.text)
                else:
                    planted.extend(m.model_dump() for m in plant_messages(plant, intervention.name))
            records.append(record)
            writer(InterventionApplied(intervention.name, plant is not None, record))
        return {
            "messages": planted,
            "interventions": records,
            "ledger": [e.model_dump() for e in ledger.entries],
            **_with(state, system_suffix="\n\n".join(suffix) or None),
        }

    async def choose_mode(state: AgentState, config: RunnableConfig) -> dict[str, Any]:
        forced = _cfg(config, "rein_mode")
        ledger = CostLedger()
        with tracing.mode_span() as span:
            if forced:
                decision = ModeDecision(forced, reason="forced")
            elif isinstance(deps.mode_policy, FixedMode):
                decision = ModeDecision(deps.mode_policy.mode, reason="fixed")
            else:
                decision = await deps.mode_policy.decide(context(state, ledger))
            tracing.mode_chosen(span, decision.mode, decision.reason, decision.scores)
        _emitter(config)(ModeDecided(decision.mode, decision.reason, decision.scores))
        update = _with(state, mode=decision.mode, mode_reason=decision.reason, mode_scores=decision.scores)
        if ledger.entries:
            update["ledger"] = [e.model_dump() for e in ledger.entries]
        return update

    async def call_model(state: AgentState, config: RunnableConfig) -> dict[str, Any]:
        turn = state["turn"]
        mode = turn.get("mode") or "agentic"
        steps = turn.get("steps", 0)
        limit = deps.step_limits.for_mode(mode)  # type: ignore[arg-type]
        if steps >= limit:
            return _with(state, termination="max_steps")
        history = [Message.model_validate(m) for m in state["messages"]]
        system = deps.system_prompt
        if turn.get("system_suffix"):
            system = f"{system}\n\n{turn['system_suffix']}" if system else turn["system_suffix"]
        step = mode_step(
            mode,  # type: ignore[arg-type]
            history, schemas, deps.settings, system=system, step=steps, limit=limit, config=deps.mode_config,
        )
        request = step.request
        writer = _emitter(config)
        stream = writer if _cfg(config, "rein_stream_tokens") else None
        with tracing.chat(deps.model.name, request, _cfg(config, "thread_id"), step.kind) as span:
            try:
                # Intermediate steps (reasoning, plan, summary) stream as reasoning, not answer text.
                response = await _request(deps.model, request, stream, as_reasoning=step.kind in ("reason", "plan", "summary"))
            except Exception as exc:  # any adapter failure ends the turn with a typed reason
                tracing.failed(span, exc)
                return _with(state, termination="model_error", error=f"{type(exc).__name__}: {exc}", steps=steps + 1)
            tracing.answered(span, response)
        ledger = CostLedger()
        if reviewers and response.tool_calls:
            ctx = context(state, ledger)
            for reviewer in reviewers:
                revised = await reviewer.review(ctx, request.messages, response)
                response = revised or response
        name = response.model or deps.model.name
        entry = {
            "kind": "model",
            "name": name,
            "usage": response.usage.model_dump(),
            "cost": deps.price(name).cost(response.usage),
            "label": "agent",
        }
        message = step_message(step, response)
        for tc in message.tool_calls:
            writer(ToolCallEvent(tc.id, tc.name, tc.arguments))
        changes: dict[str, Any] = {"steps": steps + 1}
        if not message.tool_calls and not loops_back(message):
            # An answer without tool calls is the turn's final response.
            changes["termination"] = "agent_stop"
            writer(FinalAnswer(message.text, "agent_stop"))
        return {
            "messages": [message.model_dump()],
            "ledger": [entry, *(e.model_dump() for e in ledger.entries)],
            **_with(state, **changes),
        }

    async def run_tools(state: AgentState, config: RunnableConfig) -> dict[str, Any]:
        calls = [CallRequest(tc["id"], tc["name"], tc["arguments"]) for tc in state["messages"][-1]["tool_calls"]]
        needing = [c for c in calls if (t := deps.tools.get(c.name)) is not None and t.needs_approval]
        decisions: dict[str, tuple[bool, str | None]] = {}
        if needing:
            answer = interrupt(
                {"type": "approval", "calls": [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in needing]}
            )
            decisions = _decisions(answer, needing)
        approved = [c for c in calls if decisions.get(c.id, (True, None))[0]]
        counts = dict(state["turn"].get("argument_errors") or {})
        termination: str | None = None
        error: str | None = None
        # Each call's answer is journaled as it comes: a run cut off mid-step (a crash, a kill)
        # answers its finished calls from the journal when the step runs again.
        step_id, seq = step_key(state["messages"])
        journal = StepJournal(_cfg(config, JOURNAL_KEY), journal_thread(config.get("configurable") or {}), step_id, seq)
        replayed, to_run = await journal.replay(approved, deps.tools)
        try:
            done = [*replayed.values(), *await execute_calls(to_run, deps.tools, counts, tracing.tool_hooks(journal))]
        except (ToolRetryBudgetExceeded, ToolExecutionError) as exc:
            termination = "too_many_errors" if isinstance(exc, ToolRetryBudgetExceeded) else "tool_error"
            error = str(exc)
            reason = f"tool {exc.tool!r} failed: {describe_exception(exc.cause)}" if isinstance(exc, ToolExecutionError) else str(exc)
            # Calls that did run keep their real answer: telling the model a finished write
            # was "not executed" would invite it to do the write again.
            done = [
                journal.outcomes.get(c.id)
                or ToolResult(c.id, c.name, f"Not executed: the run stopped ({reason}).", True, "execution")
                for c in approved
            ]
        by_id = {r.call_id: r for r in done}
        # The same call (tool and arguments) failing again and again will not start working: a
        # model stuck in that loop ends the turn instead of burning the step budget.
        failures = dict(state["turn"].get("failures") or {})
        for c in approved:
            r = by_id.get(c.id)
            if r is not None and r.is_error and r.error_kind in ("execution", "timeout"):
                key = f"{c.name} {c.arguments if isinstance(c.arguments, str) else json.dumps(c.arguments, sort_keys=True)}"
                failures[key] = failures.get(key, 0) + 1
                if failures[key] >= REPEATED_FAILURE_LIMIT and termination is None:
                    termination = "too_many_errors"
                    error = f"the call {key} failed {failures[key]} times in this turn"
        results = [by_id[c.id] if c.id in by_id else rejected(c, decisions[c.id][1]) for c in calls]
        writer = _emitter(config)
        ledger = CostLedger()
        messages = []
        for r in results:
            writer(ToolResultEvent(r.call_id, r.name, r.content, r.is_error))
            # Replayed answers are booked too: the run that got them died before its ledger update.
            ledger.book_tool(r.name, r.cost)
            # A plain dict in Message's shape: fields left out take their defaults when read back.
            msg: dict[str, Any] = {
                "role": "tool", "content": r.content, "tool_call_id": r.call_id, "name": r.name, "is_error": r.is_error,
            }
            if r.error_kind:
                msg["metadata"] = {"error_kind": r.error_kind}
            if r.parts:
                msg["content"] = r.parts
            # A tool whose environment has ended (an episode answered) ends the turn with its reason.
            if r.end_turn and termination is None:
                termination = r.end_turn
            messages.append(msg)
        _attach_late(messages, await journal.surface(), journal.step)
        changes: dict[str, Any] = {"argument_errors": counts, "failures": failures}
        if termination:
            changes.update(termination=termination, error=error)
        update: dict[str, Any] = {"messages": messages, **_with(state, **changes)}
        if ledger.entries:
            update["ledger"] = [e.model_dump() for e in ledger.entries]
        return update

    # Nodes and routers are coroutines on purpose: LangGraph runs sync ones in a thread pool, which
    # costs more than the work they do.
    async def finish(state: AgentState, config: RunnableConfig) -> dict[str, Any]:
        """Ends a turn that stopped early (step limit, errors) with its reason and last answer."""
        termination = state["turn"].get("termination") or "max_steps"
        last = next((m for m in reversed(state["messages"]) if m["role"] == "assistant"), {})
        text = last.get("content", "")
        _emitter(config)(FinalAnswer(text if isinstance(text, str) else "", termination))
        return _with(state, termination=termination)

    async def after_model(state: AgentState) -> str:
        termination = state["turn"].get("termination")
        if termination == "agent_stop":
            return "end"
        if termination:
            return "finish"
        return "model" if loops_back(state["messages"][-1]) else "tools"

    async def after_tools(state: AgentState) -> str:
        return "finish" if state["turn"].get("termination") else "model"

    graph = StateGraph(AgentState)
    graph.add_node("mode", choose_mode)
    graph.add_node("model", call_model)
    graph.add_node("tools", run_tools)
    graph.add_node("finish", finish)
    # The intervention slot is a node only when interventions are configured: an empty slot would
    # cost a checkpointed superstep per turn for nothing.
    # Likewise the mode slot runs only when the mode is not known at turn start.
    async def entry(state: AgentState) -> str:
        return "model" if state["turn"].get("mode") else "mode"

    if deps.interventions:
        graph.add_node("intervene", intervene)
        graph.add_edge(START, "intervene")
        graph.add_conditional_edges("intervene", entry, {"mode": "mode", "model": "model"})
    else:
        graph.add_conditional_edges(START, entry, {"mode": "mode", "model": "model"})
    graph.add_edge("mode", "model")
    graph.add_conditional_edges(
        "model", after_model, {"tools": "tools", "model": "model", "finish": "finish", "end": END}
    )
    graph.add_conditional_edges("tools", after_tools, {"model": "model", "finish": "finish"})
    graph.add_edge("finish", END)
    return graph


async def _request(
    model: model_base.Model, request: ModelRequest, writer: Any, *, as_reasoning: bool = False
) -> ModelResponse:
    if writer is None:
        return await model.complete(request)
    final: ModelResponse | None = None
    async for item in model.stream(request):
        if isinstance(item, model_base.TextDelta):
            writer(ReasoningDelta(item.text) if as_reasoning else TokenDelta(item.text))
        elif isinstance(item, model_base.ReasoningDelta):
            writer(ReasoningDelta(item.text))
        else:
            final = item
    if final is None:
        raise model_base.ModelError(f"model {model.name!r} ended its stream without a response")
    return final


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


def _decisions(answer: Any, calls: list[CallRequest]) -> dict[str, tuple[bool, str | None]]:
    """Normalise a resume value: True/False for all, or {call_id: bool | {"approved", "reason"}}."""
    if isinstance(answer, bool):
        return {c.id: (answer, None) for c in calls}
    if isinstance(answer, str) and answer.lower() in ("approve", "approved", "yes", "reject", "rejected", "no"):
        ok = answer.lower() in ("approve", "approved", "yes")
        return {c.id: (ok, None) for c in calls}
    if isinstance(answer, dict):
        out: dict[str, tuple[bool, str | None]] = {}
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


__all__ = ["AgentState", "GraphDeps", "ToolCall", "build_graph"]

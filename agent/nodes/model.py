"""The model node: one model call of the turn, shaped by the turn's mode."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.runnables import RunnableConfig

from agent import guardrail_run, tracing
from agent.events import FinalAnswer, ReasoningDelta, TokenDelta, ToolCallEvent
from agent.guardrails import GuardrailContext
from agent.ledger import CostLedger
from agent.messages import Message, ModelRequest, ModelResponse
from agent.models import base as model_base
from agent.models.tool_grammar import tool_names
from agent.modes import loops_back, mode_step, step_message
from agent.nodes.state import (
    AgentState,
    GraphDeps,
    TurnState,
    cfg,
    emitter,
    plugin_context,
    with_turn,
)
from agent.planted_reasoning import PLANTED, planted_reasoning, without_past_plants
from agent.plugin_api import ResponseReviewer
from tools import Tool
from tools.builtin import PLAN_ONLY, RESPOND_NEXT, USER_ERRORS_ONLY

# Intermediate steps stream as reasoning, not as answer text.
_REASONING_STEPS = ("reason", "plan", "summary")


@dataclass
class ModelNode:
    """Calls the model with the history; an answer without tool calls ends the turn (agent_stop)."""

    deps: GraphDeps
    """The graph's dependencies."""
    schemas: list[dict[str, Any]]
    """The tools as function schemas, offered to the model."""
    reviewers: Sequence[ResponseReviewer] = ()
    """Interventions that may revise a response asking for tool calls."""

    async def __call__(self, state: AgentState, config: RunnableConfig) -> dict[str, Any]:
        deps = self.deps
        turn = state["turn"]
        mode = turn.get("mode") or "agentic"
        steps = turn.get("steps", 0)
        limit = deps.step_limits.for_mode(mode)
        if steps >= limit:
            return with_turn(state, termination="max_steps")
        history = deps.history(state, config)
        if deps.interventions:
            # A plan planted in an earlier user turn answered that turn; left in view, small models
            # keep following it after the user has clarified (repeating the recovery, or cancelling).
            history = without_past_plants(history)
        step = mode_step(
            mode,
            history, self.schemas, deps.settings,
            system=_system(deps.system_prompt, turn), step=steps, limit=limit, config=deps.mode_config,
        )
        request = step.request
        if request.tools and (unplanned := unplanned_tools(history, deps.tools, bool(turn.get("system_suffix")))):
            kept = [t for t in request.tools if t.get("function", t).get("name") not in unplanned]
            request = request.model_copy(update={"tools": kept})
        if request.tools and answer_due(history, deps.tools):
            # A recovery tool did its part; what is left is telling the user, not calling it again.
            request = request.model_copy(update={"settings": request.settings.model_copy(update={"tool_choice": "none"})})
        elif request.tools and (withheld := withheld_tools(history, deps.tools)):
            allowed = [n for n in tool_names(request.tools) if n not in withheld]
            request = request.model_copy(update={"settings": request.settings.model_copy(update={"allowed_tools": allowed})})
        writer = emitter(config)
        stream = writer if cfg(config, "rein_stream_tokens") else None
        with tracing.chat(deps.model.name, request, cfg(config, "thread_id"), step.kind) as span:
            try:
                response = await _request(deps.model, request, stream, as_reasoning=step.kind in _REASONING_STEPS)
            except Exception as exc:  # any adapter failure ends the turn with a typed reason
                tracing.failed(span, exc)
                return with_turn(state, termination="model_error", error=f"{type(exc).__name__}: {exc}", steps=steps + 1)
            tracing.answered(span, response)
        ledger = CostLedger()
        if self.reviewers and response.tool_calls:
            response = await self._review(state, config, ledger, request, response)
        message = step_message(step, response)
        for tc in message.tool_calls:
            writer(ToolCallEvent(tc.id, tc.name, tc.arguments))
        changes: dict[str, Any] = {"steps": steps + 1}
        if not message.tool_calls and not loops_back(message):
            # An answer without tool calls is the turn's final response.
            changes["termination"] = "agent_stop"
            if self.guards and await self._guard(message, config, writer):
                changes["termination"] = "blocked"  # `finish` answers with the refusal
            else:
                writer(FinalAnswer(message.text, "agent_stop"))
        return {
            "messages": [message.model_dump()],
            "ledger": [self._entry(response), *(e.model_dump() for e in ledger.entries)],
            **with_turn(state, **changes),
        }

    def __post_init__(self) -> None:
        self.guards = guardrail_run.of_kind(self.deps.guardrails, "output")

    async def _guard(self, message: Message, config: RunnableConfig, writer: Any) -> bool:
        """Run the output guardrails on a final answer, rewriting it in place; True when one blocked."""
        ctx = GuardrailContext(
            "output", message.text, self.deps.tools, system_prompt=self.deps.system_prompt, thread_id=cfg(config, "thread_id")
        )
        checked = await guardrail_run.check(self.guards, ctx)
        for event in checked.events:
            writer(event)
        if checked.blocked_by is None and not checked.changed:
            return False
        message.content = checked.refusal if checked.blocked_by is not None else checked.text
        message.metadata[guardrail_run.GUARDRAIL_META] = checked.note()
        return checked.blocked_by is not None

    async def _review(
        self, state: AgentState, config: RunnableConfig, ledger: CostLedger, request: ModelRequest, response: ModelResponse
    ) -> ModelResponse:
        ctx = plugin_context(self.deps, self.schemas, state, config, ledger)
        for reviewer in self.reviewers:
            revised = await reviewer.review(ctx, request.messages, response)
            response = revised or response
        return response

    def _entry(self, response: ModelResponse) -> dict[str, Any]:
        """The ledger entry of one model call."""
        name = response.model or self.deps.model.name
        return {
            "kind": "model",
            "name": name,
            "usage": response.usage.model_dump(),
            "cost": self.deps.price(name).cost(response.usage),
            "label": "agent",
        }


def answer_due(history: Sequence[Message], tools: dict[str, Tool]) -> bool:
    """Whether a tool marked RESPOND_NEXT (the recovery tools) answered without error in this user
    turn, so that the next step must answer the user."""
    for m in reversed(history):
        if m.role == "user":
            return False
        tool = tools.get(m.name or "") if m.role == "tool" and not m.is_error else None
        if tool is not None and tool.metadata.get(RESPOND_NEXT):
            return True
    return False


def plan_in_turn(history: Sequence[Message]) -> bool:
    """Whether an intervention planted a plan (reasoning) in the current user turn."""
    for m in reversed(history):
        if m.role == "user":
            return False
        if planted_reasoning(m) is not None:
            return True
    return False


def unplanned_tools(history: Sequence[Message], tools: dict[str, Tool], planted: bool = False) -> set[str]:
    """The tools marked PLAN_ONLY (ReIn's recovery tools, by default) when no plan was planted in this
    user turn (planted: a plan entered this turn's system prompt, the naive-prompt-injection
    baseline's way). They are left out of the request altogether, not just made uncallable: a small
    model that reads "report_internal_error: the request cannot be processed as stated" beside an
    ordinary question echoes it."""
    if planted or plan_in_turn(history):
        return set()
    return {name for name, t in tools.items() if t.metadata.get(PLAN_ONLY)}


def withheld_tools(history: Sequence[Message], tools: dict[str, Tool]) -> set[str]:
    """The tools marked USER_ERRORS_ONLY (the recovery tools) when a call of another tool was
    refused in this user turn and no intervention planted reasoning in it; else none.

    Small models answer their own refused call ("Error: Order not found") by reporting an internal
    error, which is for errors in the user's request; a planted plan is the one case where the turn
    was diagnosed as such, so it keeps them callable."""
    refused = False
    for m in reversed(history):
        if m.role == "user":
            break
        if planted_reasoning(m) is not None:
            return set()
        if m.role == "tool" and m.is_error and not m.metadata.get(PLANTED):
            tool = tools.get(m.name or "")
            refused = refused or tool is None or not tool.metadata.get(USER_ERRORS_ONLY)
    if not refused:
        return set()
    return {name for name, t in tools.items() if t.metadata.get(USER_ERRORS_ONLY)}


def _system(prompt: str, turn: TurnState) -> str:
    """The agent's system prompt with this turn's suffix (an intervention's plant) appended."""
    suffix = turn.get("system_suffix")
    if not suffix:
        return prompt
    return f"{prompt}\n\n{suffix}" if prompt else suffix


async def after_model(state: AgentState) -> str:
    """Where a turn goes after a model call."""
    termination = state["turn"].get("termination")
    if termination == "agent_stop":
        return "end"
    if termination:
        return "finish"
    return "model" if loops_back(state["messages"][-1]) else "tools"


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

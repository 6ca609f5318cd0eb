"""The mode slot: picks the turn's mode (instant, reasoning, agentic) when it is not known at the start."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from langchain_core.runnables import RunnableConfig

from agent import tracing
from agent.events import ModeDecided
from agent.ledger import CostLedger
from agent.nodes.state import AgentState, GraphDeps, cfg, emitter, plugin_context, with_turn
from agent.plugin_api import FixedMode, ModeDecision


@dataclass
class ModeNode:
    """Asks the mode policy for the turn's mode (a forced or fixed mode needs no asking)."""

    deps: GraphDeps
    """The graph's dependencies."""
    schemas: list[dict[str, Any]]
    """The tools as function schemas, shown to the policy."""

    async def __call__(self, state: AgentState, config: RunnableConfig) -> dict[str, Any]:
        forced = cfg(config, "rein_mode")
        ledger = CostLedger()
        policy = self.deps.mode_policy
        with tracing.mode_span() as span:
            if forced:
                decision = ModeDecision(forced, reason="forced")
            elif isinstance(policy, FixedMode):
                decision = ModeDecision(policy.mode, reason="fixed")
            else:
                decision = await policy.decide(plugin_context(self.deps, self.schemas, state, config, ledger))
            tracing.mode_chosen(span, decision.mode, decision.reason, decision.scores)
        emitter(config)(ModeDecided(decision.mode, decision.reason, decision.scores))
        update = with_turn(state, mode=decision.mode, mode_reason=decision.reason, mode_scores=decision.scores)
        if ledger.entries:
            update["ledger"] = [e.model_dump() for e in ledger.entries]
        return update


# Routers are coroutines for the same reason as nodes: LangGraph runs sync ones in a thread pool.
async def enter_turn(state: AgentState) -> str:
    """Where a turn starts after the intervention slot: the mode slot unless the mode is known;
    `finish` when an input guardrail blocked the turn before it started."""
    if state["turn"].get("termination"):
        return "finish"
    return "model" if state["turn"].get("mode") else "mode"


async def start_turn(state: AgentState) -> str:
    """Where a turn starts when interventions are configured: their slot, unless an input
    guardrail blocked the turn (then `finish`)."""
    return "finish" if state["turn"].get("termination") else "intervene"

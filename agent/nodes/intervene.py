"""The intervention slot: runs the interventions at the start of a user turn, plants what they say."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from langchain_core.runnables import RunnableConfig

from agent import tracing
from agent.events import InterventionApplied
from agent.ledger import CostLedger
from agent.nodes.state import AgentState, GraphDeps, emitter, plugin_context, turn_index, with_turn
from agent.planted_reasoning import plant_messages
from agent.plugin_api import Intervention, InterventionContext, Plant


@dataclass
class InterveneNode:
    """Runs each intervention in order; a plant goes into the history or the turn's system suffix."""

    deps: GraphDeps
    """The graph's dependencies."""
    schemas: list[dict[str, Any]]
    """The tools as function schemas, shown to the interventions."""

    async def __call__(self, state: AgentState, config: RunnableConfig) -> dict[str, Any]:
        turn = turn_index(state)
        writer = emitter(config)
        ledger = CostLedger()
        ctx = plugin_context(self.deps, self.schemas, state, config, ledger, with_plants=True)
        planted: list[dict[str, Any]] = []
        records: list[dict[str, Any]] = []
        suffix: list[str] = []
        for intervention in self.deps.interventions:
            plant, record = await _run(intervention, ctx, turn)
            if plant is not None:
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
            **with_turn(state, system_suffix="\n\n".join(suffix) or None),
        }


async def _run(intervention: Intervention, ctx: InterventionContext, turn: int) -> tuple[Plant | None, dict[str, Any]]:
    """One intervention's plant (or None) and the record of what it did."""
    started = time.perf_counter()
    with tracing.intervention(intervention.name, turn) as span:
        plant = await intervention.before_turn(ctx)
        if span is not None:
            tracing.intervened(
                span, plant.text if plant else None, plant.via if plant else None, plant.record if plant else {}
            )
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
    return plant, record

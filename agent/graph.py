"""The agent as a LangGraph state machine.

intervene → mode → model ⇄ tools, ending at the model's final answer or at `finish`. Each user
turn enters at `intervene` (present when interventions are configured); interventions may plant
reasoning there, the mode slot picks instant / reasoning / agentic, the model node calls the
model, the tools node answers every tool call (pausing for approval where a tool needs it, and journaling
each answer so a crash never runs a finished call twice, see agent/journal.py). A model answer
without tool calls ends the turn (agent_stop); `finish` ends turns that stop early (max_steps,
model_error, too_many_errors, tool_error, or a tool result's `end_turn`, such as environment_done
when a tool's environment ended its episode) with their reason. Messages live in the state as plain dicts so checkpoints stay
small and readable; the nodes validate each message once per thread (agent/nodes/history.py).

This module wires the graph; each node is its own unit in agent/nodes/.
"""

from __future__ import annotations

from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph

from agent.messages import ToolCall
from agent.nodes.finish import finish
from agent.nodes.intervene import InterveneNode
from agent.nodes.mode import ModeNode, enter_turn
from agent.nodes.model import ModelNode, after_model
from agent.nodes.state import (
    EVENT_SINK,
    AgentState,
    GraphDeps,
    TurnState,
    as_delta_writes,
    new_turn,
)
from agent.nodes.tools import REPEATED_FAILURE_LIMIT, ToolsNode, after_tools
from agent.plugin_api import ResponseReviewer


def build_graph(deps: GraphDeps) -> StateGraph:
    """The uncompiled graph; compile it with a checkpointer."""
    schemas = deps.schemas()
    reviewers = [i for i in deps.interventions if isinstance(i, ResponseReviewer)]
    # Nodes and routers are coroutines on purpose: LangGraph runs sync ones in a thread pool, which
    # costs more than the work they do.
    graph = StateGraph(AgentState)
    graph.add_node("mode", _Deltas(ModeNode(deps, schemas)))
    graph.add_node("model", _Deltas(ModelNode(deps, schemas, reviewers)))
    graph.add_node("tools", _Deltas(ToolsNode(deps)))
    graph.add_node("finish", _Deltas(finish))
    # The intervention slot is a node only when interventions are configured: an empty slot would
    # cost a checkpointed superstep per turn for nothing.
    # Likewise the mode slot runs only when the mode is not known at turn start.
    if deps.interventions:
        graph.add_node("intervene", _Deltas(InterveneNode(deps, schemas)))
        graph.add_edge(START, "intervene")
        graph.add_conditional_edges("intervene", enter_turn, {"mode": "mode", "model": "model"})
    else:
        graph.add_conditional_edges(START, enter_turn, {"mode": "mode", "model": "model"})
    graph.add_edge("mode", "model")
    graph.add_conditional_edges(
        "model", after_model, {"tools": "tools", "model": "model", "finish": "finish", "end": END}
    )
    graph.add_conditional_edges("tools", after_tools, {"model": "model", "finish": "finish"})
    graph.add_edge("finish", END)
    return graph


class _Deltas:
    """A node whose list updates go to the delta channels as tuples (see `as_delta_writes`)."""

    def __init__(self, node: Any) -> None:
        self.node = node

    async def __call__(self, state: AgentState, config: RunnableConfig) -> Any:
        return as_delta_writes(await self.node(state, config))


__all__ = [
    "EVENT_SINK", "REPEATED_FAILURE_LIMIT", "AgentState", "GraphDeps", "ToolCall", "TurnState", "build_graph", "new_turn",
]

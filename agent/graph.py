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

from collections.abc import Awaitable, Callable, Hashable, Sequence
from typing import Any

from langchain_core.runnables import Runnable, RunnableConfig
from langgraph.graph import END, START, StateGraph

from agent.journal import TURN_LOG_KEY, ToolJournal, TurnLog, TurnRecord, journal_thread
from agent.messages import ToolCall
from agent.nodes.finish import finish
from agent.nodes.intervene import InterveneNode
from agent.nodes.mode import ModeNode, enter_turn, start_turn
from agent.nodes.model import ModelNode, after_model
from agent.nodes.state import (
    EVENT_SINK,
    AgentState,
    GraphDeps,
    TurnState,
    as_delta_writes,
    cfg,
    merge_updates,
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
    graph.add_node("model", _Deltas(ModelNode(deps, schemas, reviewers), journal_tool_steps=True))
    graph.add_node("tools", _Deltas(ToolsNode(deps)))
    graph.add_node("finish", _Deltas(finish))
    # The intervention slot is a node only when interventions are configured: an empty slot would
    # cost a checkpointed superstep per turn for nothing.
    # Likewise the mode slot runs only when the mode is not known at turn start.
    # A turn whose input a guardrail blocked starts at `finish` (agent/guardrail_run.py).
    entries: dict[Hashable, str] = {"mode": "mode", "model": "model", "finish": "finish"}
    if deps.interventions:
        graph.add_node("intervene", _Deltas(InterveneNode(deps, schemas)))
        graph.add_conditional_edges(START, _Route(start_turn), {"intervene": "intervene", "finish": "finish"})
        graph.add_conditional_edges("intervene", _Route(enter_turn), entries)
    else:
        graph.add_conditional_edges(START, _Route(enter_turn), entries)
    graph.add_edge("mode", "model")
    graph.add_conditional_edges(
        "model", _Route(after_model), {"tools": "tools", "model": "model", "finish": "finish", "end": END}
    )
    graph.add_conditional_edges("tools", _Route(after_tools), {"model": "model", "finish": "finish"})
    graph.add_edge("finish", END)
    return graph


class _Route(Runnable[AgentState, str]):
    """A conditional edge's routing function, called as it is.

    Given a bare function, LangGraph wraps it in a runnable that opens a LangChain callback run
    (callback manager, metadata merges, its own task) for every routing decision: about 8% of the
    Python calls of a turn without tools, for a run nobody observes (rein traces with its own spans,
    agent/tracing.py)."""

    def __init__(self, route: Callable[[AgentState], Awaitable[str]]) -> None:
        self.route = route
        self.name = route.__name__

    def invoke(self, input: AgentState, config: RunnableConfig | None = None, **kwargs: Any) -> str:
        raise TypeError(f"{self.name} routes async graph runs only")  # every rein run is async

    async def ainvoke(self, input: AgentState, config: RunnableConfig | None = None, **kwargs: Any) -> str:
        return await self.route(input)


class _Deltas:
    """A node whose list updates go to the delta channels as tuples (see `as_delta_writes`).

    When the run keeps a TurnLog (durability "exit"), each update goes into it, and the model
    node's update is journaled before the graph moves on when it asks for tools."""

    def __init__(self, node: Any, *, journal_tool_steps: bool = False) -> None:
        self.node = node
        self.journal_tool_steps = journal_tool_steps

    async def __call__(self, state: AgentState, config: RunnableConfig) -> Any:
        update = as_delta_writes(await self.node(state, config))
        log: TurnLog | None = cfg(config, TURN_LOG_KEY)
        if (
            log is not None
            and log.add(journal_thread(config.get("configurable") or {}), state["messages"], update)
            and self.journal_tool_steps
            and _asks_for_tools(update)
        ):
            await log.commit()
        return update


async def start_run(graph: Any, journal: ToolJournal, thread: str, inputs: Any) -> TurnLog:
    """The TurnLog of a run about to start on `thread` with `inputs` (a new turn's update, a
    resume Command or None), after a run of the thread cut off by a crash is checkpointed, as
    far as it was journaled, so that this run continues it. Call it holding the thread."""
    await restore_cut_run(graph, journal, thread)
    fresh = inputs if isinstance(inputs, dict) else None
    return TurnLog(journal, thread, fresh, len(fresh["messages"]) if fresh else 0)


async def restore_cut_run(graph: Any, journal: ToolJournal, thread: str) -> bool:
    """Checkpoint what a run of the thread journaled before it was cut off, up to its last model
    step that asked for tools, so the next run starts with those tools; records the checkpoint
    already holds are dropped. True when a cut-off run was restored.

    Call it holding the thread: a run in progress elsewhere has records too."""
    records = await journal.turn(thread)
    if not records:
        return False
    config: RunnableConfig = {"configurable": {"thread_id": thread}}
    snapshot = await graph.aget_state(config)
    update = _unsaved(records, snapshot.values.get("messages", []))
    if update is not None:
        # The record ends with the model step's update, so the checkpoint is the one that step
        # would have committed under durability "sync": the tools node runs next.
        await graph.aupdate_state(config, update, as_node="model")
    await journal.drop_turn(thread)
    return update is not None


async def cut_run_messages(journal: ToolJournal, thread: str, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages a run of the thread journaled beyond its checkpoint `messages` (in progress,
    or cut off by a crash)."""
    records = await journal.turn(thread)
    update = _unsaved(records, messages) if records else None
    return list(update.get("messages") or ()) if update is not None else []


def _unsaved(records: list[TurnRecord], messages: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The records as one update, when they continue the checkpoint holding `messages`; None when
    that checkpoint holds them already (the run committed, or a later run did)."""
    first = records[0]
    if not first.continues(messages) or any((r.index, r.base, r.tip) != (i, first.base, first.tip) for i, r in enumerate(records)):
        return None
    return merge_updates([u for r in records for u in r.updates])


def _asks_for_tools(update: dict[str, Any]) -> bool:
    """Whether a model step's update sends the turn to the tools node (see `after_model`)."""
    messages: Sequence[dict[str, Any]] = update.get("messages") or ()
    return bool(messages) and bool(messages[-1].get("tool_calls")) and not (update.get("turn") or {}).get("termination")


__all__ = [
    "EVENT_SINK", "REPEATED_FAILURE_LIMIT", "AgentState", "GraphDeps", "ToolCall", "TurnState", "build_graph",
    "cut_run_messages", "new_turn", "restore_cut_run", "start_run",
]

"""The end of a turn that stopped early (step limit, errors, a tool's end_turn)."""

from __future__ import annotations

from typing import Any

from langchain_core.runnables import RunnableConfig

from agent.events import FinalAnswer
from agent.nodes.state import AgentState, emitter, with_turn
from agent.terminations import Termination


async def finish(state: AgentState, config: RunnableConfig) -> dict[str, Any]:
    """Ends a turn that stopped early (step limit, errors) with its reason and last answer."""
    termination: Termination = state["turn"].get("termination") or "max_steps"
    last: dict[str, Any] = next((m for m in reversed(state["messages"]) if m["role"] == "assistant"), {})
    text = last.get("content", "")
    emitter(config)(FinalAnswer(text if isinstance(text, str) else "", termination))
    return with_turn(state, termination=termination)

"""How planted reasoning enters the agent's context: as the agent's own reasoning, never as a user
or system message."""

from __future__ import annotations

import json

from agent.messages import Message, ToolCall
from agent.plugin_api import Plant
from tools.builtin import THINK_TOOL_NAME

PLANTED = "planted_by"


def plant_messages(plant: Plant, source: str) -> list[Message]:
    """The messages that carry a plant.

    think_tool: an assistant message calling the think tool with the plan, answered by the think
    tool's empty result (tau-bench's think tool). reasoning_block: an assistant message whose
    reasoning field holds the plan, for models that take reasoning back in their history. Models
    whose prompt rein renders itself show either as the opening of the assistant's own turn
    (planted_reasoning finds the plan).
    """
    if plant.via == "think_tool":
        call = ToolCall(name=THINK_TOOL_NAME, arguments=json.dumps({"thought": plant.text}))
        calling = Message.assistant("", [call])
        answer = Message.tool(call.id, THINK_TOOL_NAME, "")
        calling.metadata[PLANTED] = source
        answer.metadata[PLANTED] = source
        return [calling, answer]
    if plant.via == "tool_call":
        if not plant.tool:
            raise ValueError("a tool_call plant needs the tool's name")
        call = ToolCall(name=plant.tool, arguments=json.dumps(plant.arguments))
        calling = Message.assistant("", [call])
        answer = Message.tool(call.id, plant.tool, plant.text)
        calling.metadata[PLANTED] = source
        answer.metadata[PLANTED] = source
        return [calling, answer]
    if plant.via == "reasoning_block":
        msg = Message.assistant("", reasoning=plant.text)
        msg.metadata[PLANTED] = source
        return [msg]
    raise ValueError(f"plant via {plant.via!r} does not add messages")


def planted_reasoning(message: Message) -> str | None:
    """The plan a planted message carries as the agent's reasoning, or None for any other message.

    That is the thought of a planted think-tool call, or the reasoning of a planted reasoning
    block; a planted call of another tool (via="tool_call") is fetched context, not reasoning.
    """
    if message.role != "assistant" or not message.metadata.get(PLANTED):
        return None
    if not message.tool_calls:
        return message.reasoning or None
    if len(message.tool_calls) == 1 and message.tool_calls[0].name == THINK_TOOL_NAME:
        thought = (message.tool_calls[0].parsed_arguments() or {}).get("thought")
        return thought if isinstance(thought, str) and thought else None
    return None


def surface_dialogue(history: list[Message]) -> list[Message]:
    """The user-visible conversation: user turns and assistant text, without tool traffic or plants."""
    out = []
    for m in history:
        if m.metadata.get(PLANTED):
            continue
        if m.role == "user" or (m.role == "assistant" and m.text):
            out.append(Message(role=m.role, content=m.text))
    return out


def without_past_plants(history: list[Message]) -> list[Message]:
    """The history without the planted messages of earlier user turns (this turn's stay).

    A plan answers the turn it was planted in; once the user has replied to the recovery, the old
    plan must not steer the clarified request. The stored thread keeps every plant for the record.
    """
    last_user = next((k for k in range(len(history) - 1, -1, -1) if history[k].role == "user"), -1)
    if not any(m.metadata.get(PLANTED) for m in history[:last_user]):
        return history
    return [m for k, m in enumerate(history) if k > last_user or not m.metadata.get(PLANTED)]


def planted_turns(history: list[Message]) -> dict[int, str]:
    """The user turns (0-based) in which a plan was planted, with the intervention that planted it."""
    out: dict[int, str] = {}
    turn = -1
    for m in history:
        if m.role == "user":
            turn += 1
        elif turn >= 0 and planted_reasoning(m) is not None:
            out.setdefault(turn, str(m.metadata.get(PLANTED)))
    return out

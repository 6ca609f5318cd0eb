"""Approvals on the Responses API: which part of a turn each response answers, and the response a
request carrying decisions answers as.

A turn that pauses for approval answers with its text so far and a `function_call` item per call
it waits on. The request whose `function_call_output` items decide them resumes the same turn, so
the turn, opened by one user message, is answered by several responses: the one that opened it,
then one per set of decisions (responses_ids.resumed). Read back, each holds the text said
between its start (the turn's user message, or the tool results of its decisions) and the next
pause, and the calls it paused on.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from agent.messages import Message
from agent.planted_reasoning import PLANTED
from agent.runtime import Agent
from agent.server.approvals import Decision, PendingCall
from agent.server.chat_turns import Plan
from agent.server.responses_ids import RECORD_FIELD, ResponseRef, call_tag, resumed, turn_end
from agent.server.responses_objects import ResponseShape
from agent.server.threads import REPLY_SEPARATOR, storage_id


@dataclass
class Segment:
    """The part of a turn that one response answers."""

    tag: str | None
    """The decisions tag of its id (None: the response that opened the turn)."""
    text: str = ""
    """What the agent said in it."""
    calls: list[PendingCall] = field(default_factory=list)
    """The calls it paused on, as the thread shows them (empty when it did not pause)."""
    last: bool = False
    """Whether it runs to the thread's end (a pause there may still wait: read the checkpoint)."""
    previous: str | None = None
    """The decisions tag of the response before it in the same turn (None: the opening one)."""


def segment(history: Sequence[Message], index: int, tag: str | None, needs_approval: Callable[[str], bool]) -> Segment | None:
    """The part of the turn opened at `index` that the response tagged `tag` answers; None when no
    decisions of that turn carry the tag.

    A pause shows in the thread as an assistant message calling a tool that needs approval. One a
    guardrail asked for (the turn's next write held) is found only by the tag of its decisions, so
    the response before it reads as running on past it.
    """
    end = turn_end(history, index)
    parts = [Segment(None)]
    texts: list[str] = []
    for m in history[index + 1 : end]:
        if m.role != "assistant" or m.metadata.get(PLANTED):
            continue
        if m.text.strip():
            texts.append(m.text)
        paused = [c for c in m.tool_calls if needs_approval(c.name) or call_tag(c.id) == tag]
        if paused:
            parts[-1].text, texts = REPLY_SEPARATOR.join(texts), []
            parts[-1].calls = [PendingCall(c.id, c.name, c.arguments) for c in paused]
            parts.append(Segment(call_tag(min(c.id for c in paused)), previous=parts[-1].tag))
    parts[-1].text = REPLY_SEPARATOR.join(texts)
    if end == len(history):
        parts[-1].last = True
        if len(parts) > 1 and not any(m.role == "tool" and m.tool_call_id == parts[-2].calls[0].id for m in history[index:end]):
            # The last pause is not answered yet: it still waits, so no response follows it.
            parts.pop()
            parts[-1].last = True
    return next((p for p in parts if p.tag == tag), None)


def needs_approval(agent: Agent) -> Callable[[str], bool]:
    """Whether a call of the named tool pauses its turn (its tool asks for approval)."""
    return lambda name: (t := agent.tools.get(name)) is not None and t.needs_approval


async def resumed_shape(
    plan: Plan, shape: ResponseShape, decisions: Sequence[Decision], agent: Agent, tenant: str | None
) -> ResponseShape:
    """The response that decisions answer as: tagged after the turn they resumed, so a resend of the
    same decisions gets the same id; not stored when that turn's request kept no record."""
    ref = dataclasses.replace(shape.ref, thread_id=plan.thread_id)
    history = await agent.ahistory(storage_id(ref.agent, plan.thread_id, tenant))
    ids = {d.call_id for d in decisions}
    # The turn is the one holding the answers to these calls (a resend), else the paused latest one.
    answered = [i for i, m in enumerate(history) if m.role == "tool" and m.tool_call_id in ids]
    before = answered[-1] if answered else len(history)
    users = [i for i in range(before) if history[i].role == "user" and not history[i].metadata.get(PLANTED)]
    rec: Any = history[users[-1]].metadata.get(RECORD_FIELD) if users else None
    if not isinstance(rec, dict) or not isinstance(rec.get("id"), str):
        return dataclasses.replace(shape, ref=ref, store=False)
    tagged = resumed(ResponseRef(ref.agent, ref.thread_id, rec["id"]), sorted(ids))
    return dataclasses.replace(shape, ref=tagged, conversation=shape.conversation or rec.get("conversation"))

"""How the runtime runs guardrails (agent/guardrails.py) at its three points and applies verdicts.

- input: before the graph starts, on the user's message (agent/runtime.py): a rewrite changes the
  message before it is stored, a block stores the refusal beside it and the turn goes straight to
  `finish`, a plan enters right after the message;
- tool_result: in the tools node, on each answer before the model sees it;
- output: in the model node, on the final answer before it is stored.

A pause, from input or tool_result, marks the turn so that its next WRITE call waits for approval
in the tools node, with the runtime's own approval pause (agent/nodes/tools.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from agent import tracing
from agent.events import GuardrailTriggered
from agent.guardrails import DEFAULT_REFUSAL, Guardrail, GuardrailContext, Verdict, validate
from agent.messages import Message
from agent.planted_reasoning import plant_messages
from agent.plugin_api import Plant

GUARDRAIL_META = "guardrail"
"""Message metadata key: which guardrails rewrote or withheld the message, and its original text."""


@dataclass
class Checked:
    """What the guardrails of one kind made of one text."""

    text: str
    """The text after every rewrite (the original when none rewrote it)."""
    original: str
    """The text as it came."""
    blocked_by: str | None = None
    """The guardrail that blocked, if one did (later guardrails did not run)."""
    refusal: str = ""
    """The blocking guardrail's refusal."""
    plans: list[tuple[str, str]] = field(default_factory=list)
    """(guardrail, plan) for each plan to plant, in order."""
    pause: str | None = None
    """Why the next WRITE call must wait for approval ("guardrail: reason"), if a guardrail paused."""
    rewritten_by: list[str] = field(default_factory=list)
    """The guardrails that rewrote the text."""
    events: list[GuardrailTriggered] = field(default_factory=list)
    """One event per guardrail that fired."""

    @property
    def changed(self) -> bool:
        """Whether the text must be replaced (rewritten, or withheld by a block)."""
        return bool(self.rewritten_by)

    def note(self) -> dict[str, Any]:
        """The metadata a changed message keeps: who changed it, and what it said before."""
        return {"rewritten_by": self.rewritten_by, "blocked_by": self.blocked_by, "original": self.original}


def of_kind(guardrails: Sequence[Guardrail], kind: str) -> list[Guardrail]:
    """The guardrails that check texts of this kind."""
    return [g for g in guardrails if kind in g.kinds]


async def check(guardrails: Sequence[Guardrail], ctx: GuardrailContext, call_id: str | None = None) -> Checked:
    """Run the guardrails of ctx.kind in order: each sees the text as the ones before left it; a
    block stops the rest."""
    out = Checked(text=ctx.text, original=ctx.text)
    for g in of_kind(guardrails, ctx.kind):
        with tracing.guardrail(g.name, ctx.kind) as span:
            verdict = await g.check(ctx) or Verdict()
            validate(g, ctx.kind, verdict)
            tracing.guarded(span, verdict.action, verdict.reason, verdict.plan is not None, ctx.tool)
        if not verdict.fired:
            continue
        out.events.append(
            GuardrailTriggered(
                g.name, ctx.kind, verdict.action, verdict.reason, ctx.tool, call_id, verdict.plan is not None, verdict.record
            )
        )
        if verdict.action == "block":
            out.blocked_by, out.refusal = g.name, verdict.text or DEFAULT_REFUSAL
            break
        if verdict.action in ("rewrite", "pause") and verdict.text is not None:
            out.text = ctx.text = verdict.text
            out.rewritten_by.append(g.name)
        if verdict.action == "pause" and out.pause is None:
            out.pause = f"{g.name}: {verdict.reason}" if verdict.reason else g.name
        if verdict.plan:
            out.plans.append((g.name, verdict.plan))
    return out


def planted(checked: Checked) -> list[dict[str, Any]]:
    """The messages that plant the guardrails' plans as the agent's own reasoning (think-tool calls)."""
    return [m.model_dump() for name, plan in checked.plans for m in plant_messages(Plant(plan), name)]


def refusal_message(checked: Checked) -> dict[str, Any]:
    """The agent's answer when a guardrail blocked the turn."""
    msg = Message.assistant(checked.refusal)
    msg.metadata[GUARDRAIL_META] = {"blocked_by": checked.blocked_by}
    return msg.model_dump()


def withheld(checked: Checked) -> str:
    """What the model sees instead of a tool result that a guardrail blocked."""
    return f"[withheld by guardrail {checked.blocked_by}]"


async def guard_input(
    guardrails: Sequence[Guardrail], inputs: dict[str, Any], ctx: GuardrailContext
) -> tuple[dict[str, Any], list[GuardrailTriggered]]:
    """A new turn's graph input after the input guardrails checked its last user message (ctx
    without text: it is filled in here), and their events."""
    messages = [dict(m) for m in inputs["messages"]]
    last = next((k for k in range(len(messages) - 1, -1, -1) if messages[k]["role"] == "user"), None)
    if last is None:
        return inputs, []
    ctx.text = Message.model_validate(messages[last]).text
    checked = await check(guardrails, ctx)
    turn = dict(inputs["turn"])
    if checked.blocked_by is not None:
        # The user's message is kept as sent, for the record; the turn ends at `finish`.
        messages.append(refusal_message(checked))
        turn.update(termination="blocked", error=f"guardrail {checked.blocked_by} blocked the input")
    else:
        if checked.changed:
            metadata = {**(messages[last].get("metadata") or {}), GUARDRAIL_META: checked.note()}
            messages[last] = {**messages[last], "content": checked.text, "metadata": metadata}
        messages.extend(planted(checked))
        if checked.pause:
            turn["hold_writes"] = checked.pause
    return {**inputs, "messages": tuple(messages), "turn": turn}, checked.events

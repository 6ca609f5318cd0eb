"""Baselines ReIn is compared with: naive prompt injection and self-refine ("none" is no intervention).

- NaivePromptInjection: the same detector and plan as ReIn, appended to the system prompt for the
  turn (what ReIn avoids: it edits the instructions instead of the agent's reasoning).
- SelfRefine: after the model drafts a tool call, the same model critiques the draft and may
  revise it before anything runs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from agent.messages import Message, ModelRequest, ModelResponse, ModelSettings
from agent.plugin_api import InterventionContext, Plant, PlantVia
from interventions.llm_inception import first_json_object
from interventions.rein import DiagnosingIntervention

SELF_REFINE_LABEL = "self_refine"
SELF_REFINE_MARK = "[self-refine]"
"""Starts the reasoning of a revised response (the critique), so trajectories show the revision."""


class NaivePromptInjection(DiagnosingIntervention):
    """NPI: ReIn's diagnosis and plan, appended to the system prompt for that turn only."""

    name = "npi"
    via: PlantVia = "system_prompt"

    async def before_turn(self, ctx: InterventionContext) -> Plant | None:
        plant = await super().before_turn(ctx)
        if plant is None:
            return None
        return Plant(text=f"Note for the current user message: {plant.text}", via="system_prompt", record=plant.record)


CRITIQUE = (
    "Before it runs, review the action you drafted for the user's latest message:\n{draft}\n\n"
    "Is this the right action, given the user's request, the policy and the tools? Check that the "
    "request is clear, consistent and possible before acting on it. Answer only with JSON: "
    '{{"verdict": "keep" or "revise", "critique": "<one or two sentences>"}}.'
)
REVISE = (
    "You drafted this action:\n{draft}\n\nYour own critique of it: {critique}\n\n"
    "Now take the corrected action: call the right tool, or reply to the user."
)
CRITIQUE_SCHEMA: dict[str, Any] = {
    "type": "json_schema",
    "json_schema": {
        "name": "self_refine",
        "strict": True,
        "schema": {
            "type": "object",
            "properties": {"verdict": {"type": "string", "enum": ["keep", "revise"]}, "critique": {"type": "string"}},
            "required": ["verdict", "critique"],
            "additionalProperties": False,
        },
    },
}


@dataclass
class Revision:
    """One self-refine review."""

    turn: int
    """User turn it happened in."""
    draft: list[dict[str, str]]
    """The drafted tool calls (name, arguments)."""
    critique: str
    """The model's critique."""
    revised: bool
    """Whether the draft was replaced."""
    final: list[dict[str, str]] = field(default_factory=list)
    """The tool calls that replaced it (empty for a text reply or when kept)."""


def render_draft(response: ModelResponse) -> str:
    """A draft response as plain text, for the critique prompt."""
    lines = [f"- call {tc.name}({tc.arguments})" for tc in response.tool_calls]
    if response.text:
        lines.insert(0, f"- say: {response.text}")
    return "\n".join(lines) or "- (nothing)"


class SelfRefine:
    """Self-refine: the agent's model critiques each drafted tool call and may revise it."""

    name = "self-refine"

    def __init__(self, *, max_tokens: int = 256) -> None:
        """max_tokens: cap on the critique answer."""
        self.max_tokens = max_tokens
        self.revisions: list[Revision] = []

    async def before_turn(self, ctx: InterventionContext) -> Plant | None:
        return None

    async def review(self, ctx: InterventionContext, messages: list[Message], response: ModelResponse) -> ModelResponse | None:
        draft = render_draft(response)
        critique_req = ModelRequest(
            messages=[*messages, Message.user(CRITIQUE.format(draft=draft))],
            settings=ModelSettings(temperature=0.0, max_tokens=self.max_tokens),
            response_format=CRITIQUE_SCHEMA,
        )
        answer = await ctx.model.complete(critique_req)
        ctx.ledger.book_model(answer.model or ctx.model.name, answer.usage, label=SELF_REFINE_LABEL)
        verdict, critique = _parse_critique(answer.text or answer.reasoning or "")
        calls = [{"name": tc.name, "arguments": tc.arguments} for tc in response.tool_calls]
        if verdict != "revise":
            self.revisions.append(Revision(ctx.turn, calls, critique, revised=False))
            return None
        revise_req = ModelRequest(
            messages=[*messages, Message.user(REVISE.format(draft=draft, critique=critique or "the draft is wrong"))],
            tools=ctx.tools,
        )
        revised = await ctx.model.complete(revise_req)
        ctx.ledger.book_model(revised.model or ctx.model.name, revised.usage, label=SELF_REFINE_LABEL)
        final = [{"name": tc.name, "arguments": tc.arguments} for tc in revised.tool_calls]
        self.revisions.append(Revision(ctx.turn, calls, critique, revised=True, final=final))
        # The critique becomes the revised step's reasoning: it was the agent's own thinking, and
        # trajectories can tell revised steps apart. The revision's tokens are booked above; the
        # graph books the draft's under "agent".
        reasoning = f"{SELF_REFINE_MARK} {critique}".strip()
        if revised.reasoning:
            reasoning += f"\n{revised.reasoning}"
        return revised.model_copy(update={"usage": response.usage, "reasoning": reasoning})


def _parse_critique(text: str) -> tuple[str, str]:
    obj = first_json_object(text)
    if obj is not None:
        verdict = str(obj.get("verdict", "")).strip().lower()
        return ("revise" if verdict.startswith("revis") else "keep"), str(obj.get("critique", ""))[:600]
    low = text.lower()
    # Prose answers: only an explicit call to revise counts; anything else keeps the draft.
    return ("revise" if "revise" in low and "keep" not in low else "keep"), text.strip()[:600]


def revisions_as_records(revisions: list[Revision]) -> list[dict[str, Any]]:
    """Revisions as plain dicts for reports."""
    return [json.loads(json.dumps(r.__dict__)) for r in revisions]

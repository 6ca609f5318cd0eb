"""Self-routing, A²FM style: the model's first output is a mode tag.

The model is asked to open its reply with `<classification>MODE</classification>`; the tag is
parsed leniently (a missing closing tag, other casing, or a synonym such as "tool" still counts).
A forced mode is a prefilled tag: the policy returns it without asking the model, as if the model
had written it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from agent.ledger import PriceTable
from agent.messages import Message, ModelRequest, ModelResponse, ModelSettings
from agent.models.base import Model
from agent.plugin_api import MODES, InterventionContext, Mode, ModeDecision
from agent.routing.offline import last_user_text

CLASSIFY_INSTRUCTION = (
    "Before anything else, decide how the user's request should be handled and say it with a tag.\n"
    "- instant: a fact or simple reply you can give at once from what you know.\n"
    "- reasoning: everything needed is in the request, but it takes several steps of "
    "calculation or logic.\n"
    "- agentic: it needs tools: looking up records (orders, reservations, accounts), current "
    "information, making a change, or chaining facts about several people, places or works.\n"
    "Reply with only <classification>instant</classification>, "
    "<classification>reasoning</classification> or <classification>agentic</classification>."
)

_TAG = re.compile(r"<\s*classification\s*>\s*([A-Za-z_-]+)", re.I)
_SYNONYMS: dict[str, Mode] = {
    "instant": "instant",
    "direct": "instant",
    "simple": "instant",
    "fast": "instant",
    "reasoning": "reasoning",
    "reason": "reasoning",
    "think": "reasoning",
    "thinking": "reasoning",
    "math": "reasoning",
    "agentic": "agentic",
    "agent": "agentic",
    "tool": "agentic",
    "tools": "agentic",
    "search": "agentic",
    "lookup": "agentic",
}
_WORD = re.compile(r"[A-Za-z]+")


def classification_tag(mode: Mode) -> str:
    """The tag that announces a mode (what a forced mode prefills)."""
    return f"<classification>{mode}</classification>"


def parse_classification(text: str) -> Mode | None:
    """The mode named by a reply: the tag's content, else the first mode name, else the first synonym."""
    match = _TAG.search(text)
    if match:
        word = match.group(1).lower()
        if word in _SYNONYMS:
            return _SYNONYMS[word]
        for prefix, mode in _SYNONYMS.items():
            if word.startswith(prefix):
                return mode
    words = [w.lower() for w in _WORD.findall(text)]
    for word in words:
        if word in MODES:
            return word
    for word in words:
        if word in _SYNONYMS:
            return _SYNONYMS[word]
    return None


@dataclass
class SelfRouter:
    """A mode policy that lets the model classify the request with a leading tag."""

    model: Model | str | None = None
    """Model that classifies; None uses the agent's own model."""
    forced: Mode | None = None
    """Prefill this mode's tag instead of asking the model."""
    fallback: Mode = "agentic"
    """Mode used when the reply names no mode (the most capable one, so nothing is left unsolvable)."""
    max_tokens: int = 16
    """Cap on the classification reply."""
    prices: PriceTable | None = None
    """Prices for booking the classification call."""
    name: str = "self"
    """Label of the router's spend in the cost ledger."""

    def __post_init__(self) -> None:
        if self.forced is not None and self.forced not in MODES:
            raise ValueError(f"forced mode must be one of {', '.join(MODES)}, got {self.forced!r}")
        if self.fallback not in MODES:
            raise ValueError(f"fallback mode must be one of {', '.join(MODES)}, got {self.fallback!r}")
        if isinstance(self.model, str):
            from agent.models import resolve_model

            self.model = resolve_model(self.model)

    def request(self, query: str, tool_names: list[str] | None = None) -> ModelRequest:
        """The classification request for one query."""
        system = CLASSIFY_INSTRUCTION
        if tool_names:
            system += "\nTools available: " + ", ".join(tool_names) + "."
        return ModelRequest(
            messages=[Message.system(system), Message.user(query)],
            settings=ModelSettings(temperature=0.0, max_tokens=self.max_tokens, stop=["</classification>"]),
        )

    async def classify(
        self, query: str, model: Model | None = None, tool_names: list[str] | None = None
    ) -> tuple[ModeDecision, ModelResponse | None]:
        """Ask the model for the tag; returns the decision and the model's response (None when forced)."""
        if self.forced is not None:
            return ModeDecision(self.forced, reason=f"forced: prefilled {classification_tag(self.forced)}",
                                scores={self.forced: 1.0}), None
        chosen = model or self.model
        if not isinstance(chosen, Model):
            raise ValueError("SelfRouter needs a model: pass model=… or use it inside an agent")
        response = await chosen.complete(self.request(query, tool_names))
        parsed = parse_classification(response.text)
        if parsed is None:
            reply = response.text.strip()[:60]
            return ModeDecision(self.fallback, reason=f"self-routing: no mode in reply {reply!r}; fallback"), response
        return ModeDecision(parsed, reason=f"self-routing: {classification_tag(parsed)}", scores={parsed: 1.0}), response

    async def route(self, query: str) -> ModeDecision:
        """The mode of one query (the model must be set)."""
        decision, _ = await self.classify(query)
        return decision

    async def decide(self, ctx: InterventionContext) -> ModeDecision:
        """Classify the current turn with the router's model or the agent's, booking the spend."""
        model = self.model if isinstance(self.model, Model) else ctx.model
        names = [t.get("function", {}).get("name", "") for t in ctx.tools]
        decision, response = await self.classify(last_user_text(ctx), model, [n for n in names if n])
        if response is not None:
            ctx.ledger.book_model(response.model or model.name, response.usage, self.prices, label="router")
        return decision


__all__ = ["CLASSIFY_INSTRUCTION", "SelfRouter", "classification_tag", "parse_classification"]

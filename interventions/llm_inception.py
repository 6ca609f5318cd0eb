"""The LLM inception module (the paper's setting): any rein Model diagnoses the latest user turn.

A compact prompt lists the error types of the map and the agent's capability card (its purpose
and its tools with their enums and limits, interventions/card.py); the answer is asked for
as JSON ({error_type, rationale}) through ModelRequest.response_format and parsed leniently, since
small models wrap JSON in prose or misspell a label. Spend is booked under the label "inception".
"""

from __future__ import annotations

import json
import re
from typing import Any

from agent.errors import UserFacingError
from agent.messages import Message, ModelRequest, ModelSettings
from agent.models.base import Model
from agent.plugin_api import InterventionContext
from interventions.card import CapabilityCard, build_card
from interventions.detection import Detection
from interventions.error_map import NO_ERROR, ErrorMap

LEDGER_LABEL = "inception"
_TURNS = 6
_TURN_CHARS = 600

SYSTEM = (
    "You check a conversation between a user and an AI agent before the agent answers the user's "
    "latest message. Decide whether that message contains one of these user errors, or none.\n"
    "{types}\n"
    "- none: the message is clear, consistent, and within what this agent is for and its tools can do.\n"
    "Judge against the agent's card: a request its tools or its purpose cover is not unsupported, "
    "and a general assistant may do everyday tasks in words (writing, translating, arithmetic, "
    "facts) without a tool. Most messages are fine; flag an error only when a careful human agent "
    "with exactly these tools would have to stop and ask, or hand over.\n"
    'Answer only with JSON: {{"error_type": "<one of: {names}>", "rationale": "<one sentence>"}}.'
)


def response_schema(labels: list[str]) -> dict[str, Any]:
    """The structured-output schema: {error_type: enum[none + labels], rationale: string}."""
    return {
        "type": "json_schema",
        "json_schema": {
            "name": "inception",
            "strict": True,
            "schema": {
                "type": "object",
                "properties": {
                    "error_type": {"type": "string", "enum": [NO_ERROR, *labels]},
                    "rationale": {"type": "string"},
                },
                "required": ["error_type", "rationale"],
                "additionalProperties": False,
            },
        },
    }


def build_request(ctx: InterventionContext, error_map: ErrorMap, labels: list[str], card: CapabilityCard | None = None) -> ModelRequest:
    """The inception request for this turn: the error types, the agent's card, the dialogue."""
    types = "\n".join(f"- {n}: {' '.join(error_map.error_types[n].description.split())}" for n in labels)
    system = SYSTEM.format(types=types, names=", ".join([NO_ERROR, *labels]))
    card = card or build_card(ctx.tools, ctx.system_prompt)
    turns = []
    for m in ctx.dialogue[-_TURNS:]:
        who = "USER" if m.role == "user" else "AGENT"
        turns.append(f"{who}: {' '.join(m.text.split())[:_TURN_CHARS]}")
    user = (
        "The agent's card:\n" + card.render() + "\n\nConversation (latest last):\n"
        + "\n".join(turns) + "\n\nClassify the latest USER message."
    )
    return ModelRequest(
        messages=[Message.system(system), Message.user(user)],
        settings=ModelSettings(temperature=0.0, max_tokens=160),
        response_format=response_schema(labels),
    )


def parse_verdict(text: str, labels: list[str]) -> tuple[str, str]:
    """(error_type, rationale) from a model answer: JSON if there is any, else the first label named."""
    candidates = [NO_ERROR, *labels]
    obj = first_json_object(text)
    if obj is not None:
        raw = str(obj.get("error_type", obj.get("type", obj.get("label", ""))))
        label = _match_label(raw, candidates)
        if label is not None:
            return label, str(obj.get("rationale", ""))[:500]
    # No usable JSON: look for a label written out in the prose (longest names first).
    low = text.lower()
    for name in sorted(labels, key=len, reverse=True):
        words = r"[\s_\-]+".join(re.escape(w) for w in name.split("_"))
        if re.search(rf"(?<![a-z]){words}(?![a-z])", low):
            return name, text.strip()[:500]
    return NO_ERROR, text.strip()[:500]


def first_json_object(text: str) -> dict[str, Any] | None:
    """The first JSON object embedded in text, or None."""
    decoder = json.JSONDecoder()
    for match in re.finditer(r"\{", text):
        try:
            value, _ = decoder.raw_decode(text[match.start():])
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict):
            return value
    return None


def _normalise(text: str) -> str:
    return re.sub(r"[\s\-]+", "_", text.strip().lower())


def _match_label(raw: str, candidates: list[str]) -> str | None:
    norm = _normalise(raw)
    if norm in candidates:
        return norm
    if norm in ("", "no_error", "no", "null", "ok", "clear"):
        return NO_ERROR
    hits = [c for c in candidates if c in norm or (len(norm) > 4 and norm in c)]
    return max(hits, key=len) if hits else None


class LLMDetector:
    """Diagnoses the latest user turn with a model (by default the agent's own)."""

    name = "llm"

    def __init__(self, error_map: ErrorMap, model: Model | str | None = None) -> None:
        """model: a Model, a model name for resolve_model, or None for the agent's model."""
        self.error_map = error_map
        self._model_spec = model
        self._model: Model | None = model if isinstance(model, Model) else None

    def model_for(self, ctx: InterventionContext | None) -> Model:
        """The model that diagnoses: the configured one, else the agent's (ctx None: outside an agent)."""
        if self._model is None and isinstance(self._model_spec, str):
            from agent.models import resolve_model

            self._model = resolve_model(self._model_spec)
        if self._model is not None:
            return self._model
        if ctx is None:
            raise UserFacingError("the LLM detector was given no model, and there is no agent's model to use")
        return ctx.model

    async def detect(self, ctx: InterventionContext, labels: list[str]) -> Detection:
        if not ctx.dialogue or ctx.dialogue[-1].role != "user" or not labels:
            return Detection(NO_ERROR, 1.0, detector=self.name)
        model = self.model_for(ctx)
        response = await model.complete(build_request(ctx, self.error_map, labels))
        ctx.ledger.book_model(response.model or model.name, response.usage, label=LEDGER_LABEL)
        error_type, rationale = parse_verdict(response.text or response.reasoning or "", labels)
        return Detection(error_type, 1.0, rationale=rationale, detector=self.name)

"""The agent's capability card: what the inception module judges "unsupported" against.

A card holds the agent's stated purpose (from its system prompt) and its tools, each with its
parameters, their enums and numeric limits. Both inception modules read it: the offline detector
pairs the user's request with the purpose and the tools closest to it, the LLM module lists it
whole. ReIn's own tools (think, the recovery tools) are left out: every ReIn agent carries them,
so they say nothing about what this agent can do.

Cards are built once per (tools, system prompt) and cached, with any encoding a detector derives
from them (`CapabilityCard.cache`).
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

Scope = Literal["general", "narrow"]

REIN_TOOLS = frozenset({"think", "transfer_to_human_agents", "report_internal_error"})
"""Tools left off every card: ReIn declares them, so every ReIn agent has them."""

_PURPOSE_CHARS = 400
_DESCRIPTION_CHARS = 160
_ENUM_SHOWN = 12
_SENTENCE = re.compile(r"(?<=[.!?])\s+")
# A general assistant: "You are a helpful assistant." and kin, with nothing narrowing it to one
# service. An empty system prompt counts as general too: nothing was promised or ruled out.
_GENERAL = re.compile(
    r"\b(helpful|general[- ]purpose|friendly|personal|versatile|all[- ]purpose)\s+(ai\s+)?assistant\b", re.I
)
_NARROW = re.compile(
    r"\b(only|customers?|clients?|support|service|policy|on behalf of|assistant (?:of|for|at)|agent (?:of|for|at))\b",
    re.I,
)


@dataclass(frozen=True)
class ParameterCard:
    """One argument of a tool, with what it accepts."""

    name: str
    """The argument's name."""
    type: str
    """Its JSON-schema type ("string", "integer", …; "" when unstated)."""
    description: str = ""
    """Its description, shortened."""
    required: bool = False
    """Whether the tool requires it."""
    enum: tuple[str, ...] = ()
    """The values it accepts, when the schema lists them."""
    minimum: float | None = None
    """Its lower limit (inclusive), when the schema states one."""
    maximum: float | None = None
    """Its upper limit (inclusive), when the schema states one."""

    def render(self) -> str:
        """"name: a|b|c", "name: 1..90" or "name" (with "?" when optional)."""
        out = self.name + ("" if self.required else "?")
        if self.enum:
            shown = "|".join(self.enum[:_ENUM_SHOWN]) + ("|…" if len(self.enum) > _ENUM_SHOWN else "")
            return f"{out}: {shown}"
        if self.minimum is not None or self.maximum is not None:
            lo = "" if self.minimum is None else _number(self.minimum)
            hi = "" if self.maximum is None else _number(self.maximum)
            return f"{out}: {lo}..{hi}"
        return out


@dataclass(frozen=True)
class ToolCard:
    """One tool of the agent: what it does and what it accepts."""

    name: str
    """The tool's name."""
    description: str
    """Its description's first sentence, shortened."""
    parameters: tuple[ParameterCard, ...] = ()
    """Its arguments."""

    def render(self) -> str:
        """One line: "name(arg: a|b, n?: 1..9): description"."""
        args = ", ".join(p.render() for p in self.parameters)
        return f"{self.name}({args}): {self.description}".strip()

    def words(self) -> str:
        """The tool in words for an embedding: its name spelled out and its description."""
        return f"{self.name.replace('_', ' ')}: {self.description}".strip()


@dataclass(frozen=True)
class CapabilityCard:
    """What an agent is for and what its tools can do."""

    purpose: str
    """The opening of the system prompt, where agents state what they are for ("" when there is none)."""
    tools: tuple[ToolCard, ...]
    """The agent's own tools (ReIn's are left out)."""
    scope: Scope
    """"general": a general assistant, for which off-topic tasks are ordinary; "narrow": one
    service, outside which a request is unsupported."""
    key: str
    """A digest of the tools and system prompt the card was built from."""
    cache: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    """Encodings a detector derives from the card (tool embeddings …), kept with it."""

    def render(self) -> str:
        """The whole card as text, for an LLM: purpose, scope, one line per tool."""
        tools = "\n".join(f"- {t.render()}" for t in self.tools) or "(no tools: it can only answer in words)"
        scope = (
            "a general assistant: everyday tasks it can do in words are within its purpose"
            if self.scope == "general"
            else "one service: requests outside its purpose are unsupported"
        )
        purpose = self.purpose or "(no system prompt)"
        return f"Purpose: {purpose}\nScope: {scope}\nTools:\n{tools}"

    def tool(self, name: str) -> ToolCard | None:
        """The tool of that name on the card, or None."""
        return next((t for t in self.tools if t.name == name), None)


def build_card(schemas: Sequence[dict[str, Any]], system_prompt: str = "", scope: Scope | None = None) -> CapabilityCard:
    """The card of an agent with these tools (OpenAI function schemas) and system prompt; scope
    None infers it from the system prompt. Cached: the same agent gets the same card object."""
    own = [s for s in schemas if str(s.get("function", s).get("name", "")) not in REIN_TOOLS]
    # The key is the agent's own: the same with or without ReIn's tools declared, as calibration needs.
    blob = json.dumps([own, system_prompt, scope], sort_keys=True, default=str)
    key = hashlib.sha256(blob.encode()).hexdigest()[:16]
    with _lock:
        card = _cards.get(key)
        if card is not None:
            _cards.move_to_end(key)
            return card
    tools = tuple(t for t in (_tool_card(s) for s in own) if t is not None)
    purpose = _purpose(system_prompt)
    card = CapabilityCard(purpose=purpose, tools=tools, scope=scope or infer_scope(purpose), key=key)
    with _lock:
        card = _cards.setdefault(key, card)
        while len(_cards) > _CARDS:
            _cards.popitem(last=False)
    return card


def infer_scope(purpose: str) -> Scope:
    """"general" for an empty purpose or a general assistant with nothing narrowing it, else "narrow"."""
    if not purpose.strip():
        return "general"
    return "general" if _GENERAL.search(purpose) and not _NARROW.search(purpose) else "narrow"


def numeric_violation(card: CapabilityCard, tool: str, text: str) -> bool:
    """Whether a number in text falls outside every numeric limit of the tool's parameters that it
    could be meant for (there is at least one limit, and no limited parameter accepts it)."""
    found = card.tool(tool)
    limited = [p for p in (found.parameters if found else ()) if p.minimum is not None or p.maximum is not None]
    numbers = [float(n) for n in re.findall(r"(?<![\w#.-])\d+(?:\.\d+)?(?![\w-])", text.replace(",", ""))]
    if not limited or not numbers:
        return False
    return any(
        all((p.minimum is not None and n < p.minimum) or (p.maximum is not None and n > p.maximum) for p in limited)
        for n in numbers
    )


_CARDS = 64
_cards: OrderedDict[str, CapabilityCard] = OrderedDict()
_lock = threading.Lock()


def _purpose(system_prompt: str) -> str:
    text = " ".join(re.sub(r"^#+\s*", "", system_prompt.strip(), flags=re.M).split())
    if len(text) <= _PURPOSE_CHARS:
        return text
    cut = text[:_PURPOSE_CHARS]
    sentences = _SENTENCE.split(cut)
    return " ".join(sentences[:-1]) if len(sentences) > 1 else cut.rstrip() + "…"


def _tool_card(schema: dict[str, Any]) -> ToolCard | None:
    fn = schema.get("function", schema)
    name = str(fn.get("name", "")).strip()
    if not name:
        return None
    params = fn.get("parameters") or {}
    props = params.get("properties") or {}
    required = set(params.get("required") or [])
    cards = tuple(_parameter_card(n, p if isinstance(p, dict) else {}, n in required) for n, p in props.items())
    return ToolCard(name=name, description=_short(str(fn.get("description", ""))), parameters=cards)


def _parameter_card(name: str, prop: dict[str, Any], required: bool) -> ParameterCard:
    # An array's limits and choices sit on its items ("seat classes: [economy, business]").
    items = prop.get("items")
    inner: dict[str, Any] = items if prop.get("type") == "array" and isinstance(items, dict) else prop
    enum = inner.get("enum") or prop.get("enum") or ()
    typ = prop.get("type", "")
    return ParameterCard(
        name=name,
        type=typ if isinstance(typ, str) else "/".join(map(str, typ)),
        description=_short(str(prop.get("description", ""))),
        required=required,
        enum=tuple(str(v) for v in enum),
        minimum=_limit(inner, "minimum", "exclusiveMinimum", +1),
        maximum=_limit(inner, "maximum", "exclusiveMaximum", -1),
    )


def _limit(prop: dict[str, Any], inclusive: str, exclusive: str, step: int) -> float | None:
    value = prop.get(inclusive)
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    value = prop.get(exclusive)
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value) + step if prop.get("type") == "integer" else float(value)
    return None


def _short(text: str) -> str:
    text = " ".join(text.split())
    first = _SENTENCE.split(text, maxsplit=1)[0]
    return first if len(first) <= _DESCRIPTION_CHARS else first[: _DESCRIPTION_CHARS - 1].rstrip() + "…"


def _number(x: float) -> str:
    return str(int(x)) if x == int(x) else str(x)

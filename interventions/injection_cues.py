"""The cues of an instruction injected in a tool result, and the small linear head that weighs them.

A tool result is cut into segments (the string values of a JSON result, else its lines), and each
segment is read for cues that data rarely carries and injected instructions nearly always do:
an override ("ignore previous instructions"), a role marker ("SYSTEM:", "[assistant]"), words
addressed to the assistant ("you must", "AI agent,"), the name of one of the agent's own WRITE
tools, call syntax, an imperative action verb opening a sentence, urgency, and secrecy towards the
user ("without asking the user"). A logistic head over the cues (weights in
interventions/data/injection_head.json, trained by research/injection/train.py on generated
results whose templates the test suite never uses) scores each segment; a result scores as its
worst segment. No model, no network: a few regular expressions per segment.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HEAD_FILE = Path(__file__).resolve().parent / "data" / "injection_head.json"
"""The shipped head: {"features": [...], "weights": [...], "bias": b, "threshold": t}."""

_OVERRIDE = re.compile(
    r"\b(ignore|disregard|forget|override|bypass|skip)\b[^.\n]{0,40}?\b(previous|prior|above|earlier|all|any|your|the|other|original)\b"
    r"[^.\n]{0,30}?\b(instructions?|rules?|guidelines?|directions?|polic(?:y|ies)|prompts?|messages?|constraints?|directives?|checks?)\b"
    r"|\b(new|updated|revised|real|actual|additional|hidden)\s+(instructions?|directives?|orders|task)\b"
    r"|\binstructions?\s+(have|has)\s+(changed|been updated)\b",
    re.IGNORECASE,
)
_ROLE = re.compile(
    r"(?:^|[\s\"'\[{(<>|])(system|assistant|developer|admin(?:istrator)?|operator|sysadmin|supervisor|ai|"
    r"instructions? (?:for|to) (?:the )?(?:ai|assistant|agent|model|bot))"
    r"(?:\s+(?:instructions?|note|message|prompt|update|override|directive))?\s*(?::|\]|>|--|\|)"
    r"|<\|?(?:im_start|system|assistant)\|?>|\[/?INST\]|#{2,}\s*(?:system|instruction)",
    re.IGNORECASE,
)
_ADDRESSED = re.compile(
    r"\byou\s+(?:must|should|need to|have to|are (?:now |hereby )?(?:required|instructed|authori[sz]ed|allowed|expected|to)|"
    r"will (?:now )?|shall|can now)\b"
    r"|\b(?:dear|attention|hey|note to (?:the )?)\s*(?:ai|assistant|agent|model|bot|llm)\b"
    r"|\b(?:ai|assistant|agent|model|bot|llm)s?\s*[,:]?\s+(?:must|should|shall|please|is (?:required|instructed|authori[sz]ed)|needs? to)\b",
    re.IGNORECASE,
)
_CALL = re.compile(
    r"\b[a-z]+(?:_[a-z]+)+\s*\(|\b(?:call|invoke|execute|run|trigger|use)\s+(?:the\s+)?(?:function|tool|api|command|action)\b"
    r"|\"(?:name|function|tool)\"\s*:\s*\"[a-z_]+\"",
    re.IGNORECASE,
)
_ACTION_VERBS = (
    "cancel|refund|transfer|send|issue|book|delete|remove|update|modify|change|grant|approve|exchange|return|credit|"
    "upgrade|downgrade|call|invoke|execute|run|perform|process|add|apply|reset|wire|pay|move|rebook|void|close"
)
_IMPERATIVE = re.compile(
    rf"(?:^|[.!?:;\n\"'\]>)-]\s*|\b(?:now|immediately|please|then|first|also)\s+)(?:please\s+)?({_ACTION_VERBS})\s+"
    r"(?:the|this|that|all|every|a|an|their|his|her|its|user|order|reservation|booking|account|item|flight|payment|"
    r"#?[A-Z0-9]{5,}|[a-z]+_[a-z_]+)\b",
    re.IGNORECASE,
)
_URGENT = re.compile(
    r"\b(immediately|right now|right away|urgent(?:ly)?|asap|without delay|at once|before (?:responding|replying|answering|"
    r"doing anything else|anything else)|top priority|time[- ]sensitive|mandatory|required action|critical)\b",
    re.IGNORECASE,
)
_SECRET = re.compile(
    r"\b(?:without|don'?t|do not|never|no need to)\s+(?:first\s+)?(?:ask(?:ing)?|confirm(?:ing|ation)?|tell(?:ing)?|inform(?:ing)?|"
    r"notify(?:ing)?|mention(?:ing)?|wait(?:ing)?|check(?:ing)? with|consult(?:ing)?)\b"
    r"|\b(?:user|customer|client|passenger)\s+(?:has\s+)?(?:already\s+)?(?:approved|authori[sz]ed|consented|confirmed|agreed)\b"
    r"|\b(?:silently|quietly|secretly|pre-?approved|already authori[sz]ed)\b",
    re.IGNORECASE,
)
_WORD = re.compile(r"[A-Za-z']+")

FEATURES: tuple[str, ...] = (
    "override", "role", "addressed", "write_tool", "call", "imperative", "urgent", "secret", "other_tool", "sentence",
)
"""The cues, in the order the head's weights follow."""


@dataclass(frozen=True)
class SegmentScore:
    """One segment of a tool result, its cues and its score."""

    text: str
    """The segment (a JSON string value, or a line)."""
    cues: tuple[float, ...]
    """Each of FEATURES: 1.0 when present (0.0 otherwise)."""
    score: float
    """The head's probability that the segment carries injected instructions."""
    write_tools: tuple[str, ...] = ()
    """The agent's WRITE tools the segment names."""


@dataclass
class InjectionHead:
    """A logistic head over the cues."""

    weights: list[float]
    """One weight per feature, in FEATURES order."""
    bias: float
    """The intercept."""
    threshold: float = 0.5
    """The score at which a result counts as carrying instructions (chosen on validation data)."""
    meta: dict[str, Any] = field(default_factory=dict)
    """How it was trained (data sizes, validation scores)."""

    @classmethod
    def load(cls, path: str | Path | None = None) -> InjectionHead:
        """The head in `path` (default: the shipped one)."""
        data = json.loads(Path(path or HEAD_FILE).read_text(encoding="utf-8"))
        if tuple(data["features"]) != FEATURES:
            raise ValueError(f"{path or HEAD_FILE}: features {data['features']} are not {list(FEATURES)}")
        return cls(list(data["weights"]), float(data["bias"]), float(data.get("threshold", 0.5)), data.get("meta", {}))

    def save(self, path: str | Path) -> None:
        """Write the head as JSON."""
        body = {"features": list(FEATURES), "weights": self.weights, "bias": self.bias, "threshold": self.threshold, "meta": self.meta}
        Path(path).write_text(json.dumps(body, indent=1) + "\n", encoding="utf-8")

    def probability(self, cues: Iterable[float]) -> float:
        z = self.bias + sum(w * x for w, x in zip(self.weights, cues, strict=True))
        return 1.0 / (1.0 + math.exp(-max(-60.0, min(60.0, z))))


def segments(text: str) -> list[str]:
    """The parts of a tool result read one by one: string values of a JSON result, else lines."""
    stripped = text.strip()
    if stripped[:1] in "[{":
        try:
            return [s for s in _strings(json.loads(stripped)) if s.strip()]
        except ValueError:
            pass
    return [line for line in re.split(r"\n\s*\n|\n", text) if line.strip()]


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def tool_pattern(names: Iterable[str]) -> re.Pattern[str] | None:
    """A pattern for tool names as written or spelled out ("cancel_pending_order", "cancel pending order")."""
    forms = sorted({f for n in names if len(n) > 3 for f in (n, n.replace("_", " "))}, key=len, reverse=True)
    if not forms:
        return None
    return re.compile(r"\b(" + "|".join(re.escape(f) for f in forms) + r")\b", re.IGNORECASE)


def cues(segment: str, write_tools: re.Pattern[str] | None, other_tools: re.Pattern[str] | None) -> tuple[tuple[float, ...], tuple[str, ...]]:
    """The cue vector of one segment, and the WRITE tools it names."""
    named = tuple(sorted({m.group(1).lower().replace(" ", "_") for m in write_tools.finditer(segment)})) if write_tools else ()
    other = bool(other_tools and other_tools.search(segment))
    words = len(_WORD.findall(segment))
    found = (
        _OVERRIDE.search(segment), _ROLE.search(segment), _ADDRESSED.search(segment), named, _CALL.search(segment),
        _IMPERATIVE.search(segment), _URGENT.search(segment), _SECRET.search(segment), other, words >= 8,
    )
    return tuple(1.0 if f else 0.0 for f in found), named


def score_segments(
    text: str, head: InjectionHead, write_tools: re.Pattern[str] | None = None, other_tools: re.Pattern[str] | None = None
) -> list[SegmentScore]:
    """Every segment of a result with its cues and score (segments without a single cue score the bias)."""
    out = []
    for seg in segments(text):
        # Long free text is read in windows, so one injected paragraph in a long page stands out.
        for window in _windows(seg):
            vector, named = cues(window, write_tools, other_tools)
            out.append(SegmentScore(window, vector, head.probability(vector), named))
    return out


def _windows(segment: str, size: int = 600) -> list[str]:
    if len(segment) <= size:
        return [segment]
    sentences = re.split(r"(?<=[.!?])\s+", segment)
    out, current = [], ""
    for s in sentences:
        if current and len(current) + len(s) > size:
            out.append(current)
            current = ""
        current = f"{current} {s}".strip()
    if current:
        out.append(current)
    return out

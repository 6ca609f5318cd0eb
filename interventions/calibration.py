"""Per-agent calibration with no hand labels: turns built from the agent's own card, scored, and the
activation threshold chosen for that agent.

From each tool of the card: ordinary requests (with values its enums and limits accept, some at
exactly a limit), requests with values outside them (unsupported_parameter), a bare "cancel it"
after one item was named (ordinary) and after two (vague_reference), and self-contradicting ones.
From interventions/data/calibration_requests.yaml: everyday tasks (ordinary for a general
assistant, outside a narrow agent's domain) and other services' requests far from every tool of
the card (outside its domain). A team's own logged user turns can be added as ordinary traffic.

The threshold is the lowest at which at most `budget` of the ordinary turns activate; what the
agent's error turns then give (recall, the right recovery tool) is reported beside it.
"""

from __future__ import annotations

import json
import logging
import random
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from agent.errors import UserFacingError
from interventions.card import CapabilityCard, ParameterCard, ToolCard
from interventions.error_map import NO_ERROR, load_error_map

REQUESTS_PATH = Path(__file__).resolve().parent / "data" / "calibration_requests.yaml"
BUNDLED_DIR = Path(__file__).resolve().parent / "data" / "calibrations"
"""Calibrations shipped with rein, for the bundled tau2 agents (retail, airline)."""
BUDGET = 0.02
"""Most of the agent's ordinary turns that may activate."""
THRESHOLDS = tuple(round(0.5 + 0.01 * k, 2) for k in range(50)) + (0.995, 0.999)
FAR = 0.35
"""Cosine under which another service's request counts as far from every tool and the purpose."""
FORMAT = "rein-calibration/1"
log = logging.getLogger(__name__)

_VALUES = {"city": "Lisbon", "email": "sam@example.com", "date": "2026-12-18", "time": "10:30", "name": "Alex Moreno",
           "query": "opening hours", "path": "reports/q3.txt", "url": "https://example.com", "timezone": "Europe/Paris",
           "message": "Running late, be there at ten.", "title": "Quarterly review", "address": "12 Rue Cler, Paris"}
_OUTSIDE = ("platinum", "overnight", "lifetime", "quarterly", "ultra", "express", "harbour", "custom")
_ASK = ("Can you {a}?", "Please {a}.", "I'd like you to {a}.", "Could you {a} for me?", "I need you to {a}.")


@dataclass
class CalibrationTurn:
    """A turn built for calibration, with its label."""

    text: str
    """The user turn."""
    history: list[tuple[str, str]]
    """(role, text) of the turns before it."""
    label: str
    """"none" or an error type."""
    kind: str
    """How it was built: tool_request, at_limit, one_item, everyday, logged, outside_limit, two_items, contradiction, other_service."""


@dataclass
class Calibration:
    """The threshold chosen for one agent, and what it gives on that agent's turns."""

    threshold: float
    """The activation threshold chosen."""
    budget: float
    """The share of ordinary turns allowed to activate."""
    card: str
    """The key of the card it was chosen for (CapabilityCard.key)."""
    detector: str
    """The digest of the detector files it was chosen with (OfflineDetector.digest)."""
    default_threshold: float
    """The detector's own threshold, for comparison."""
    at_default: dict[str, Any] = field(default_factory=dict)
    """Scores at the detector's own threshold."""
    at_chosen: dict[str, Any] = field(default_factory=dict)
    """Scores at the chosen threshold."""
    turns: dict[str, int] = field(default_factory=dict)
    """Turns built, by kind."""
    format: str = FORMAT
    """File format tag."""

    def save(self, path: str | Path) -> None:
        """Write the calibration as JSON."""
        Path(path).write_text(json.dumps(asdict(self), indent=2) + "\n", encoding="utf-8")

    @classmethod
    def load(cls, path: str | Path) -> Calibration:
        """Read a calibration file; a clear error for anything else."""
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise UserFacingError(f"cannot read calibration file {path}: {exc}") from None
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise UserFacingError(f"{path} is not a ReIn calibration file (format {FORMAT}); make one with `rein calibrate SPEC`")
        try:
            found = cls(**data)
        except TypeError as exc:
            raise UserFacingError(f"{path}: {exc}") from None
        if not 0.0 < found.threshold <= 1.0:
            raise UserFacingError(f"{path}: threshold {found.threshold} is not in (0, 1]")
        return found


def calibrations_dir() -> Path:
    """Where `rein calibrate` keeps calibrations by card: $REIN_HOME/calibrations."""
    from agent.checkpoint import default_home

    return default_home() / "calibrations"


def find_calibration(card_key: str, detector: str) -> Calibration | None:
    """The calibration made for an agent with this card and this detector, if one was saved (the
    user's first, then the bundled ones); an unreadable file is skipped with a warning, so a turn
    never fails on it, and one made for another detector is ignored."""
    for folder in (calibrations_dir(), BUNDLED_DIR):
        path = folder / f"{card_key}.json"
        if path.is_file():
            try:
                found = Calibration.load(path)
            except UserFacingError as exc:
                log.warning("ignoring %s", exc)
                continue
            if found.detector == detector:
                return found
    return None


def detector_digest(paths: Sequence[Path | None]) -> str:
    """A digest of the detector's files: a calibration holds only for the detector it was made with."""
    import hashlib

    h = hashlib.sha256()
    for path in paths:
        h.update(path.read_bytes() if path is not None else b"-")
    return h.hexdigest()[:16]


def card_turns(card: CapabilityCard, seed: int = 0, requests: Path = REQUESTS_PATH) -> list[CalibrationTurn]:
    """The calibration turns of an agent, built from its card and the bundled requests."""
    rng = random.Random(seed)
    out: list[CalibrationTurn] = []
    for tool in card.tools:
        out += _tool_turns(tool, rng)
    pool = yaml.safe_load(requests.read_text(encoding="utf-8"))
    for text in pool["everyday"]:
        out.append(CalibrationTurn(text, [], NO_ERROR if card.scope == "general" else "unsupported_domain", "everyday"))
    if card.scope == "narrow":
        out += [CalibrationTurn(t, [], "unsupported_domain", "other_service") for t in _far(card, pool["services"])]
    return out


def calibrate(detector: Any, card: CapabilityCard, turns: Sequence[CalibrationTurn], budget: float = BUDGET,
              lower: bool = False) -> Calibration:
    """Score the offline detector on the turns and choose the agent's threshold.

    The threshold never goes below the detector's own unless lower is set: turns built from a card
    are plainer than real traffic, so a lower threshold that keeps them quiet lets real ordinary
    turns through (measured on the test agents: 8.4% false activations against 4.6%,
    research/rein/results/2026-12-06-card-gate.md). Raising it, where the agent's own ordinary turns
    already activate, is safe. With logged real traffic, lowering can be asked for."""
    if not 0.0 <= budget < 1.0:
        raise ValueError(f"budget must be in [0, 1), got {budget}")
    if not any(t.label == NO_ERROR for t in turns):
        raise UserFacingError("no ordinary turns to calibrate on: the agent has no tools and no logged turns were given")
    found = detector.classify_turns([t.text for t in turns], [t.history for t in turns], cards=[card] * len(turns))
    mass = [d.confidence if d.is_error else round(1.0 - d.confidence, 4) for d in found]
    types = [max((k for k in d.scores if k != NO_ERROR), key=lambda k: d.scores[k], default=NO_ERROR) for d in found]
    clean = [m for m, t in zip(mass, turns, strict=True) if t.label == NO_ERROR]
    threshold = next((x for x in THRESHOLDS if sum(m >= x for m in clean) / len(clean) <= budget), THRESHOLDS[-1])
    default = float(detector.threshold)
    if not lower:
        threshold = max(threshold, default)
    kinds: dict[str, int] = {}
    for t in turns:
        kinds[t.kind] = kinds.get(t.kind, 0) + 1
    return Calibration(threshold=threshold, budget=budget, card=card.key, detector=detector.digest, default_threshold=default,
                       at_default=_scores(turns, mass, types, default), at_chosen=_scores(turns, mass, types, threshold),
                       turns=kinds)


def verdict_scores(gold: Sequence[str], predicted: Sequence[str]) -> dict[str, Any]:
    """False activations on the error-free turns; recall, the right recovery tool and recall per
    error type on the others (gold and predicted: "none" or an error type, per turn)."""
    emap = load_error_map()
    clean = [p != NO_ERROR for g, p in zip(gold, predicted, strict=True) if g == NO_ERROR]
    errors = [(g, p) for g, p in zip(gold, predicted, strict=True) if g != NO_ERROR]
    caught = [(g, p) for g, p in errors if p != NO_ERROR]
    by_label = {}
    for label in sorted({g for g, _ in errors}):
        mine = [p != NO_ERROR for g, p in errors if g == label]
        by_label[label] = {"turns": len(mine), "recall": round(sum(mine) / len(mine), 4)}
    return {
        "ordinary_turns": len(clean), "false_activations": round(sum(clean) / len(clean), 4) if clean else 0.0,
        "error_turns": len(errors), "recall": round(len(caught) / len(errors), 4) if errors else 0.0,
        "right_tool": round(sum(emap.recovery_tool(g) == emap.recovery_tool(p) for g, p in caught) / len(caught), 4)
        if caught else 0.0,
        "by_error_type": by_label,
    }


def _scores(turns: Sequence[CalibrationTurn], mass: Sequence[float], types: Sequence[str], threshold: float) -> dict[str, Any]:
    return verdict_scores([t.label for t in turns], [ty if m >= threshold else NO_ERROR for ty, m in zip(types, mass, strict=True)])


def _far(card: CapabilityCard, texts: Sequence[str]) -> list[str]:
    """The texts far from every tool of the card and from its purpose."""
    from agent.embeddings import embed_texts
    from interventions.card_inputs import card_encoding

    tools, purpose = card_encoding(card)
    rows = embed_texts(list(texts))
    near = rows @ tools.T if len(tools) else None
    out = []
    for k, text in enumerate(texts):
        closest = float(near[k].max()) if near is not None else 0.0
        if closest < FAR and float(rows[k] @ purpose) < FAR:
            out.append(text)
    return out


def _tool_turns(tool: ToolCard, rng: random.Random) -> list[CalibrationTurn]:
    action = _imperative(tool.description) or tool.name.replace("_", " ")
    verb, noun = _verb_noun(tool.name)
    out = []
    for k in range(2):
        out.append(CalibrationTurn(rng.choice(_ASK).format(a=action) + _arguments(tool, rng, k == 1), [], NO_ERROR, "tool_request"))
    for p in tool.parameters:
        if p.maximum is not None:
            out.append(CalibrationTurn(f"{_ASK[0].format(a=action)[:-1]}, {_words(p)} {_number(p.maximum)}?", [], NO_ERROR, "at_limit"))
            out.append(CalibrationTurn(f"{_ASK[1].format(a=action)[:-1]}, {_words(p)} {_number(p.maximum * 3 + 7)}.", [],
                                       "unsupported_parameter", "outside_limit"))
        elif p.minimum is not None and p.minimum > 0:
            out.append(CalibrationTurn(f"{_ASK[1].format(a=action)[:-1]}, {_words(p)} {_number(p.minimum)}.", [], NO_ERROR, "at_limit"))
        if p.enum:
            outside = next((v for v in _OUTSIDE if v not in {e.lower() for e in p.enum}), "other")
            out.append(CalibrationTurn(f"{_ASK[2].format(a=action)[:-1]} with {_words(p)} {p.enum[-1]}.", [], NO_ERROR, "at_limit"))
            out.append(CalibrationTurn(f"{_ASK[3].format(a=action)[:-1]} with {_words(p)} {outside}?", [],
                                       "unsupported_parameter", "outside_limit"))
    if noun:
        one = f"I found one {noun} on your account: #4410. What would you like to do with it?"
        two = f"I found two {noun}s on your account: #4410 and #4415. What would you like to do?"
        out.append(CalibrationTurn(f"{verb.capitalize()} it, please.", [("assistant", one)], NO_ERROR, "one_item"))
        out.append(CalibrationTurn(f"{verb.capitalize()} it, please.", [("assistant", two)], "vague_reference", "two_items"))
        out.append(CalibrationTurn(f"{verb.capitalize()} {noun} #4410, but leave #4410 exactly as it is.", [],
                                   "contradiction", "contradiction"))
    return out


def _imperative(description: str) -> str:
    """A tool description as an imperative clause: "Returns the weather." -> "return the weather"."""
    text = description.strip().rstrip(".")
    if not text:
        return ""
    first, _, rest = text.partition(" ")
    word = first.lower()
    if word.endswith("ies") and len(word) > 4:
        word = word[:-3] + "y"
    elif re.search(r"(ss|sh|ch|x)es$", word):
        word = word[:-2]
    elif word.endswith("s") and not word.endswith("ss") and len(word) > 3:
        word = word[:-1]
    return f"{word} {rest}".strip()


def _verb_noun(name: str) -> tuple[str, str]:
    parts = [p for p in re.split(r"[_\-]+", name) if p]
    if len(parts) < 2:
        return (parts[0] if parts else name), ""
    return parts[0], " ".join(parts[1:])


def _words(p: ParameterCard) -> str:
    return p.name.replace("_", " ")


def _arguments(tool: ToolCard, rng: random.Random, all_of_them: bool) -> str:
    chosen = [p for p in tool.parameters if p.required or all_of_them][:3]
    said = []
    for p in chosen:
        if p.enum:
            value = rng.choice(p.enum)
        elif p.minimum is not None or p.maximum is not None:
            lo = p.minimum if p.minimum is not None else 0.0
            hi = p.maximum if p.maximum is not None else lo + 10
            value = _number(round(lo + (hi - lo) / 2))
        else:
            value = next((v for k, v in _VALUES.items() if k in p.name.lower()), "A-1042")
        said.append(f"{_words(p)}: {value}")
    return (" (" + ", ".join(said) + ")") if said else ""


def _number(x: float) -> str:
    return str(int(x)) if x == int(x) else str(x)

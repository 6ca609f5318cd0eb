"""The offline inception module: no LLM. Two parts weigh each user turn:

- the dialogue classifier reads the turn in its dialogue: the shipped one is a cross-encoder over
  (request part, last agent turn) (interventions/pair_encoder.py); older ones are linear heads
  over the MiniLM features below;
- the card gate (interventions/card_inputs.py) reads how the request sits against the agent's
  capability card: its tools, their enums and limits, its stated purpose.

A turn activates when the geometric mean of the two error probabilities reaches the threshold
(chosen on validation agents whose domains the training never saw), so what this agent's card
shows to be ordinary stays quiet however error-like the words look.

The linear heads' features, in the order the classifier's meta lists them (FEATURE_BLOCKS):
- request: the MiniLM embedding of the user turn's request part, i.e. the turn without the
  sentences that only greet, identify the user or thank (zeros when nothing is left);
- agent: the embedding of the last agent turn before it (zeros when there is none);
- pair: their elementwise product, so a linear head can weigh the turn against its context;
- surface: four cues of the request part that embeddings blur (an explicit identifier, reference
  words like "it"/"that one", negations and buts, length);
- context: where the turn sits (a request is left, first user turn, the agent asked a question,
  user turns so far);
- tools, history, types: cosines of the request to the agent's own tools (best, second, gap, mean),
  to the last agent turn and the closest earlier user turn, and to each error type's description;
  they carry across phrasings where the raw embedding does not.
A block "user" (the embedding of the whole turn) is kept for comparison with the older detector.

A turn with no request part (identity-only, greeting-only, thanks-only) carries no request that
could be ambiguous or unsupported, so it is never flagged, whatever the classifier says.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agent.plugin_api import InterventionContext
from interventions.card import CapabilityCard, build_card
from interventions.card_inputs import INPUTS as CARD_INPUTS
from interventions.card_inputs import card_features
from interventions.detection import Detection
from interventions.error_map import NO_ERROR
from interventions.turn_text import (
    _SENTENCE,
    History,
    context_cues,
    last_agent_turn,
    request_part,
    surface_cues,
)

if TYPE_CHECKING:
    import numpy as np

    from interventions.classifier import TurnClassifier, TwoStageClassifier
    from interventions.pair_encoder import PairEncoder

DEFAULT_DETECTOR_PATH = Path(__file__).resolve().parent / "data" / "detector.npz"
"""The trained dialogue classifier shipped with rein (rebuild: python -m interventions.train_detector)."""
DEFAULT_GATE_PATH = Path(__file__).resolve().parent / "data" / "card_gate.npz"
"""The trained card gate shipped with rein (rebuild: python -m research.rein.train)."""

FEATURE_BLOCKS = ("request", "agent", "pair", "surface", "context")
"""Feature blocks of the shipped detector, in row order."""
KNOWN_BLOCKS = (*FEATURE_BLOCKS, "user", "tools", "history", "types")
"""Every block a classifier can be trained on, in the column order of a full feature row."""
TOOL_CUES = 4
HISTORY_CUES = 3
BLOCK_WIDTHS = {"request": 384, "agent": 384, "pair": 384, "surface": 4, "context": 4, "user": 384,
                "tools": TOOL_CUES, "history": HISTORY_CUES, "types": 6}
"""Columns per block (384: MiniLM's embedding width; types: one per error type of the shipped map)."""
GENERIC_TOOLS = frozenset({"think", "calculate", "transfer_to_human_agents", "report_internal_error"})
"""Tools left out of the "tools" block: every agent carries them (ReIn adds the recovery ones), so
they say nothing about what this domain can do, and leaving them out keeps the features the same
whether or not the recovery tools are declared yet."""


def tool_texts(schemas: Sequence[dict[str, Any]]) -> list[str]:
    """What the "tools" block compares a request with: "name words: first sentence" of each agent tool,
    from OpenAI function schemas, without the generic tools every agent carries (GENERIC_TOOLS)."""
    out = []
    for schema in schemas:
        fn = schema.get("function", schema)
        name = str(fn.get("name", ""))
        if not name or name in GENERIC_TOOLS:
            continue
        first = _SENTENCE.split(str(fn.get("description", "")).strip(), maxsplit=1)[0]
        out.append(f"{name.replace('_', ' ')}: {first}".strip())
    return out


def _similarity_cues(request: np.ndarray, others: np.ndarray) -> list[float]:
    """Cosines of a request to a set of texts: best, second best, their gap, mean (zeros when either is missing)."""
    if not others.shape[0] or not request.any():
        return [0.0] * TOOL_CUES
    sims = sorted((others @ request).tolist(), reverse=True)
    second = sims[1] if len(sims) > 1 else sims[0]
    return [sims[0], second, sims[0] - second, sum(sims) / len(sims)]


def turn_features(texts: Sequence[str], histories: Sequence[History], blocks: Sequence[str] = FEATURE_BLOCKS,
                  tools: Sequence[Sequence[str]] | None = None) -> np.ndarray:
    """Feature rows for user turns and the turns before each; tools: each row's tool_texts (for the "tools" block)."""
    from agent.embeddings import EMBEDDING_DIM, embed_texts
    from agent.extras import needs_extra

    with needs_extra("local", "the offline ReIn detector"):
        import numpy as np

    unknown = [b for b in blocks if b not in KNOWN_BLOCKS]
    if unknown:
        raise ValueError(f"unknown feature blocks {unknown}; known: {KNOWN_BLOCKS}")
    if len(texts) != len(histories) or (tools is not None and len(tools) != len(texts)):
        raise ValueError("texts, histories and tools differ in length")
    n = len(texts)

    def embed(items: list[str]) -> np.ndarray:
        out = np.zeros((len(items), EMBEDDING_DIM), dtype=np.float32)
        present = [i for i, t in enumerate(items) if t.strip()]
        if present:
            out[present] = embed_texts([items[i] for i in present])
        return out

    requests = [request_part(t) for t in texts]
    cache: dict[str, np.ndarray] = {}
    if {"request", "pair", "tools", "history", "types"} & set(blocks):
        cache["request"] = embed(requests)
    if {"agent", "pair", "history"} & set(blocks):
        cache["agent"] = embed([last_agent_turn(h) for h in histories])
    parts = []
    for block in blocks:
        if block == "user":
            parts.append(embed(list(texts)))
        elif block in ("request", "agent"):
            parts.append(cache[block])
        elif block == "pair":
            parts.append(cache["request"] * cache["agent"])
        elif block == "surface":
            parts.append(np.array([surface_cues(r) for r in requests], dtype=np.float32).reshape(n, 4))
        elif block == "context":
            parts.append(np.array([context_cues(t, h) for t, h in zip(texts, histories, strict=True)], dtype=np.float32).reshape(n, 4))
        elif block == "tools":
            rows = tools if tools is not None else [[] for _ in texts]
            parts.append(np.array([_similarity_cues(cache["request"][i], embed(list(rows[i])))
                                   for i in range(n)], dtype=np.float32).reshape(n, TOOL_CUES))
        elif block == "history":
            parts.append(np.array([_history_cues(cache["request"][i], cache["agent"][i], histories[i], embed)
                                   for i in range(n)], dtype=np.float32).reshape(n, HISTORY_CUES))
        else:  # types
            from interventions.error_map import load_error_map

            emap = load_error_map()
            prototypes = embed([emap.error_types[t].description for t in emap.labels])
            parts.append((cache["request"] @ prototypes.T).astype(np.float32))
    return np.concatenate(parts, axis=1)


def _history_cues(request: np.ndarray, agent: np.ndarray, history: History, embed: Callable[[list[str]], np.ndarray]) -> list[float]:
    """Cosines of the request to the last agent turn and to the closest earlier user turn, and whether there is one."""
    earlier = [request_part(t) or t for r, t in history if r == "user" and t.strip()]
    if not request.any():
        return [0.0] * HISTORY_CUES
    best = float((embed(earlier) @ request).max()) if earlier else 0.0
    return [float(agent @ request), best, 1.0 if earlier else 0.0]


def gated(dialogue: np.ndarray, labels: Sequence[str], gate: np.ndarray, gate_labels: Sequence[str]) -> np.ndarray:
    """Label probabilities (in labels' order) of the gated rule: a turn's error probability is the
    geometric mean of the dialogue classifier's and the card gate's, so a turn the agent's card
    finds ordinary stays quiet however error-like its words; the error type is the likeliest under
    both (their error distributions multiplied)."""
    import numpy as np

    column = {lab: k for k, lab in enumerate(gate_labels)}
    errors = [k for k, lab in enumerate(labels) if lab != NO_ERROR]
    p_dialogue = dialogue[:, errors].sum(axis=1)
    p_gate = 1.0 - gate[:, column[NO_ERROR]]
    p_error = np.sqrt(np.clip(p_dialogue, 0, 1) * np.clip(p_gate, 0, 1))
    mix = np.stack([dialogue[:, k] * gate[:, column[labels[k]]] if labels[k] in column else dialogue[:, k] * 0
                    for k in errors], axis=1)
    mix = mix / np.maximum(mix.sum(axis=1, keepdims=True), 1e-12)
    out = np.zeros_like(dialogue)
    out[:, labels.index(NO_ERROR)] = 1.0 - p_error
    out[:, errors] = mix * p_error[:, None]
    return out


def decide(p_error: float, has_request: bool, threshold: float) -> bool:
    """The activation rule: a request is left in the turn and its error probability reaches threshold."""
    return has_request and p_error >= threshold


def dialogue_history(ctx: InterventionContext) -> tuple[str, list[tuple[str, str]]]:
    """The latest user turn and the user/assistant text turns before it ("" when the dialogue does not end with a user turn)."""
    dialogue = ctx.dialogue
    if not dialogue or dialogue[-1].role != "user":
        return "", []
    history: list[tuple[str, str]] = [(m.role, m.text) for m in dialogue[:-1] if m.role in ("user", "assistant") and m.text.strip()]
    return dialogue[-1].text, history


class OfflineDetector:
    """Classifies the latest user turn, in its context, as "none" or an error type."""

    name = "offline"

    def __init__(self, path: str | Path | None = None, threshold: float | None = None,
                 card_gate: str | Path | None | bool = True) -> None:
        """path: a classifier .npz (default: the shipped one); threshold: error probability needed to
        activate (None: the threshold chosen on validation when the detector was trained); card_gate:
        the card gate that weighs each turn against the agent's card (True: the shipped one with the
        shipped classifier, none with another; a path: that gate; False: none)."""
        if threshold is not None and not 0.0 < threshold <= 1.0:
            raise ValueError(f"threshold must be in (0, 1], got {threshold}")
        self.path = Path(path) if path is not None else DEFAULT_DETECTOR_PATH
        self._threshold = threshold
        self._classifier: TurnClassifier | TwoStageClassifier | PairEncoder | None = None
        # The shipped gate's threshold was chosen with the shipped dialogue classifier; another
        # classifier runs alone unless a gate is named for it.
        shipped = path is None or Path(path).resolve() == DEFAULT_DETECTOR_PATH
        self.gate_path = (DEFAULT_GATE_PATH if shipped else None) if card_gate is True else Path(card_gate) if card_gate else None
        self._gate: TurnClassifier | None = None
        self._calibrated: dict[str, float | None] = {}
        self._digest: str | None = None

    @property
    def digest(self) -> str:
        """A digest of the detector's files, which a calibration records."""
        if self._digest is None:
            from interventions.calibration import detector_digest

            self._digest = detector_digest([self.path, self.gate_path])
        return self._digest

    def threshold_for(self, card: CapabilityCard | None) -> float:
        """The threshold for an agent: the one given, else the calibration saved for its card and
        this detector (`rein calibrate`; bundled for the tau2 agents), else the default."""
        if self._threshold is not None or card is None:
            return self.threshold
        if card.key not in self._calibrated:
            from interventions.calibration import find_calibration

            found = find_calibration(card.key, self.digest)
            self._calibrated[card.key] = found.threshold if found is not None else None
        return self._calibrated[card.key] or self.threshold

    @property
    def threshold(self) -> float:
        """The activation threshold in use: the given one, else the card gate's (chosen on validation
        agents for the gated rule), else the dialogue classifier's."""
        if self._threshold is not None:
            return self._threshold
        if self.gate is not None:
            return float(self.gate.meta.get("threshold", 0.5))
        return float(self.classifier.meta.get("threshold", 0.5))

    @property
    def gate(self) -> TurnClassifier | None:
        """The card gate, loaded on first use (None when the detector runs without one)."""
        if self._gate is None and self.gate_path is not None:
            from agent.errors import UserFacingError
            from interventions.classifier import TurnClassifier

            if not self.gate_path.exists():
                raise UserFacingError(f"card gate file {self.gate_path} is missing; rebuild it with "
                                      "`python -m research.rein.train` from a checkout")
            gate = TurnClassifier.load(self.gate_path)
            if gate.meta.get("inputs") != CARD_INPUTS or gate.labels[0] != NO_ERROR:
                raise UserFacingError(f"{self.gate_path} is not a card gate (inputs {CARD_INPUTS})")
            self._gate = gate
        return self._gate

    @property
    def classifier(self) -> TurnClassifier | TwoStageClassifier | PairEncoder:
        """The classifier (linear heads on frozen features, one or two-stage, or a fine-tuned pair encoder), loaded on first use."""
        if self._classifier is None:
            from agent.errors import UserFacingError
            from agent.extras import needs_extra

            with needs_extra("local", "the offline ReIn detector"):
                from interventions.classifier import (
                    TWO_STAGE_FORMAT,
                    TurnClassifier,
                    TwoStageClassifier,
                    file_format,
                )
                from interventions.pair_encoder import FORMAT as PAIR_FORMAT
                from interventions.pair_encoder import PairEncoder

            if not self.path.exists():
                raise UserFacingError(
                    f"offline detector file {self.path} is missing; rebuild it with "
                    "`python -m interventions.train_detector`"
                )
            fmt = file_format(self.path)
            loaded: TurnClassifier | TwoStageClassifier | PairEncoder
            if fmt == PAIR_FORMAT:
                loaded = PairEncoder.load(self.path)
            elif fmt == TWO_STAGE_FORMAT:
                loaded = TwoStageClassifier.load(self.path)
            else:
                loaded = TurnClassifier.load(self.path)
            self._classifier = loaded
            if NO_ERROR not in loaded.labels:
                raise UserFacingError(f"{self.path}: classifier has no {NO_ERROR!r} label")
        return self._classifier

    @property
    def feature_blocks(self) -> list[str]:
        """The feature blocks the classifier was trained on."""
        return list(self.classifier.meta.get("features", FEATURE_BLOCKS))

    def classify_turns(self, texts: Sequence[str], histories: Sequence[History], labels: Sequence[str] | None = None,
                       tools: Sequence[Sequence[dict[str, Any]]] | None = None,
                       cards: Sequence[CapabilityCard] | None = None) -> list[Detection]:
        """Detections for user turns, each with the turns before it; labels limits the error types reported;
        tools: the agent's tools (OpenAI schemas) at each turn, for a classifier that compares requests with
        them; cards: each turn's agent card, for a card-aware detector (built from tools when not given)."""
        from interventions.classifier import TurnClassifier, TwoStageClassifier

        clf = self.classifier
        if isinstance(clf, TurnClassifier | TwoStageClassifier):
            described = [tool_texts(t) for t in tools] if tools is not None else None
            probs = clf.predict_proba(turn_features(texts, histories, self.feature_blocks, described))
        else:
            probs = clf.predict_proba(texts, histories)
        if self.gate is not None:
            if cards is None:
                cards = [build_card(t) for t in tools] if tools is not None else [build_card([])] * len(texts)
            weighed = self.gate.predict_proba(card_features(texts, histories, cards))
            probs = gated(probs, clf.labels, weighed, self.gate.labels)
        elif cards is None and tools is not None:
            cards = [build_card(t) for t in tools]
        allowed = [i for i, lab in enumerate(clf.labels) if lab != NO_ERROR and (labels is None or lab in labels)]
        out = []
        for k, (text, row) in enumerate(zip(texts, probs, strict=True)):
            threshold = self.threshold_for(cards[k] if cards is not None else None)
            scores = {lab: round(float(p), 4) for lab, p in zip(clf.labels, row, strict=True)}
            if not allowed:
                out.append(Detection(NO_ERROR, 1.0, detector=self.name, scores=scores))
                continue
            best = max(allowed, key=lambda i: row[i])
            # Activation asks "is anything wrong" (all error mass together); the type is the likeliest one.
            p_error = float(sum(row[i] for i in allowed))
            if decide(p_error, bool(request_part(text)), threshold):
                out.append(Detection(clf.labels[best], round(p_error, 4), detector=self.name, scores=scores))
            else:
                out.append(Detection(NO_ERROR, round(1.0 - p_error, 4), detector=self.name, scores=scores))
        return out

    def classify(self, user_turns: Sequence[str], agent_turns: Sequence[str] | None = None, labels: Sequence[str] | None = None,
                 card: CapabilityCard | None = None) -> list[Detection]:
        """Detections for user turns given only the agent turn before each ("" or None: none), all for
        one agent's card (None: an agent with no tools and no system prompt)."""
        agents = list(agent_turns) if agent_turns is not None else [""] * len(user_turns)
        histories = [[("assistant", a)] if a.strip() else [] for a in agents]
        return self.classify_turns(user_turns, histories, labels, cards=[card or build_card([])] * len(user_turns))

    async def detect(self, ctx: InterventionContext, labels: list[str]) -> Detection:
        text, history = dialogue_history(ctx)
        if not text.strip():
            return Detection(NO_ERROR, 1.0, detector=self.name)
        # Embedding is CPU-bound; keep the event loop free for other threads of the same process.
        card = build_card(ctx.tools, ctx.system_prompt)
        found = await asyncio.to_thread(self.classify_turns, [text], [history], labels, [ctx.tools], [card])
        return found[0]

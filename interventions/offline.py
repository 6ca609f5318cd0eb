"""The offline inception module: no LLM, a small classifier over MiniLM features of (context, turn).

Features, in the order the classifier's meta lists them (FEATURE_BLOCKS):
- request: the MiniLM embedding of the user turn's request part, i.e. the turn without the
  sentences that only greet, identify the user or thank (zeros when nothing is left);
- agent: the embedding of the last agent turn before it (zeros when there is none);
- pair: their elementwise product, so a linear head can weigh the turn against its context;
- surface: four cues of the request part that embeddings blur (an explicit identifier, reference
  words like "it"/"that one", negations and buts, length);
- context: where the turn sits (a request is left, first user turn, the agent asked a question,
  user turns so far).
A block "user" (the embedding of the whole turn) is kept for comparison with the older detector.

A turn with no request part (identity-only, greeting-only, thanks-only) carries no request that
could be ambiguous or unsupported, so it is never flagged, whatever the classifier says.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from agent.plugin_api import InterventionContext
from interventions.detection import Detection
from interventions.error_map import NO_ERROR

if TYPE_CHECKING:
    import numpy as np

    from interventions.classifier import TurnClassifier
    from interventions.pair_encoder import PairEncoder

DEFAULT_DETECTOR_PATH = Path(__file__).resolve().parent / "data" / "detector.npz"
"""The trained detector shipped with rein (rebuild: python -m interventions.train_detector)."""

FEATURE_BLOCKS = ("request", "agent", "pair", "surface", "context")
"""Feature blocks of the shipped detector, in row order."""
KNOWN_BLOCKS = (*FEATURE_BLOCKS, "user")
"""Every block a classifier can be trained on."""

History = Sequence[tuple[str, str]]
"""(role, text) of the turns before a user turn: "user" and "assistant" turns."""

_IDENTIFIER = re.compile(
    r"#W\d{5,}|\b(?=[A-Z0-9]*\d)[A-Z0-9]{6}\b|\b[A-Z]{3}\d{3}\b|\S+@\S+\.\w+|\b[a-z]+_[a-z]+_\d{3,}\b|\b\d{4,}\b"
)
_REFERENCE = re.compile(r"\b(it|that|those|this|them|one|thing|things|stuff|same|other|usual|before|earlier)\b", re.I)
_NEGATION = re.compile(r"\b(not|don't|dont|never|no|without|but|neither|keep|isn't|aren't|doesn't|won't)\b", re.I)
_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")
# Words that greet, identify or thank; a sentence made only of them (plus names, ids, numbers,
# emails and punctuation) has no request in it.
_COURTESY = frozenset(
    ["hi", "hello", "hey", "there", "good", "morning", "afternoon", "evening", "day", "i", "i'm", "im", "am", "my", "name's", "name", "is", "it's", "its", "this", "here", "zip", "code", "postal", "user", "id", "email", "address", "and", "the", "a", "of", "me", "number", "account", "details", "under", "it", "thanks", "thank", "you", "so", "much", "please", "ok", "okay", "sure", "from", "user's", "userid", "profile", "yes", "how", "are", "anyone", "doing", "today", "hope", "well"]
)


def surface_cues(text: str) -> list[float]:
    """Four cues in [0, 1]: has an explicit identifier, reference words, negations, length."""
    return [
        1.0 if _IDENTIFIER.search(text) else 0.0,
        min(len(_REFERENCE.findall(text)), 3) / 3,
        min(len(_NEGATION.findall(text)), 3) / 3,
        min(len(text), 300) / 300,
    ]


def _is_courtesy(sentence: str) -> bool:
    """Only greeting, identity or thanks: every word is a courtesy word, a name, an id, a number or an email."""
    tokens = [t.strip(".,!?:;()[]\"'") for t in sentence.split()]
    tokens = [t for t in tokens if t]
    for k, tok in enumerate(tokens):
        if tok.lower().replace("’", "'") in _COURTESY:
            continue
        if not tok[0].isalpha() or any(c.isdigit() or c in "_@#" for c in tok):
            continue  # ids, zip codes, emails, emoticons
        # A capitalised word is a name unless it opens the sentence alone ("Cancel." is a request).
        if tok[0].isupper() and (k > 0 or (len(tokens) > 1 and tokens[1][:1].isupper())):
            continue
        return False
    return True


def request_part(text: str) -> str:
    """The turn without its sentences and comma-separated clauses that only greet, identify or thank."""
    kept = []
    for sentence in _SENTENCE.split(text.strip()):
        if not sentence.strip() or _is_courtesy(sentence):
            continue
        # "Hi, I'm Mei Kovacs, zip code 28236, I need ..." keeps only the clauses after the identity.
        clauses = sentence.split(", ")
        while len(clauses) > 1 and _is_courtesy(clauses[0]):
            clauses = clauses[1:]
        kept.append(", ".join(clauses))
    return " ".join(kept).strip()


def _last_agent(history: History) -> str:
    return next((t for r, t in reversed(history) if r == "assistant" and t.strip()), "")


def context_cues(text: str, history: History) -> list[float]:
    """Four cues in [0, 1]: a request is left, first user turn, the agent asked a question, user turns so far."""
    users = sum(1 for r, _ in history if r == "user")
    return [
        1.0 if request_part(text) else 0.0,
        1.0 if users == 0 else 0.0,
        1.0 if _last_agent(history).rstrip().endswith("?") else 0.0,
        min(users, 3) / 3,
    ]


def turn_features(texts: Sequence[str], histories: Sequence[History], blocks: Sequence[str] = FEATURE_BLOCKS) -> np.ndarray:
    """Feature rows for user turns and the turns before each."""
    from agent.embeddings import EMBEDDING_DIM, embed_texts
    from agent.extras import needs_extra

    with needs_extra("local", "the offline ReIn detector"):
        import numpy as np

    unknown = [b for b in blocks if b not in KNOWN_BLOCKS]
    if unknown:
        raise ValueError(f"unknown feature blocks {unknown}; known: {KNOWN_BLOCKS}")
    if len(texts) != len(histories):
        raise ValueError("texts and histories differ in length")
    n = len(texts)

    def embed(items: list[str]) -> np.ndarray:
        out = np.zeros((n, EMBEDDING_DIM), dtype=np.float32)
        present = [i for i, t in enumerate(items) if t.strip()]
        if present:
            out[present] = embed_texts([items[i] for i in present])
        return out

    requests = [request_part(t) for t in texts]
    cache: dict[str, np.ndarray] = {}
    if {"request", "pair"} & set(blocks):
        cache["request"] = embed(requests)
    if {"agent", "pair"} & set(blocks):
        cache["agent"] = embed([_last_agent(h) for h in histories])
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
        else:
            parts.append(np.array([context_cues(t, h) for t, h in zip(texts, histories, strict=True)], dtype=np.float32).reshape(n, 4))
    return np.concatenate(parts, axis=1)


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

    def __init__(self, path: str | Path | None = None, threshold: float | None = None) -> None:
        """path: a classifier .npz (default: the shipped one); threshold: error probability needed to
        activate (None: the threshold chosen on validation when the classifier was trained)."""
        if threshold is not None and not 0.0 < threshold <= 1.0:
            raise ValueError(f"threshold must be in (0, 1], got {threshold}")
        self.path = Path(path) if path is not None else DEFAULT_DETECTOR_PATH
        self._threshold = threshold
        self._classifier: TurnClassifier | PairEncoder | None = None

    @property
    def threshold(self) -> float:
        """The activation threshold in use."""
        if self._threshold is not None:
            return self._threshold
        return float(self.classifier.meta.get("threshold", 0.5))

    @property
    def classifier(self) -> TurnClassifier | PairEncoder:
        """The classifier (a linear head on frozen features, or a fine-tuned pair encoder), loaded on first use."""
        if self._classifier is None:
            from agent.errors import UserFacingError
            from agent.extras import needs_extra

            with needs_extra("local", "the offline ReIn detector"):
                from interventions.classifier import TurnClassifier
                from interventions.pair_encoder import PairEncoder, is_pair_encoder

            if not self.path.exists():
                raise UserFacingError(
                    f"offline detector file {self.path} is missing; rebuild it with "
                    "`python -m interventions.train_detector`"
                )
            self._classifier = PairEncoder.load(self.path) if is_pair_encoder(self.path) else TurnClassifier.load(self.path)
            if NO_ERROR not in self._classifier.labels:
                raise UserFacingError(f"{self.path}: classifier has no {NO_ERROR!r} label")
        return self._classifier

    @property
    def feature_blocks(self) -> list[str]:
        """The feature blocks the classifier was trained on."""
        return list(self.classifier.meta.get("features", FEATURE_BLOCKS))

    def classify_turns(self, texts: Sequence[str], histories: Sequence[History], labels: Sequence[str] | None = None) -> list[Detection]:
        """Detections for user turns, each with the turns before it; labels limits the error types reported."""
        from interventions.classifier import TurnClassifier

        clf = self.classifier
        threshold = self.threshold
        if isinstance(clf, TurnClassifier):
            probs = clf.predict_proba(turn_features(texts, histories, self.feature_blocks))
        else:
            probs = clf.predict_proba(texts, histories)
        allowed = [i for i, lab in enumerate(clf.labels) if lab != NO_ERROR and (labels is None or lab in labels)]
        out = []
        for text, row in zip(texts, probs, strict=True):
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

    def classify(self, user_turns: Sequence[str], agent_turns: Sequence[str] | None = None, labels: Sequence[str] | None = None) -> list[Detection]:
        """Detections for user turns given only the agent turn before each ("" or None: none)."""
        agents = list(agent_turns) if agent_turns is not None else [""] * len(user_turns)
        histories = [[("assistant", a)] if a.strip() else [] for a in agents]
        return self.classify_turns(user_turns, histories, labels)

    async def detect(self, ctx: InterventionContext, labels: list[str]) -> Detection:
        text, history = dialogue_history(ctx)
        if not text.strip():
            return Detection(NO_ERROR, 1.0, detector=self.name)
        # Embedding is CPU-bound; keep the event loop free for other threads of the same process.
        found = await asyncio.to_thread(self.classify_turns, [text], [history], labels)
        return found[0]

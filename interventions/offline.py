"""The offline inception module: no LLM, a small classifier over MiniLM embeddings.

Features, in the order the classifier's meta lists them: the embedding of the latest user turn;
the embedding of the agent turn just before it (zeros when there is none); and four surface cues
of the user turn that embeddings blur (an explicit identifier such as an order or reservation id,
reference words like "it"/"that one", negations and buts, length).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from agent.hooks import InterventionContext
from interventions.detection import Detection, latest_user_turn, previous_agent_turn
from interventions.error_map import NO_ERROR

if TYPE_CHECKING:
    import numpy as np

    from interventions.classifier import TurnClassifier

DEFAULT_DETECTOR_PATH = Path(__file__).resolve().parent / "data" / "detector.npz"
"""The trained detector shipped with rein (rebuild: python -m interventions.train_detector)."""

FEATURE_BLOCKS = ("user", "previous_agent", "cues")
"""Feature blocks a classifier can be trained on, in row order."""

_IDENTIFIER = re.compile(
    r"#W\d{5,}|\b(?=[A-Z0-9]*\d)[A-Z0-9]{6}\b|\b[A-Z]{3}\d{3}\b|\S+@\S+\.\w+|\b[a-z]+_[a-z]+_\d{3,}\b|\b\d{4,}\b"
)
_REFERENCE = re.compile(r"\b(it|that|those|this|them|one|thing|things|stuff|same|other|usual|before|earlier)\b", re.I)
_NEGATION = re.compile(r"\b(not|don't|dont|never|no|without|but|neither|keep|isn't|aren't|doesn't|won't)\b", re.I)


def surface_cues(text: str) -> list[float]:
    """Four cues in [0, 1]: has an explicit identifier, reference words, negations, length."""
    return [
        1.0 if _IDENTIFIER.search(text) else 0.0,
        min(len(_REFERENCE.findall(text)), 3) / 3,
        min(len(_NEGATION.findall(text)), 3) / 3,
        min(len(text), 300) / 300,
    ]


def turn_features(user_turns: Sequence[str], agent_turns: Sequence[str] | None, blocks: Sequence[str] = FEATURE_BLOCKS) -> np.ndarray:
    """Feature rows for the given blocks; agent_turns may be None (treated as no previous agent turn)."""
    import numpy as np

    from agent.embeddings import EMBEDDING_DIM, embed_texts

    unknown = [b for b in blocks if b not in FEATURE_BLOCKS]
    if unknown:
        raise ValueError(f"unknown feature blocks {unknown}; known: {FEATURE_BLOCKS}")
    parts = []
    for block in blocks:
        if block == "user":
            parts.append(embed_texts(list(user_turns)))
        elif block == "previous_agent":
            agents = np.zeros((len(user_turns), EMBEDDING_DIM), dtype=np.float32)
            present = [i for i, t in enumerate(agent_turns or []) if t.strip()]
            if present and agent_turns is not None:
                agents[present] = embed_texts([agent_turns[i] for i in present])
            parts.append(agents)
        else:
            parts.append(np.array([surface_cues(t) for t in user_turns], dtype=np.float32).reshape(len(user_turns), 4))
    return np.concatenate(parts, axis=1)


class OfflineDetector:
    """Classifies the latest user turn as "none" or an error type, with a shipped classifier."""

    name = "offline"

    def __init__(self, path: str | Path | None = None, threshold: float | None = None) -> None:
        """path: a classifier .npz (default: the shipped one); threshold: error probability needed to
        activate (None: the threshold calibrated when the classifier was trained)."""
        if threshold is not None and not 0.0 < threshold <= 1.0:
            raise ValueError(f"threshold must be in (0, 1], got {threshold}")
        self.path = Path(path) if path is not None else DEFAULT_DETECTOR_PATH
        self._threshold = threshold
        self._classifier: TurnClassifier | None = None

    @property
    def threshold(self) -> float:
        """The activation threshold in use."""
        if self._threshold is not None:
            return self._threshold
        return float(self.classifier.meta.get("threshold", 0.5))

    @property
    def classifier(self) -> TurnClassifier:
        """The classifier, loaded on first use."""
        if self._classifier is None:
            from agent.errors import UserFacingError
            from interventions.classifier import TurnClassifier

            if not self.path.exists():
                raise UserFacingError(
                    f"offline detector file {self.path} is missing; rebuild it with "
                    "`python -m interventions.train_detector`"
                )
            self._classifier = TurnClassifier.load(self.path)
            if NO_ERROR not in self._classifier.labels:
                raise UserFacingError(f"{self.path}: classifier has no {NO_ERROR!r} label")
        return self._classifier

    @property
    def feature_blocks(self) -> list[str]:
        """The feature blocks the classifier was trained on."""
        return list(self.classifier.meta.get("features", FEATURE_BLOCKS))

    def classify(self, user_turns: Sequence[str], agent_turns: Sequence[str] | None = None, labels: Sequence[str] | None = None) -> list[Detection]:
        """Detections for a batch of turns; labels limits the error types that can be reported."""
        clf = self.classifier
        threshold = self.threshold
        probs = clf.predict_proba(turn_features(user_turns, agent_turns, self.feature_blocks))
        allowed = [i for i, lab in enumerate(clf.labels) if lab != NO_ERROR and (labels is None or lab in labels)]
        out = []
        for row in probs:
            scores = {lab: round(float(p), 4) for lab, p in zip(clf.labels, row, strict=True)}
            if not allowed:
                out.append(Detection(NO_ERROR, 1.0, detector=self.name, scores=scores))
                continue
            best = max(allowed, key=lambda i: row[i])
            # Activation asks "is anything wrong" (all error mass together); the type is the likeliest one.
            p_error = float(sum(row[i] for i in allowed))
            if p_error >= threshold:
                out.append(Detection(clf.labels[best], round(p_error, 4), detector=self.name, scores=scores))
            else:
                out.append(Detection(NO_ERROR, round(1.0 - p_error, 4), detector=self.name, scores=scores))
        return out

    async def detect(self, ctx: InterventionContext, labels: list[str]) -> Detection:
        user = latest_user_turn(ctx.dialogue)
        if not user.strip():
            return Detection(NO_ERROR, 1.0, detector=self.name)
        agent = previous_agent_turn(ctx.dialogue)
        # Embedding is CPU-bound; keep the event loop free for other threads of the same process.
        found = await asyncio.to_thread(self.classify, [user], [agent], labels)
        return found[0]

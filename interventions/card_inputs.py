"""What the card gate reads of a user turn: cues that say how the request sits against the agent's card.

Every cue is relative to the agent, never the request's own words, so the gate carries to agents
and domains it was not trained on (a classifier over raw request embeddings learns its training
domains instead: 0.59 AUROC on unseen agents, research/rein/results/):

- surface and context cues of the turn (turn_text): an identifier, reference words, negations,
  length; a request is left, first user turn, the agent asked a question, user turns so far;
- card cues: the cosine of the request to the closest and second tools and to the purpose, the
  agent's scope, whether it has tools, whether a number breaks the closest tool's limits;
- dialogue cues: the cosine to each error type's description and to the last agent turn, how many
  distinct items the last agent turn names and the request names;
- enum cues: whether the request names a value some tool's enum accepts, whether the closest tool
  has enums, and whether it names one of them; the closest tool's lead over the mean; tool count.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

from interventions.card import CapabilityCard, numeric_violation
from interventions.turn_text import (
    History,
    context_cues,
    last_agent_turn,
    request_part,
    surface_cues,
)

if TYPE_CHECKING:
    import numpy as np

INPUTS = "card-cues/1"
"""The feature layout of a card gate (its meta["inputs"])."""
WIDTH = 28
"""Columns of a feature row."""
_ITEM = re.compile(r"#?\b(?=[A-Za-z0-9_-]*\d)[A-Za-z0-9][A-Za-z0-9_-]{2,}\b|'[^']{2,40}'|\"[^\"]{2,40}\"")
_types: dict[str, np.ndarray] = {}


def card_encoding(card: CapabilityCard) -> tuple[np.ndarray, np.ndarray]:
    """(tool embeddings, purpose embedding) of a card, computed once and kept in the card's cache."""
    import numpy as np

    from agent.embeddings import EMBEDDING_DIM, embed_texts

    found = card.cache.get(INPUTS)
    if found is None:
        texts = [t.words() for t in card.tools]
        tools = embed_texts(texts) if texts else np.zeros((0, EMBEDDING_DIM), dtype=np.float32)
        purpose = embed_texts([card.purpose])[0] if card.purpose else np.zeros(EMBEDDING_DIM, dtype=np.float32)
        found = card.cache[INPUTS] = (tools, purpose)
    return found


def _type_prototypes() -> np.ndarray:
    """Embeddings of the shipped error map's type descriptions, in its order."""
    if "map" not in _types:
        from agent.embeddings import embed_texts
        from interventions.error_map import load_error_map

        emap = load_error_map()
        _types["map"] = embed_texts([emap.error_types[t].description for t in emap.labels])
    return _types["map"]


def card_features(texts: Sequence[str], histories: Sequence[History], cards: Sequence[CapabilityCard]) -> np.ndarray:
    """The gate's feature rows (WIDTH columns) for user turns, each with the turns before it and its agent's card."""
    import numpy as np

    from agent.embeddings import embed_texts

    requests = [request_part(t) or t for t in texts]
    agents = [last_agent_turn(h) for h in histories]
    embedded = embed_texts(requests)
    said = embed_texts([a or " " for a in agents])
    prototypes = _type_prototypes()
    rows = []
    for k, (text, history, card) in enumerate(zip(texts, histories, cards, strict=True)):
        tools, purpose = card_encoding(card)
        sims = tools @ embedded[k] if len(tools) else np.zeros(0, dtype=np.float32)
        order = np.argsort(-sims) if len(sims) else np.zeros(0, dtype=np.int64)
        best = float(sims[order[0]]) if len(sims) else 0.0
        second = float(sims[order[1]]) if len(sims) > 1 else best
        closest = card.tools[int(order[0])] if len(sims) else None
        low = requests[k].lower().replace("_", " ")
        named = [any(_names(v, low) for v in p.enum) for t in card.tools for p in t.parameters if p.enum]
        closest_enums = [p for p in (closest.parameters if closest else ()) if p.enum]
        rows.append(
            surface_cues(request_part(text)) + context_cues(text, history)
            + [best, second, float(purpose @ embedded[k]), 1.0 if card.scope == "general" else 0.0,
               1.0 if card.tools else 0.0,
               1.0 if closest is not None and numeric_violation(card, closest.name, requests[k]) else 0.0]
            + [float(x) for x in prototypes @ embedded[k]]
            + [float(said[k] @ embedded[k]) if agents[k] else 0.0,
               min(len(set(_ITEM.findall(agents[k]))), 4) / 4, min(len(set(_ITEM.findall(requests[k]))), 3) / 3,
               1.0 if any(named) else 0.0, 1.0 if closest_enums else 0.0,
               1.0 if any(_names(v, low) for p in closest_enums for v in p.enum) else 0.0,
               float(best - sims.mean()) if len(sims) else 0.0, min(len(card.tools), 20) / 20]
        )
    out = np.array(rows, dtype=np.float32).reshape(len(rows), -1)
    if len(rows) and out.shape[1] != WIDTH:
        raise ValueError(f"card features have {out.shape[1]} columns, expected {WIDTH} (an error map with other types?)")
    return out


def _names(value: str, text: str) -> bool:
    """Whether text names an enum value (as a whole word, underscores read as spaces)."""
    return re.search(r"\b" + re.escape(str(value).lower().replace("_", " ")) + r"\b", text) is not None

"""What the card-aware detector reads of a user turn: the request, and beside it the agent's card.

The cross-encoder reads two segments: the turn's request part, and a context made of the last agent
turn, the agent's stated purpose and the card's tools closest to the request (rendered with their
enums and limits), so attention runs between what the user asks and what this agent can do. Cues
that embeddings blur ride along: the offline module's eight surface and context cues, and six card
cues (how close the request is to the best and second tools and to the purpose, the agent's scope,
whether it has tools, and whether a number in the request breaks the closest tool's limits).
"""

from __future__ import annotations

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

INPUTS = "card/1"
"""The inputs format of a card-aware pair encoder (PairEncoder.meta["inputs"])."""
CARD_CUES = 6
TOOLS_SHOWN = 3
MAX_TOKENS = 160
"""Tokens per (request, context) pair: enough for the request, the agent turn, the purpose and two
or three tools, and short enough for a 30 ms turn on two cores (the context's tail is cut first)."""
_AGENT_CHARS = 200
_PURPOSE_CHARS = 150
_TOOL_CHARS = 120


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


def card_inputs(texts: Sequence[str], histories: Sequence[History], cards: Sequence[CapabilityCard]
                ) -> tuple[list[str], list[str], np.ndarray]:
    """(requests, contexts, cue rows) of user turns, each with the turns before it and its agent's card."""
    import numpy as np

    from agent.embeddings import embed_texts

    requests = [request_part(t) or t for t in texts]
    embedded = embed_texts(requests)
    contexts, cues = [], []
    for k, (text, history, card) in enumerate(zip(texts, histories, cards, strict=True)):
        tools, purpose = card_encoding(card)
        sims = tools @ embedded[k] if len(tools) else np.zeros(0, dtype=np.float32)
        order = np.argsort(-sims)[:TOOLS_SHOWN] if len(sims) else []
        shown = [card.tools[i].render()[:_TOOL_CHARS] for i in order]
        agent = last_agent_turn(history)
        contexts.append(
            f"agent said: {agent[:_AGENT_CHARS] or '(nothing yet)'} | agent is for: "
            f"{card.purpose[:_PURPOSE_CHARS] or '(anything)'} | tools: {'; '.join(shown) or '(none)'}"
        )
        best = float(sims[order[0]]) if len(sims) else 0.0
        second = float(sims[order[1]]) if len(sims) > 1 else best
        violation = bool(len(sims)) and numeric_violation(card, card.tools[order[0]].name, requests[k])
        cues.append(
            surface_cues(request_part(text)) + context_cues(text, history)
            + [best, second, float(purpose @ embedded[k]), 1.0 if card.scope == "general" else 0.0,
               1.0 if card.tools else 0.0, 1.0 if violation else 0.0]
        )
    return requests, contexts, np.array(cues, dtype=np.float32).reshape(len(requests), 8 + CARD_CUES)

"""The text of a user turn as the offline detectors read it: its request part and its cues.

A turn's request part is the turn without the sentences that only greet, identify the user or
thank; the cues are what embeddings blur (an explicit identifier, reference words, negations,
length) and where the turn sits in the dialogue.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

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


def last_agent_turn(history: History) -> str:
    """The text of the last non-empty agent turn in history ("" when there is none)."""
    return next((t for r, t in reversed(history) if r == "assistant" and t.strip()), "")


def context_cues(text: str, history: History) -> list[float]:
    """Four cues in [0, 1]: a request is left, first user turn, the agent asked a question, user turns so far."""
    users = sum(1 for r, _ in history if r == "user")
    return [
        1.0 if request_part(text) else 0.0,
        1.0 if users == 0 else 0.0,
        1.0 if last_agent_turn(history).rstrip().endswith("?") else 0.0,
        min(users, 3) / 3,
    ]

"""An offline triple extractor that needs no model: capitalised spans, dates and numbers, with
pattern relations between neighbouring mentions in a sentence.

What it does, per passage:
1. Split into sentences (end punctuation followed by a space and a capital, digit or quote).
2. Entities are (a) runs of capitalised words, allowing lower-case connectors inside
   ("University of Copenhagen", "Battle of the Somme"), with a sentence-initial function word
   dropped ("The", "In", "He" ...); (b) dates ("January 1960", "3 May 1999") and four-digit years;
   (c) other numbers with their unit word ("1,200 people"); (d) double-quoted titles. The
   passage title is always an entity.
3. Relations: for neighbouring mentions in a sentence, the words between them become the
   predicate when they are 1–8 words and contain a lower-case content word ("published by");
   otherwise the pair gets `co-occurs with`. A sentence that opens with a pronoun or "The <noun>"
   (an anaphor of the passage topic) also links the title entity to that sentence's first mention,
   with the words in between as predicate.

Its agreement with the gpt-3.5 OpenIE entities of MuSiQue-100 is measured by `entity_agreement`
(numbers in docs/retrieval.md).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from graphs.corpus import DocTriples, Passage, Triple
from graphs.text import normalize_entity

CO_OCCURS = "co-occurs with"

_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(])")
_MONTH = r"(?:January|February|March|April|May|June|July|August|September|October|November|December)"
_DATE = re.compile(
    rf"\b(?:\d{{1,2}} {_MONTH}(?:,? \d{{4}})?|{_MONTH}(?: \d{{1,2}})?(?:,? \d{{4}})|{_MONTH} \d{{1,2}})\b"
)
_YEAR = re.compile(r"\b(?:1[0-9]{3}|20[0-9]{2})s?\b")
_NUMBER = re.compile(r"\b\d[\d,]*(?:\.\d+)?(?:\s+(?:million|billion|thousand|percent|%))?(?:\s+[a-z]{3,})?")
_QUOTED = re.compile(r"\"([^\"]{2,80})\"|“([^”]{2,80})”")
_WORD = re.compile(r"[A-Za-zÀ-ÖØ-öø-ÿ0-9][\w'’\-.&]*")

_CONNECTORS = {"of", "the", "de", "la", "le", "du", "da", "del", "der", "van", "von", "di", "al", "y", "for", "and"}
# Capitalised only because they start a sentence (or are pronouns): never an entity on their own.
_FUNCTION_WORDS = set(
    ["a", "an", "the", "in", "on", "at", "of", "for", "from", "by", "with", "to", "as", "after", "before", "during", "since", "until", "while", "when", "where", "which", "who", "whom", "whose", "what", "why", "how", "this", "that", "these", "those", "there", "here", "it", "its", "he", "she", "his", "her", "hers", "they", "them", "their", "we", "our", "you", "your", "i", "my", "me", "is", "was", "were", "are", "be", "been", "being", "has", "have", "had", "do", "does", "did", "but", "or", "and", "nor", "so", "yet", "also", "however", "although", "though", "because", "if", "then", "than", "other", "another", "some", "many", "most", "more", "each", "every", "both", "all", "any", "no", "not", "one", "two", "three", "first", "second", "third", "later", "early", "its", "following", "according", "despite", "between", "among", "under", "over", "into", "through", "about", "around", "against", "along", "upon", "within", "without", "according", "born", "known", "often", "several", "such", "following", "today", "currently", "originally"]
)
_PREDICATE_STOP = {"the", "a", "an", "and", "of", "in", "on", "at", "to", "for", "by", "with", "as", "is", "was", "its", "his", "her", "their"}
_ANAPHOR = re.compile(r"^(?:he|she|it|they|his|her|its|their|the [a-z]+)\b", re.IGNORECASE)
_NUMBER_UNITS_SKIP = {"and", "the", "was", "were", "with", "from", "that", "which", "who"}


def split_sentences(text: str) -> list[str]:
    """Sentences of a passage."""
    return [s.strip() for s in _SENTENCE.split(text) if s.strip()]


def _capitalised_spans(sentence: str) -> list[tuple[int, int]]:
    words = [(m.start(), m.end(), m.group()) for m in _WORD.finditer(sentence)]
    spans: list[tuple[int, int]] = []
    i = 0
    while i < len(words):
        start, end, w = words[i]
        if not w[0].isupper() or (w.lower() in _FUNCTION_WORDS and (i == 0 or w.lower() in {"i"})):
            i += 1
            continue
        j = i
        last = i
        while j + 1 < len(words):
            nxt = words[j + 1][2]
            gap = sentence[words[j][1] : words[j + 1][0]]
            if gap.strip() not in ("", "-", "'s", "’s"):
                break
            if nxt[0].isupper():
                j += 1
                last = j
            elif nxt in _CONNECTORS and j + 2 < len(words) and words[j + 2][2][0].isupper():
                j += 1
            else:
                break
        span_start, span_end = words[i][0], words[last][1]
        text = sentence[span_start:span_end].rstrip(".")
        if text.lower() not in _FUNCTION_WORDS and len(text) > 1:
            spans.append((span_start, span_start + len(text)))
        i = last + 1
    return spans


def find_mentions(sentence: str, topic: str = "") -> list[tuple[int, int, str]]:
    """Entity mentions of one sentence as (start, end, surface), in order, without overlaps."""
    found: list[tuple[int, int]] = []
    if topic:
        for m in re.finditer(re.escape(topic), sentence):
            found.append((m.start(), m.end()))
    for m in _DATE.finditer(sentence):
        found.append((m.start(), m.end()))
    for m in _QUOTED.finditer(sentence):
        g = 1 if m.group(1) is not None else 2
        found.append((m.start(g), m.end(g)))
    found.extend(_capitalised_spans(sentence))
    for m in _YEAR.finditer(sentence):
        found.append((m.start(), m.end()))
    for m in _NUMBER.finditer(sentence):
        text = m.group().rstrip(",")
        words = text.split()
        if len(words) > 1 and words[-1] in _NUMBER_UNITS_SKIP:
            text = " ".join(words[:-1])
        if len(text.replace(",", "")) >= 2:
            found.append((m.start(), m.start() + len(text)))
    # Longest first, then keep those not overlapping an already kept mention.
    kept: list[tuple[int, int]] = []
    for s, e in sorted(found, key=lambda se: (-(se[1] - se[0]), se[0])):
        if all(e <= ks or s >= ke for ks, ke in kept):
            kept.append((s, e))
    return [(s, e, sentence[s:e].strip()) for s, e in sorted(kept) if sentence[s:e].strip()]


def _predicate(between: str) -> str | None:
    words = re.findall(r"[a-z][a-z'\-]*", between)
    if not 1 <= len(between.split()) <= 8 or not words:
        return None
    if all(w in _PREDICATE_STOP for w in words):
        return None
    return " ".join(between.strip(" ,;:()\"'").split()) or None


def extract_passage(passage: Passage) -> DocTriples:
    """Entities and pattern triples of one passage."""
    entities: dict[str, str] = {}
    triples: list[Triple] = []
    topic = passage.title.strip()
    if topic:
        entities[normalize_entity(topic)] = topic
    for sentence in split_sentences(passage.text):
        mentions = [m for m in find_mentions(sentence, topic) if normalize_entity(m[2])]
        for _, _, surface in mentions:
            entities.setdefault(normalize_entity(surface), surface)
        for (_, e1, s1), (b2, _, s2) in zip(mentions, mentions[1:], strict=False):
            if normalize_entity(s1) == normalize_entity(s2):
                continue
            pred = _predicate(sentence[e1:b2])
            triples.append(Triple(s1, pred or CO_OCCURS, s2))
        if topic and mentions and _ANAPHOR.match(sentence):
            first_start, _, first = mentions[0]
            if normalize_entity(first) != normalize_entity(topic):
                lead = _ANAPHOR.match(sentence)
                pred = _predicate(sentence[lead.end() if lead else 0 : first_start])
                triples.append(Triple(topic, pred or "related to", first))
    seen: set[tuple[str, str, str]] = set()
    unique = []
    for t in triples:
        key = (normalize_entity(t.subject), t.predicate.lower(), normalize_entity(t.object))
        if key not in seen:
            seen.add(key)
            unique.append(t)
    return DocTriples(entities=list(entities.values()), triples=unique)


def extract_offline(corpus: Sequence[Passage]) -> list[DocTriples]:
    """Run the offline extractor over a corpus."""
    return [extract_passage(p) for p in corpus]


def entity_agreement(predicted: Sequence[DocTriples], reference: Sequence[DocTriples]) -> dict[str, float]:
    """Micro entity precision/recall/F1 of `predicted` against `reference`, per passage.

    Reference entities are the passage's listed entities plus its triple arguments; strings are
    compared after `normalize_entity`. Also reports `pair_recall`: the share of reference
    subject–object pairs (unordered) that the prediction links with any predicate.
    """
    if len(predicted) != len(reference):
        raise ValueError("predicted and reference must cover the same passages")
    tp = n_pred = n_ref = 0
    pair_hit = pair_total = 0
    for pred, ref in zip(predicted, reference, strict=True):
        p = {normalize_entity(e) for e in pred.entities} - {""}
        r = {normalize_entity(e) for e in ref.entities} - {""}
        r |= {normalize_entity(x) for t in ref.triples for x in (t.subject, t.object)} - {""}
        tp += len(p & r)
        n_pred += len(p)
        n_ref += len(r)
        pred_pairs = {frozenset((normalize_entity(t.subject), normalize_entity(t.object))) for t in pred.triples}
        for t in ref.triples:
            pair_total += 1
            pair_hit += frozenset((normalize_entity(t.subject), normalize_entity(t.object))) in pred_pairs
    precision = tp / n_pred if n_pred else 0.0
    recall = tp / n_ref if n_ref else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {
        "precision": precision,
        "recall": recall,
        "f1": f1,
        "pair_recall": pair_hit / pair_total if pair_total else 0.0,
        "predicted_entities": float(n_pred),
        "reference_entities": float(n_ref),
    }

"""Hand-built query features that describe what a query needs, not how it is written.

Each feature counts a kind of content: quantities and arithmetic relations (reasoning), references
to private records and requested changes (agentic), relation chains between entities (multi-hop,
agentic), and time-sensitive facts (agentic). Length, punctuation and pronouns are left out on
purpose: in the routing data they only identify the source dataset.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

_NUMBER_WORDS = (
    "two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|fifteen|twenty|thirty|forty|fifty|"
    "hundred|thousand|dozen|half|twice|triple|double|quarter|third"
)
# Digits inside identifiers (#W4817420, 8JX2TD) are not quantities.
_QUANTITY = re.compile(
    rf"(?<![\w#])[$€£]?\d[\d,]*(?:\.\d+)?%?(?![A-Za-z0-9])|\b(?:{_NUMBER_WORDS})\b", re.I
)
_ARITH_CUES = re.compile(
    r"\b(?:how many|how much|how long|total|each|per|times|twice|half|percent|percentage|average|"
    r"more than|less than|fewer|left|remain\w*|altogether|combined|sum|difference|ratio|profit|"
    r"cost|costs|spend|spent|save|saves|earn\w*|pay|paid|rate|speed|split|share|every|minus|plus|"
    r"divided|multiplied|older than|younger than|taller than)\b",
    re.I,
)
_EXPRESSION = re.compile(r"\d\s*[-+*/×x÷^]\s*\d|\b(?:plus|minus|times|divided by|multiplied by)\b", re.I)
_RECORD_NOUNS = re.compile(
    r"\b(?:order|orders|reservation|reservations|booking|bookings|account|gift card|certificate|"
    r"membership|subscription|payment method|credit card|refund|baggage|bags?|itinerary|"
    r"user id|profile|address|tracking|shipment|delivery|invoice|balance|points|voucher|"
    r"passengers?|seats?|cabin|insurance|loyalty)\b",
    re.I,
)
_OWNED_RECORD = re.compile(
    r"\b(?:my|our|your|his|her|their)\s+(?:\w+\s+){0,2}?(?:order|orders|reservation|reservations|"
    r"booking|account|gift card|flight|flights|trip|package|items?|purchase|subscription|balance|"
    r"address|card|bag|suitcase|refund)\b",
    re.I,
)
_IDENTIFIER = re.compile(
    r"#\s?[A-Z]?\d{4,}|\b(?=[A-Z0-9]{6}\b)(?=[A-Z0-9]*\d)(?=[A-Z0-9]*[A-Z])[A-Z0-9]{6}\b|"
    r"\b[\w.+-]+@[\w-]+\.[\w.]+\b|\b\d{5}\b"
)
_ACTIONS = re.compile(
    r"\b(?:cancel\w*|modify\w*|change\w*|book(?:ed|ing)?|return(?:ed|ing)?|exchange\w*|refund\w*|"
    r"update\w*|upgrade\w*|downgrade\w*|transfer\w*|remove\w*|add(?:ed|ing)?|replace\w*|"
    r"rebook\w*|reschedul\w*|postpone\w*|check|track\w*|look up|find out)\b",
    re.I,
)
_RELATIONS = re.compile(
    r"\b(?:founder|founded|director|directed|author|written|performer|performed|creator|created|"
    r"spouse|wife|husband|sibling|brother|sister|father|mother|son|daughter|birthplace|born|"
    r"hometown|capital|headquarters|owner|owned|member|coach|manager|managed|singer|composer|"
    r"producer|produced|university|college|label|team|club|company|country|city|state|region|"
    r"county|province|continent|river|located|containing|contains|named after|successor|"
    r"predecessor|population|mayor|governor|president|leader|publisher|record label|band)\b",
    re.I,
)
_NESTING = re.compile(
    r"\b(?:of the|of a|of an|in the|where the|which the|that the|who the|whose)\b|'s\b", re.I
)
_RELATIVE = re.compile(r"\b(?:where|which|that|who|whose|containing|located)\b", re.I)
_TIME_SENSITIVE = re.compile(
    r"\b(?:today|today's|tonight|tomorrow|yesterday|current|currently|latest|now|right now|this "
    r"week|this month|this year|recent|recently|upcoming|pending|live|real-time|at the moment|"
    r"weather|forecast|stock|shares|exchange rate|closing|score|status)\b",
    re.I,
)
_ENTITY = re.compile(r"(?<![.!?]\s)(?<!^)\b[A-Z][a-zA-Z]+(?:\s+[A-Z][a-zA-Z]+)*")
_LOGIC = re.compile(
    r"\b(?:all|every|no|some|if|then|therefore|true|false|must|older|younger|taller|shorter|"
    r"before|after)\b",
    re.I,
)

FEATURE_NAMES: tuple[str, ...] = (
    "quantities",
    "several_quantities",
    "arithmetic_cues",
    "arithmetic_expression",
    "quantities_with_cues",
    "record_nouns",
    "owned_record",
    "identifiers",
    "actions",
    "actions_on_records",
    "relations",
    "nesting",
    "relation_chain",
    "time_sensitive",
    "entities",
    "logic_cues",
)
"""Names of the columns of `query_features`, in order."""


def _log_count(pattern: re.Pattern[str], text: str) -> float:
    return math.log1p(len(pattern.findall(text)))


def features_of(text: str) -> list[float]:
    """The feature vector of one query (see FEATURE_NAMES)."""
    quantities = len(_QUANTITY.findall(text))
    cues = len(_ARITH_CUES.findall(text))
    records = len(_RECORD_NOUNS.findall(text))
    actions = len(_ACTIONS.findall(text))
    relations = len(_RELATIONS.findall(text))
    nesting = len(_NESTING.findall(text))
    relative = len(_RELATIVE.findall(text))
    return [
        math.log1p(quantities),
        float(quantities >= 2),
        math.log1p(cues),
        float(bool(_EXPRESSION.search(text))),
        float(quantities >= 2 and cues >= 1),
        math.log1p(records),
        float(bool(_OWNED_RECORD.search(text))),
        _log_count(_IDENTIFIER, text),
        math.log1p(actions),
        float(actions >= 1 and records >= 1),
        math.log1p(relations),
        math.log1p(nesting),
        float(relations >= 2 and (nesting + relative) >= 2),
        _log_count(_TIME_SENSITIVE, text),
        _log_count(_ENTITY, text),
        _log_count(_LOGIC, text),
    ]


def query_features(texts: Sequence[str]) -> np.ndarray:
    """Feature rows (n, len(FEATURE_NAMES)) as float32."""
    import numpy as np

    return np.asarray([features_of(t) for t in texts], dtype=np.float32).reshape(len(texts), len(FEATURE_NAMES))


__all__ = ["FEATURE_NAMES", "features_of", "query_features"]

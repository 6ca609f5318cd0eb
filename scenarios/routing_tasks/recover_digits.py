"""Find the retrieval results a recorded run saw, when this machine's graph prints other last digits.

Rows recorded before the tool cassette existed (tool_cassette.py) replay only on a graph whose
`retrieve` prints exactly the scores the run saw. A graph built from MiniLM vectors computed on
another CPU ranks the same passages with scores that differ in the 6th decimal (and now and then
the rounded cosine in the 4th), so the call after the first retrieve misses the cassette. Its key is
a hash of the whole request, so the version of the tool result that the run saw can be confirmed
exactly: try the nearby digits, one hit at a time then in pairs and so on, and keep the version
whose request is in the cassette. A SHA-256 match is not a guess. The recovered result goes into
the tool cassette (only when the whole row then verifies), after which the row replays anywhere.

    python -m scenarios.routing_tasks.labeling --verify --recover --model NAME --out FILE \
        --cassettes DIR --graph DIR
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Iterator
from typing import Any

from agent.messages import ModelRequest, ModelResponse
from agent.models.cassette import request_key

STEPS = ((1, -1), (1, -1, 2, -2))
"""Changes tried in a score's 6th decimal: every hit by at most 1 first, then by at most 2."""
MAX_TRIES = 200_000
"""Versions tried per tool message and round before giving up (3^10 = 59,049 moves 10 hits by ±1)."""


def _near_4dp_boundary(score: float) -> bool:
    """Whether a change in the 6th decimal could move the cosine rounded to 4 decimals."""
    frac = score * 1e4 - math.floor(score * 1e4)
    return abs(frac - 0.5) < 0.03


def _hit_versions(hit: dict[str, Any], steps: tuple[int, ...]) -> list[dict[str, Any]]:
    """The hit with its score moved by each step (and its cosine too where that could move)."""
    score = hit.get("score")
    if not isinstance(score, float):
        return []
    out = []
    cosine = hit.get("provenance", {}).get("evidence", {}).get("cosine")
    for step in steps:
        moved = json.loads(json.dumps(hit))
        moved["score"] = round(score + step * 1e-6, 6)
        out.append(moved)
        if isinstance(cosine, float) and _near_4dp_boundary(score):
            for c_step in (1, -1):
                both = json.loads(json.dumps(moved))
                both["provenance"]["evidence"]["cosine"] = round(cosine + c_step * 1e-4, 4)
                out.append(both)
    return out


def versions(content: str) -> Iterator[str]:
    """Nearby versions of a retrieve result's text: fewest hits changed first."""
    try:
        hits = json.loads(content)
    except json.JSONDecodeError:
        return
    if not isinstance(hits, list) or not all(isinstance(h, dict) for h in hits):
        return
    for steps in STEPS:
        options = [_hit_versions(h, steps) for h in hits]
        tried = 0
        for changed in range(1, len(hits) + 1):
            for which in itertools.combinations(range(len(hits)), changed):
                if not all(options[i] for i in which):
                    continue
                for picks in itertools.product(*(options[i] for i in which)):
                    version = list(hits)
                    for i, pick in zip(which, picks, strict=True):
                        version[i] = pick
                    yield json.dumps(version, ensure_ascii=False)
                    tried += 1
                    if tried >= MAX_TRIES:
                        break
                if tried >= MAX_TRIES:
                    break
            if tried >= MAX_TRIES:
                break


class DigitRecovery:
    """Rewrites requests with the recovered tool texts found so far, and finds new ones on a miss."""

    def __init__(self) -> None:
        self.swaps: dict[str, str] = {}
        """This machine's text of a retrieve result -> the text the recorded run saw."""
        self.found = 0
        """Tool results recovered."""

    def rewrite(self, request: ModelRequest) -> ModelRequest:
        """The request with every tool text swapped for its recovered version."""
        if not any(m.role == "tool" and m.content in self.swaps for m in request.messages):
            return request
        messages = [m.model_copy(update={"content": self.swaps[m.content]})
                    if m.role == "tool" and isinstance(m.content, str) and m.content in self.swaps else m
                    for m in request.messages]
        return request.model_copy(update={"messages": messages})

    def search(self, request: ModelRequest, entries: dict[str, ModelResponse]) -> tuple[str, str, str] | None:
        """(key, this machine's text, recorded text) of a latest retrieve result whose nearby version
        makes a request the cassette holds, or None."""
        last = max((i for i, m in enumerate(request.messages) if m.role == "assistant"), default=-1)
        for i in range(last + 1, len(request.messages)):
            message = request.messages[i]
            if message.role != "tool" or message.name != "retrieve" or not isinstance(message.content, str):
                continue
            for text in versions(message.content):
                messages = list(request.messages)
                messages[i] = message.model_copy(update={"content": text})
                key = request_key(request.model_copy(update={"messages": messages}))
                if key in entries:
                    self.swaps[message.content] = text
                    self.found += 1
                    return key, message.content, text
        return None


__all__ = ["DigitRecovery", "versions"]

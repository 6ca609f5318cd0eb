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

import hashlib
import json
import math
from collections.abc import Container
from typing import Any

from agent.messages import ModelRequest, ModelResponse
from agent.models.cassette import request_blob, request_key

STEPS = ((1, -1), (1, -1, 2, -2))
"""Changes tried in a score's 6th decimal: every hit by at most 1 first, then by at most 2."""
MAX_TRIES = 20_000_000
"""Versions hashed per tool message and round before giving up: every version of a 10-hit result with
each score moved by at most 2 (5^10 = 9,765,625) fits, a minute or two on one core."""
_SLOT = "\u2063rein-recover-slot\u2063"
"""Stands in for the tool text while the rest of the request is serialised once."""


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


def _escaped(value: Any) -> bytes:
    """`value` as JSON text, as it appears inside the JSON string of a serialised request."""
    return json.dumps(json.dumps(value, ensure_ascii=False), ensure_ascii=False)[1:-1].encode("utf-8")


class _KeySearch:
    """Hashes versions of one tool message's hits the way `request_key` hashes the whole request,
    without serialising the request again: the bytes before and after the tool text are fixed, and
    the hits' own bytes are hashed incrementally, so versions sharing their first hits share that work."""

    def __init__(self, request: ModelRequest, index: int, hits: list[dict[str, Any]]) -> None:
        messages = list(request.messages)
        messages[index] = messages[index].model_copy(update={"content": _SLOT})
        before, slot, after = request_blob(request.model_copy(update={"messages": messages})).partition(
            _SLOT.encode("utf-8"))
        if not slot or _SLOT.encode("utf-8") in after:
            raise ValueError("the request's tool text could not be isolated")
        self.start = hashlib.sha256(before + b"[")
        self.end = b"]" + after
        self.hits = hits

    def find(self, keys: Container[str], steps: tuple[int, ...], budget: int) -> list[dict[str, Any]] | None:
        """The version (fewest hits changed first) whose request key is in `keys`, or None once no
        version is left or `budget` versions were hashed."""
        options = [[hit, *_hit_versions(hit, steps)] for hit in self.hits]
        encoded = [[(b", " if i else b"") + _escaped(v) for v in opts] for i, opts in enumerate(options)]
        picks = [0] * len(options)
        tried, found = 0, False

        def walk(i: int, state: Any, left: int) -> None:
            nonlocal tried, found
            if i == len(options):
                tried += 1
                leaf = state.copy()
                leaf.update(self.end)
                found = leaf.hexdigest() in keys
                return
            for j in range(len(options[i])):
                if (j == 0 and len(options) - i <= left) or (j > 0 and left == 0):
                    continue  # this hit must change (or must not) to change exactly `changed` hits
                picks[i] = j
                deeper = state.copy()
                deeper.update(encoded[i][j])
                walk(i + 1, deeper, left - (j > 0))
                if found or tried >= budget:
                    return

        for changed in range(1, len(options) + 1):
            walk(0, self.start, changed)
            if found:
                return [options[i][j] for i, j in enumerate(picks)]
            if tried >= budget:
                return None
        return None


def versions_found(request: ModelRequest, index: int, keys: Container[str]) -> str | None:
    """The nearby version of the retrieve result at `request.messages[index]` that makes a request
    whose key is in `keys`, or None. Every hit by at most 1 in its score's 6th decimal first, then by
    at most 2, fewest hits changed first, MAX_TRIES versions a round at most."""
    content = request.messages[index].content
    try:
        hits = json.loads(content) if isinstance(content, str) else None
    except json.JSONDecodeError:
        return None
    if not isinstance(hits, list) or not hits or not all(isinstance(h, dict) for h in hits):
        return None
    if json.dumps(hits, ensure_ascii=False) != content:
        return None  # not the retrieve tool's formatting: its versions could not be rebuilt byte for byte
    try:
        search = _KeySearch(request, index, hits)
    except ValueError:
        return None  # the slot text occurs elsewhere in the request: no safe split
    for steps in STEPS:
        found = search.find(keys, steps, MAX_TRIES)
        if found is not None:
            return json.dumps(found, ensure_ascii=False)
    return None


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
            text = versions_found(request, i, entries)
            if text is not None:
                messages = list(request.messages)
                messages[i] = message.model_copy(update={"content": text})
                self.swaps[message.content] = text
                self.found += 1
                return request_key(request.model_copy(update={"messages": messages})), message.content, text
        return None


__all__ = ["DigitRecovery", "versions_found"]

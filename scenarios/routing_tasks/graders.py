"""Automatic graders for routing tasks: numbers, texts with aliases, exact strings.

The answer graded is the agent's final text. Reasoning tags are dropped first, so a number that
appears only in the reasoning does not count. When the text marks its final answer, as
`\\boxed{…}` or `<answer>…</answer>` (small models do both unprompted), the last marked span is
what number and text graders read: a worked solution that ends "\\boxed{90} bags of 10" answers 90.
"""

from __future__ import annotations

import math
import re
import string

from scenarios.routing_tasks.task import Grader, RoutingTask

_NUMBER_RE = re.compile(r"-?\d[\d,]*(?:\.\d+)?|-?\.\d+")
_TAG_RE = re.compile(r"<reasoning>.*?(?:</reasoning>|$)|<classification>.*?</classification>", re.S | re.I)
_MARKED_RE = re.compile(r"\\boxed\{([^{}]*)\}|<(final[ _]?answer|answer)>(.*?)</\2>", re.S | re.I)
_ARTICLES = {"a", "an", "the"}
MAX_TEXT_WORDS = 40
"""A text answer longer than this is not graded correct: listing many candidates is not an answer."""


def final_text(answer: str) -> str:
    """The answer without reasoning or classification tags."""
    return _TAG_RE.sub(" ", answer or "").strip()


def marked_answer(text: str) -> str | None:
    """The last non-empty span the text marks as its final answer (`\\boxed{…}`, `<answer>…</answer>`
    or `<final answer>…</final answer>`), if it marks one."""
    spans = [(boxed or tagged).strip() for boxed, _, tagged in _MARKED_RE.findall(text)]
    spans = [s for s in spans if s]
    return spans[-1] if spans else None


def _graded_span(answer: str) -> str:
    text = final_text(answer)
    return marked_answer(text) or text


def numbers_in(text: str) -> list[float]:
    """The numbers written in a text, thousands separators and currency signs ignored."""
    out = []
    for match in _NUMBER_RE.findall(text):
        token = match.replace(",", "")
        if token.endswith("."):
            token = token[:-1]
        try:
            out.append(float(token))
        except ValueError:
            continue
    return out


def normalise(text: str) -> str:
    """Lower case, punctuation to spaces, articles dropped, single spaces."""
    table = str.maketrans({c: " " for c in string.punctuation})
    words = text.lower().translate(table).split()
    return " ".join(w for w in words if w not in _ARTICLES)


def grade_number(answer: str, expected: str) -> bool:
    """The first or the last number of the answer (of its marked span, if any) equals the expected value."""
    gold = float(expected.replace(",", ""))
    found = numbers_in(_graded_span(answer))
    if not found:
        return False
    return any(math.isclose(v, gold, rel_tol=1e-9, abs_tol=1e-6) for v in (found[0], found[-1]))


def grade_text(answer: str, expected: str, aliases: tuple[str, ...] = ()) -> bool:
    """One accepted spelling appears, as whole words, in a short answer (its marked span, if any)."""
    text = normalise(_graded_span(answer))
    if not text or len(text.split()) > MAX_TEXT_WORDS:
        return False
    padded = f" {text} "
    return any(f" {normalise(a)} " in padded for a in (expected, *aliases) if normalise(a))


def grade_exact(answer: str, expected: str, ignore_case: bool = False) -> bool:
    """The answer, trimmed of spaces, quotes, backticks and one final period, equals the expected
    text (in any letter case when ignore_case)."""
    text = final_text(answer).strip()
    if text.endswith(".") and not expected.endswith("."):
        text = text[:-1].rstrip()
    text = " ".join(text.strip("`\"'").split())
    expected = " ".join(expected.split())
    return text.casefold() == expected.casefold() if ignore_case else text == expected


def grade(grader: Grader | RoutingTask, answer: str) -> bool:
    """Whether an answer passes a task's grader."""
    g = grader.grader if isinstance(grader, RoutingTask) else grader
    if g.type == "number":
        return grade_number(answer, g.answer)
    if g.type == "text":
        return grade_text(answer, g.answer, g.aliases)
    if g.type == "exact":
        return grade_exact(answer, g.answer, g.ignore_case)
    raise ValueError(f"unknown grader type {g.type!r}")

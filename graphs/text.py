"""Small text helpers shared by the builders, the linker and BM25."""

from __future__ import annotations

import re
import unicodedata

_NON_WORD = re.compile(r"[^\w]+")
_TOKEN = re.compile(r"\w+")
_ARTICLE = re.compile(r"^(?:the|a|an) ")


def normalize_entity(text: str) -> str:
    """Entity key: NFKC, lower-case, punctuation to spaces, no leading article, collapsed spaces."""
    s = unicodedata.normalize("NFKC", text).lower()
    s = _NON_WORD.sub(" ", s).strip()
    s = _ARTICLE.sub("", s)
    return " ".join(s.split())


def normalize_predicate(text: str) -> str:
    """Relation text: lower-case with collapsed spaces and no surrounding punctuation."""
    s = unicodedata.normalize("NFKC", text).lower().strip(" \t\n.,;:!?\"'()[]")
    return " ".join(s.split())


def tokens(text: str) -> list[str]:
    """Lower-cased `\\w+` tokens (the BM25 tokenisation of the MuSiQue floor)."""
    return _TOKEN.findall(text.lower())

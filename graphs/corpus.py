"""Corpus, question and OpenIE files in the MuSiQue layout, read with clear errors for bad input."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from graphs.errors import GraphInputError


@dataclass(frozen=True)
class Passage:
    """One retrievable passage of a corpus."""

    title: str
    """The passage title (not unique in MuSiQue)."""
    text: str
    """The passage body."""

    @property
    def key(self) -> str:
        """`title + "\\n" + text`, the string that identifies a passage in MuSiQue evaluations."""
        return f"{self.title}\n{self.text}"


@dataclass(frozen=True)
class Triple:
    """A (subject, predicate, object) fact read from a passage."""

    subject: str
    """Subject phrase."""
    predicate: str
    """Relation phrase."""
    object: str
    """Object phrase."""


@dataclass
class DocTriples:
    """Extraction output for one passage: named entities and triples."""

    entities: list[str] = field(default_factory=list)
    """Entity strings found in the passage."""
    triples: list[Triple] = field(default_factory=list)
    """Facts found in the passage."""


@dataclass(frozen=True)
class Question:
    """A question with its gold supporting passages, as corpus indices."""

    id: str
    """Question id from the file (or its position)."""
    text: str
    """The question."""
    gold: tuple[int, ...]
    """Corpus indices of the supporting passages."""

    @property
    def fingerprint(self) -> str:
        """A stable hash of the normalised question text, used to record training questions."""
        return question_fingerprint(self.text)


def question_fingerprint(text: str) -> str:
    """sha1 of the lower-cased, whitespace-collapsed question text (16 hex digits)."""
    norm = " ".join(text.lower().split())
    return hashlib.sha1(norm.encode("utf-8")).hexdigest()[:16]


def _read_json(path: str | Path, what: str) -> Any:
    p = Path(path)
    if not p.is_file():
        raise GraphInputError(f"{what} file not found: {p}")
    try:
        with p.open(encoding="utf-8") as fh:
            return json.load(fh)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise GraphInputError(f"{what} file {p} is not valid JSON: {exc}") from None


def parse_corpus(data: Any, source: str = "corpus") -> list[Passage]:
    """Validate a list of {"title", "text"} objects."""
    if not isinstance(data, list) or not data:
        raise GraphInputError(f"{source}: expected a non-empty JSON list of {{title, text}} objects")
    out: list[Passage] = []
    for i, item in enumerate(data):
        if not isinstance(item, dict) or not isinstance(item.get("text"), str):
            raise GraphInputError(f"{source}: entry {i} must be an object with a string 'text'")
        title = item.get("title", "")
        if not isinstance(title, str):
            raise GraphInputError(f"{source}: entry {i} has a non-string 'title'")
        out.append(Passage(title=title, text=item["text"]))
    return out


def load_corpus(path: str | Path) -> list[Passage]:
    """Read a corpus file: a JSON list of {"title", "text"}."""
    return parse_corpus(_read_json(path, "corpus"), source=str(path))


def load_questions(path: str | Path, corpus: list[Passage]) -> list[Question]:
    """Read questions in the MuSiQue layout and map gold paragraphs to corpus indices on (title, text).

    Each question needs `question` and `paragraphs` with `is_supporting` flags; a supporting
    paragraph missing from the corpus is an error, since recall would silently be capped.
    """
    data = _read_json(path, "questions")
    if not isinstance(data, list) or not data:
        raise GraphInputError(f"questions file {path}: expected a non-empty JSON list")
    index = {p.key: i for i, p in enumerate(corpus)}
    out: list[Question] = []
    for n, item in enumerate(data):
        if not isinstance(item, dict) or not isinstance(item.get("question"), str):
            raise GraphInputError(f"questions file {path}: entry {n} has no string 'question'")
        paragraphs = item.get("paragraphs")
        if not isinstance(paragraphs, list):
            raise GraphInputError(f"questions file {path}: entry {n} has no 'paragraphs' list")
        gold: list[int] = []
        for p in paragraphs:
            if not isinstance(p, dict) or not p.get("is_supporting"):
                continue
            text = p.get("paragraph_text", p.get("text"))
            key = f"{p.get('title', '')}\n{text}"
            if key not in index:
                raise GraphInputError(
                    f"questions file {path}: a supporting paragraph of entry {n} "
                    f"({p.get('title')!r}) is not in the corpus; pass the matching corpus file"
                )
            if index[key] not in gold:
                gold.append(index[key])
        if not gold:
            raise GraphInputError(f"questions file {path}: entry {n} has no supporting paragraph")
        out.append(Question(id=str(item.get("id", n)), text=item["question"], gold=tuple(gold)))
    return out


def load_openie(path: str | Path, corpus: list[Passage]) -> list[DocTriples]:
    """Read OpenIE output in the HippoRAG layout (`docs` aligned 1:1 with the corpus).

    Malformed triples (not exactly three non-empty strings) are skipped; a file whose documents
    do not line up with the corpus is an error.
    """
    data = _read_json(path, "triples")
    docs = data.get("docs") if isinstance(data, dict) else data
    if not isinstance(docs, list):
        raise GraphInputError(f"triples file {path}: expected a 'docs' list")
    if len(docs) != len(corpus):
        raise GraphInputError(
            f"triples file {path} has {len(docs)} documents but the corpus has {len(corpus)}"
        )
    out: list[DocTriples] = []
    for i, (doc, passage) in enumerate(zip(docs, corpus, strict=True)):
        if not isinstance(doc, dict):
            raise GraphInputError(f"triples file {path}: document {i} is not an object")
        if "text" in doc and (doc.get("title", ""), doc["text"]) != (passage.title, passage.text):
            raise GraphInputError(f"triples file {path}: document {i} does not match corpus entry {i}")
        ents = [e for e in doc.get("extracted_entities", []) if isinstance(e, str) and e.strip()]
        out.append(DocTriples(entities=ents, triples=clean_triples(doc.get("extracted_triples", []))))
    return out


def clean_triples(raw: Any) -> list[Triple]:
    """Keep only well-formed [subject, predicate, object] string triples."""
    out: list[Triple] = []
    if not isinstance(raw, list):
        return out
    for t in raw:
        if isinstance(t, dict):
            t = [t.get("subject"), t.get("predicate"), t.get("object")]
        if (
            isinstance(t, list | tuple)
            and len(t) == 3
            and all(isinstance(x, str) and x.strip() for x in t)
        ):
            out.append(Triple(t[0].strip(), t[1].strip(), t[2].strip()))
    return out

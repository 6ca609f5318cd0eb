"""OpenIE with any rein model: one JSON-schema request per passage, answers validated, failures counted."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from graphs.corpus import DocTriples, Passage, clean_triples

if TYPE_CHECKING:
    from agent.models import Model

SYSTEM_PROMPT = (
    "You extract knowledge from a passage. List the named entities (people, places, organisations, "
    "works, dates, numbers) and the facts as [subject, predicate, object] triples whose subject and "
    "object are entities or short noun phrases from the passage. Resolve pronouns to the entity "
    "they refer to. Answer only with JSON matching the schema."
)

RESPONSE_FORMAT: dict[str, Any] = {
    "type": "json_schema",
    "json_schema": {
        "name": "openie",
        "strict": True,
        "schema": {
            "type": "object",
            "properties": {
                "entities": {"type": "array", "items": {"type": "string"}},
                "triples": {
                    "type": "array",
                    "items": {"type": "array", "items": {"type": "string"}, "minItems": 3, "maxItems": 3},
                },
            },
            "required": ["entities", "triples"],
            "additionalProperties": False,
        },
    },
}


@dataclass
class LLMExtraction:
    """Extractions for a corpus, with what went wrong."""

    docs: list[DocTriples]
    """One entry per passage (empty where the model failed)."""
    failures: dict[int, str] = field(default_factory=dict)
    """Passage index → why its answer was rejected after all attempts."""
    requests: int = 0
    """Model requests made."""
    input_tokens: int = 0
    """Prompt tokens reported by the model."""
    output_tokens: int = 0
    """Completion tokens reported by the model."""


def parse_answer(text: str) -> DocTriples:
    """Validate a model answer; raises ValueError with the reason when it is unusable."""
    raw = text.strip()
    if raw.startswith("```"):
        # Small local models often fence JSON despite the schema.
        raw = raw.strip("`").removeprefix("json").strip()
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON ({exc.msg})") from None
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    ents = data.get("entities", [])
    if not isinstance(ents, list):
        raise ValueError("'entities' is not a list")
    triples = clean_triples(data.get("triples", []))
    entities = [e.strip() for e in ents if isinstance(e, str) and e.strip()]
    if not entities and not triples:
        raise ValueError("no entities and no triples")
    return DocTriples(entities=entities, triples=triples)


async def extract_with_model_async(
    model: Model,
    corpus: Sequence[Passage],
    concurrency: int = 4,
    attempts: int = 2,
    progress: Callable[[int, int], None] | None = None,
    max_tokens: int = 1024,
) -> LLMExtraction:
    """Ask the model for entities and triples of every passage (retrying invalid answers).

    max_tokens caps each answer; a cut-off answer is invalid JSON and counts as a failed attempt.
    """
    from agent.messages import Message, ModelRequest, ModelSettings

    result = LLMExtraction(docs=[DocTriples() for _ in corpus])
    sem = asyncio.Semaphore(max(1, concurrency))
    done = 0

    async def one(i: int, passage: Passage) -> None:
        nonlocal done
        request = ModelRequest(
            messages=[Message.system(SYSTEM_PROMPT), Message.user(f"Title: {passage.title}\nPassage: {passage.text}")],
            settings=ModelSettings(temperature=0.0, max_tokens=max_tokens),
            response_format=RESPONSE_FORMAT,
        )
        reason = ""
        async with sem:
            for _ in range(max(1, attempts)):
                try:
                    response = await model.complete(request)
                except Exception as exc:  # a failed request costs this passage only
                    reason = f"request failed: {type(exc).__name__}: {exc}"
                    continue
                result.requests += 1
                result.input_tokens += response.usage.input_tokens
                result.output_tokens += response.usage.output_tokens
                try:
                    result.docs[i] = parse_answer(response.text)
                    reason = ""
                    break
                except ValueError as exc:
                    reason = str(exc)
        if reason:
            result.failures[i] = reason
        done += 1
        if progress:
            progress(done, len(corpus))

    await asyncio.gather(*(one(i, p) for i, p in enumerate(corpus)))
    return result


def extract_with_model(model: Model, corpus: Sequence[Passage], **kwargs: Any) -> LLMExtraction:
    """Synchronous wrapper of extract_with_model_async (not for use inside a running event loop)."""
    return asyncio.run(extract_with_model_async(model, corpus, **kwargs))

"""The LLM inception module: a compact structured request and lenient reading of the answer."""

from __future__ import annotations

import pytest

from agent.ledger import CostLedger
from agent.messages import Message
from agent.models import ScriptedModel
from agent.plugin_api import InterventionContext
from interventions.error_map import load_error_map
from interventions.llm_inception import LLMDetector, build_request, parse_verdict

pytestmark = pytest.mark.core  # needs no extra: also run on the bare core install (.ci/core_check.sh)

LABELS = load_error_map().labels


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"error_type": "vague_reference", "rationale": "which order?"}', "vague_reference"),
        ('Sure! Here it is:\n```json\n{"error_type": "unsupported domain", "rationale": "hotel"}\n```', "unsupported_domain"),
        ('{"error_type": "Unsupported-Parameter"}', "unsupported_parameter"),
        ('{"type": "contradiction"}', "contradiction"),
        ('{"error_type": "no_error", "rationale": "fine"}', "none"),
        ('{"error_type": "none"}', "none"),
        ("The message is an unsupported_operation: seat selection is not a tool.", "unsupported_operation"),
        ("I think this is fine.", "none"),
        ("", "none"),
        ('{"error_type": "banana"} but really ambiguous_interpretation', "ambiguous_interpretation"),
    ],
)
def test_parse_verdict_is_lenient(text: str, expected: str) -> None:
    assert parse_verdict(text, LABELS)[0] == expected


def context(*turns: tuple[str, str]) -> InterventionContext:
    dialogue = [Message(role=r, content=t) for r, t in turns]  # type: ignore[arg-type]
    tools = [{"type": "function", "function": {"name": "cancel_pending_order", "description": "Cancel a pending order. " * 20}}]
    return InterventionContext(dialogue=dialogue, tools=tools, turn=0, model=ScriptedModel(), ledger=CostLedger())


def test_request_is_compact_and_structured() -> None:
    ctx = context(("assistant", "Hi!"), ("user", "Cancel it " + "please " * 300))
    req = build_request(ctx, load_error_map(), LABELS)
    schema = req.response_format["json_schema"]["schema"]
    assert schema["properties"]["error_type"]["enum"] == ["none", *LABELS]
    assert schema["required"] == ["error_type", "rationale"]
    prompt = req.messages[1].text
    assert "- cancel_pending_order(): Cancel a pending order." in prompt  # the card, one line a tool
    assert len(prompt) < 1600  # long turns and tool descriptions are cut
    assert req.messages[0].role == "system" and all(n in req.messages[0].text for n in LABELS)


async def test_detector_uses_the_agent_model_by_default_and_books_spend() -> None:
    ctx = context(("user", "Book me a hotel."))
    ctx.model = ScriptedModel(['{"error_type": "unsupported_domain", "rationale": "hotels are not sold here"}'])
    found = await LLMDetector(load_error_map()).detect(ctx, LABELS)
    assert (found.error_type, found.rationale, found.detector) == ("unsupported_domain", "hotels are not sold here", "llm")
    assert [e.label for e in ctx.ledger.entries] == ["inception"]


async def test_detector_skips_dialogues_not_ending_with_the_user() -> None:
    ctx = context(("user", "hi"), ("assistant", "hello"))
    found = await LLMDetector(load_error_map(), model=ScriptedModel()).detect(ctx, LABELS)
    assert not found.is_error and ctx.ledger.entries == []

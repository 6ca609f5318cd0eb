"""The capability card: what ReIn judges "unsupported" against, built from the agent's own tools and prompt."""

from __future__ import annotations

import pytest

from interventions.card import build_card, infer_scope, numeric_violation

pytestmark = pytest.mark.core

REFILL = {"type": "function", "function": {
    "name": "refill_prescription", "description": "Request a refill of a prescription. Pickup or delivery.",
    "parameters": {"type": "object", "required": ["rx_number"], "properties": {
        "rx_number": {"type": "string", "description": "Prescription number."},
        "store": {"type": "string", "enum": ["downtown", "airport", "mall"]},
        "days_supply": {"type": "integer", "minimum": 30, "maximum": 90},
        "classes": {"type": "array", "items": {"type": "string", "enum": ["a", "b"]}},
        "refills": {"type": "integer", "exclusiveMaximum": 5},
    }}}}
THINK = {"type": "function", "function": {"name": "think", "description": "Think.", "parameters": {}}}
TRANSFER = {"type": "function", "function": {"name": "transfer_to_human_agents", "description": "Transfer."}}


def test_card_lists_the_agents_tools_with_enums_and_limits_and_leaves_reins_own_out() -> None:
    card = build_card([REFILL, THINK, TRANSFER], "You are the assistant of Greenleaf Pharmacy. You refill prescriptions.")
    assert [t.name for t in card.tools] == ["refill_prescription"]
    line = card.tools[0].render()
    assert line == ("refill_prescription(rx_number, store?: downtown|airport|mall, days_supply?: 30..90, "
                    "classes?: a|b, refills?: ..4): Request a refill of a prescription.")
    assert card.scope == "narrow"
    assert "Purpose: You are the assistant of Greenleaf Pharmacy." in card.render()


def test_cards_are_cached_per_agent_and_change_with_its_tools() -> None:
    first = build_card([REFILL], "You are a helpful assistant.")
    assert build_card([REFILL], "You are a helpful assistant.") is first
    first.cache["x"] = 1
    assert build_card([REFILL], "You are a helpful assistant.").cache == {"x": 1}
    # ReIn's own tools leave the card (and its key) as it was; a tool of the agent's changes it.
    assert build_card([REFILL, THINK, TRANSFER], "You are a helpful assistant.").key == first.key
    other = {"type": "function", "function": {"name": "order_status", "description": "Status of an order."}}
    assert build_card([REFILL, other], "You are a helpful assistant.").key != first.key


@pytest.mark.parametrize(("prompt", "scope"), [
    ("", "general"),
    ("You are a helpful assistant.", "general"),
    ("You are a friendly AI assistant. Answer concisely.", "general"),
    ("You are a helpful assistant for Acme Bank's customers.", "narrow"),
    ("# Retail agent policy\nAs a retail agent, you can help users cancel or modify pending orders.", "narrow"),
    ("You answer questions about the weather.", "narrow"),
])
def test_scope_follows_the_stated_purpose(prompt: str, scope: str) -> None:
    assert infer_scope(build_card([], prompt).purpose) == scope


def test_a_number_outside_every_limit_of_the_tool_is_a_violation() -> None:
    card = build_card([REFILL], "")
    assert numeric_violation(card, "refill_prescription", "Refill RX-1 for 180 days")
    assert not numeric_violation(card, "refill_prescription", "Refill RX-1 for 90 days")
    assert not numeric_violation(card, "refill_prescription", "Refill it please")
    assert not numeric_violation(card, "no_such_tool", "Refill for 180 days")


def test_a_long_system_prompt_keeps_its_opening_sentences() -> None:
    prompt = "You help customers of Northwind Air change flights. " * 20
    card = build_card([], prompt)
    assert card.purpose.endswith("change flights.") and len(card.purpose) <= 400

"""Self-routing: the mode tag the model writes first, lenient parsing, and forced (prefilled) tags."""

from __future__ import annotations

import pytest

from agent.ledger import CostLedger
from agent.messages import Message
from agent.models import FunctionModel, Model, ScriptedModel
from agent.plugin_api import InterventionContext
from agent.plugins import load_mode_policy
from agent.routing import SelfRouter, classification_tag, parse_classification

pytestmark = pytest.mark.core  # needs no extra: also run on the bare core install (.ci/core_check.sh)


@pytest.mark.parametrize(
    ("text", "mode"),
    [
        ("<classification>reasoning</classification>", "reasoning"),
        ("<classification>agentic", "agentic"),  # stopped at the closing tag
        ("  < Classification >Instant</classification> The capital is Paris.", "instant"),
        ("<classification>tools</classification>", "agentic"),
        ("<classification>reasoning-heavy</classification>", "reasoning"),
        ("This one is instant, I think.", "instant"),  # a mode name beats the synonym 'think'
        ("Needs a tool lookup.", "agentic"),
        ("Let me think.", "reasoning"),
        ("no idea", None),
        ("", None),
    ],
)
def test_parse_classification_is_lenient(text: str, mode: str | None) -> None:
    assert parse_classification(text) == mode


def ctx_for(query: str, model: Model, tools: list[dict] | None = None) -> InterventionContext:
    return InterventionContext(dialogue=[Message.user("earlier"), Message.assistant("ok"), Message.user(query)],
                               tools=tools or [], turn=1, model=model, ledger=CostLedger())


async def test_decide_asks_the_agent_model_for_a_tag_and_books_the_spend() -> None:
    model = ScriptedModel(["<classification>agentic"], name="tiny")
    schema = {"type": "function", "function": {"name": "get_order", "parameters": {}}}
    ctx = ctx_for("Where is my order #W1234567?", model, [schema])
    decision = await SelfRouter().decide(ctx)
    model.assert_done()
    assert decision.mode == "agentic" and decision.scores == {"agentic": 1.0}
    request = model.requests[0]
    assert request.messages[-1].text == "Where is my order #W1234567?"
    assert "get_order" in request.messages[0].text and "<classification>" in request.messages[0].text
    assert request.settings.stop == ["</classification>"] and request.settings.max_tokens == 16
    assert [e.label for e in ctx.ledger.entries] == ["router"]
    assert ctx.ledger.usage.requests == 1


async def test_unparseable_reply_falls_back() -> None:
    model = FunctionModel(lambda request: "hmm")
    decision = await SelfRouter(fallback="reasoning").decide(ctx_for("?", model))
    assert decision.mode == "reasoning" and "fallback" in decision.reason


async def test_forced_mode_is_a_prefilled_tag_without_a_model_call() -> None:
    model = ScriptedModel([])
    ctx = ctx_for("anything", model)
    decision = await SelfRouter(forced="instant").decide(ctx)
    assert decision.mode == "instant"
    assert classification_tag("instant") in decision.reason
    assert model.requests == [] and ctx.ledger.entries == []


async def test_router_model_by_name_and_plugin_registry() -> None:
    router = load_mode_policy("self", model="echo")
    assert isinstance(router, SelfRouter)
    # The echo model repeats the query, so a query naming a mode routes to it.
    assert (await router.route("reasoning please")).mode == "reasoning"


def test_invalid_modes_are_rejected() -> None:
    with pytest.raises(ValueError, match="forced mode"):
        SelfRouter(forced="slow")  # type: ignore[arg-type]  # not a mode, on purpose
    with pytest.raises(ValueError, match="fallback"):
        SelfRouter(fallback="never")  # type: ignore[arg-type]  # not a mode, on purpose

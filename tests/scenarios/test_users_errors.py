"""The error-injecting user: each of the six ReIn error types, built from real retail/airline tasks."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from agent.messages import Message, ModelRequest
from agent.models import FunctionModel
from scenarios.domains import load_domain
from scenarios.loading import load_scenarios
from scenarios.scenario import InjectedError, Scenario
from scenarios.users.base import UserView
from scenarios.users.error_templates import TEMPLATES, ErrorContext, build_context, template_turn
from scenarios.users.error_types import ERROR_TYPES, ErrorTypeName
from scenarios.users.injecting import ErrorInjectingUser
from scenarios.users.scripted import ScriptedUser

pytestmark = pytest.mark.core  # needs no extra: also run on the bare core install (.ci/core_check.sh)

DATA = Path(__file__).resolve().parents[2] / "scenarios" / "domains" / "data"


def context_for(domain: str, task_id: str) -> tuple[Scenario, ErrorContext]:
    scenario = next(s for s in load_scenarios(DATA / domain / "tasks.json") if s.id == task_id)
    env = load_domain(domain)
    writes = [t for t in env.tool_names() if env.is_mutating(t)]
    return scenario, build_context(scenario, env.db, writes)


def test_error_table() -> None:
    assert list(ERROR_TYPES) == [
        "vague_reference",
        "ambiguous_interpretation",
        "contradiction",
        "unsupported_operation",
        "unsupported_parameter",
        "unsupported_domain",
    ]
    for e in ERROR_TYPES.values():
        expected = "report_internal_error" if e.category == "ambiguous" else "transfer_to_human_agents"
        assert e.recovery_tool == expected and e.description


def test_context_from_real_retail_task() -> None:
    _, ctx = context_for("retail", "5")
    assert ctx.user_id == "mei_kovacs_8020"
    assert ctx.first("orders") == "#W6390527"
    assert len(ctx.owned["orders"]) >= 2
    assert ctx.item_names and ctx.city
    assert ctx.operation == "return_delivered_order_items"


@pytest.mark.parametrize("domain,task_id", [("retail", "5"), ("airline", "3")])
@pytest.mark.parametrize("error_type", list(ERROR_TYPES))
async def test_each_error_type_from_task_data(domain: str, task_id: str, error_type: ErrorTypeName) -> None:
    scenario, ctx = context_for(domain, task_id)
    base = ScriptedUser(["my own request"])
    user = ErrorInjectingUser(base, [InjectedError(type=error_type, turn=0)], ctx, seed=3)
    reply = await user.respond(UserView([Message.assistant("Hi!")], 0))
    record = reply.record
    assert record["injected_error"] == error_type
    assert record["category"] == ERROR_TYPES[error_type].category
    assert record["recovery_tool"] == ERROR_TYPES[error_type].recovery_tool
    assert record["generator"] == "template"
    # A domain template filled with the task's own data, never the generic fallback.
    domain_templates = [t for d, t, *_ in TEMPLATES[error_type] if d == domain]
    assert record["template"] in domain_templates
    values = ctx.values()
    used = [v for k, v in values.items() if "{" + k + "}" in record["template"]]
    assert all(v in reply.text for v in used)
    if domain == "airline" and error_type not in ("vague_reference", "unsupported_domain"):
        assert "JMO1MG" in reply.text
    if domain == "retail" and error_type in ("ambiguous_interpretation", "contradiction", "unsupported_parameter"):
        assert "#W6390527" in reply.text
    assert reply.signal is None and reply.text != "my own request"


async def test_injection_is_inserted_and_the_base_user_continues() -> None:
    _, ctx = context_for("airline", "3")
    base = ScriptedUser(["first", "second"])
    user = ErrorInjectingUser(base, [InjectedError(type="contradiction", turn=1)], ctx)
    texts = [(await user.respond(UserView([Message.assistant("ok")], turn))).text for turn in range(4)]
    assert texts[0] == "first" and "JMO1MG" in texts[1] and texts[2] == "second" and texts[3] == "###STOP###"
    assert len(user.injected) == 1 and user.injected[0]["turn"] == 1


async def test_explicit_text_and_llm_generation_with_fallback() -> None:
    _, ctx = context_for("retail", "5")
    given = ErrorInjectingUser(ScriptedUser(["x"]), [InjectedError(type="vague_reference", text="Fix that one.")], ctx)
    reply = await given.respond(UserView([], 0))
    assert reply.text == "Fix that one." and reply.record["generator"] == "given"

    prompts: list[ModelRequest] = []

    def write(request: ModelRequest) -> str:
        prompts.append(request)
        return '"Can you send the lamp to my other place?"'

    llm = ErrorInjectingUser(
        ScriptedUser(["x"]), [InjectedError(type="vague_reference", generator="llm")], ctx, model=FunctionModel(write)
    )
    reply = await llm.respond(UserView([], 0))
    assert reply.text == "Can you send the lamp to my other place?" and reply.record["generator"] == "llm"
    assert "vague reference" in prompts[0].messages[0].text and "#W6390527" in prompts[0].messages[0].text
    assert reply.ledger.entries and reply.ledger.entries[0].label == "user_sim"

    silent = ErrorInjectingUser(
        ScriptedUser(["x"]), [InjectedError(type="unsupported_domain", generator="llm")], ctx, model=FunctionModel(lambda r: "###STOP###")
    )
    reply = await silent.respond(UserView([], 0))
    assert reply.record["generator"] == "template" and "flight" in reply.text


def test_generic_fallback_without_data() -> None:
    from scenarios.users.error_templates import ErrorContext

    text, template = template_turn("unsupported_domain", ErrorContext(domain="calculator"), random.Random(0))
    assert template in [t for d, t, *_ in TEMPLATES["unsupported_domain"] if d == "*"] and text == template

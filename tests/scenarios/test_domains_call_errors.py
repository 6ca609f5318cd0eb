"""A domain tool's refusal reaches the agent as a fault of its call, with what to do next.

The embedded 0.5B answered its own failed calls ("Error: Order not found") with
report_internal_error, which fails every error-free control of the recovery suite; the agent's
toolkit now says the call was refused because of its arguments and names the read tools that
take the same arguments. `env.call` (tau2's path, used by the replays) keeps tau2's bare message.
"""

from __future__ import annotations

import pytest

from agent.models import ScriptedModel, call, reply
from agent.runtime import Agent
from interventions import with_recovery_tools
from scenarios.domains import load_domain
from scenarios.domains.common import call_error_guidance
from tools.errors import ToolError
from tools.execute import CallRequest, execute_calls
from tools.tool import ToolKind

pytestmark = pytest.mark.core


async def test_refused_write_names_the_argument_fault_and_the_read_tools_to_check() -> None:
    env = load_domain("retail")
    base = env.db_hash()
    (result,) = await execute_calls(
        [CallRequest("1", "cancel_pending_order", {"order_id": "#W0000000", "reason": "no longer needed"})],
        env.agent_toolkit().as_dict(),
    )
    first, guidance = result.content.split("\n", 1)
    assert first == "Error: Order not found" and result.is_error and result.error_kind == "execution"
    assert "because of its arguments" in guidance and "Nothing was changed" in guidance
    assert "get_order_details" in guidance and "get_product_details" not in guidance
    # The guidance never uses the words of a recovery tool's name, which small models copy.
    assert "internal error" not in guidance.lower() and "transfer" not in guidance.lower()
    assert env.db_hash() == base


async def test_refused_read_and_calculator_get_their_own_guidance() -> None:
    toolkit = load_domain("airline").agent_toolkit().as_dict()
    read, calc = await execute_calls(
        [CallRequest("1", "get_reservation_details", {"reservation_id": "ZZZZZZ"}),
         CallRequest("2", "calculate", {"expression": "now() - 3"})],
        toolkit,
    )
    assert read.content.startswith("Error: Reservation ZZZZZZ not found\n")
    assert "Nothing was changed" not in read.content and "ask the user" in read.content
    assert calc.content == "Error: Invalid characters in expression\n" + call_error_guidance("calculate", ToolKind.GENERIC, [])


def test_tau2_path_keeps_the_bare_message() -> None:
    with pytest.raises(ToolError, match="^Reservation ZZZZZZ not found$"):
        load_domain("airline").call("get_reservation_details", reservation_id="ZZZZZZ")


def test_guidance_without_matching_read_tools_names_none() -> None:
    text = call_error_guidance("send_certificate", ToolKind.WRITE, [])
    assert "look them up" not in text and text.startswith("The call was refused because of its arguments")


async def test_the_agent_model_sees_the_guidance_after_its_failed_call() -> None:
    env = load_domain("retail")
    model = ScriptedModel(
        [call("cancel_pending_order", order_id="#W0000000", reason="no longer needed"), reply("Which order do you mean?")]
    )
    agent = Agent(model, with_recovery_tools(env.agent_toolkit()), system_prompt=env.policy)
    result = await agent.ainvoke("Cancel my order #W0000000, I no longer need it.")
    assert result.output == "Which order do you mean?"
    seen = model.requests[1].messages[-1]
    assert seen.role == "tool" and seen.is_error
    assert seen.text.startswith("Error: Order not found\nThe call was refused because of its arguments")
    model.assert_done()


async def test_an_order_id_without_its_hash_gets_the_corrected_call_instead_of_the_general_advice() -> None:
    env = load_domain("retail")
    base = env.db_hash()
    lookup, cancel, unknown = await execute_calls(
        [CallRequest("1", "get_order_details", {"order_id": "W1013897"}),
         CallRequest("2", "cancel_pending_order", {"order_id": "W1013897", "reason": "ordered by mistake"}),
         CallRequest("3", "get_order_details", {"order_id": "#W0000000"})],
        env.agent_toolkit().as_dict(),
    )
    assert lookup.content == ("Error: Order not found\norder_id values start with '#'. "
                              'Call get_order_details again now with {"order_id": "#W1013897"}.')
    # the other arguments are kept as sent; nothing was changed by the refused write
    assert cancel.content.endswith('Call cancel_pending_order again now with '
                                   '{"order_id": "#W1013897", "reason": "ordered by mistake"}.')
    assert env.db_hash() == base
    # a well-formed id that does not exist gets the general advice: no correction is certain
    assert unknown.content.startswith("Error: Order not found\nThe call was refused because of its arguments")
    # the corrected call works, and tau2's own path keeps its bare message
    assert env.agent_toolkit().as_dict()["get_order_details"].fn(order_id="#W1013897")["user_id"] == "juan_garcia_9528"
    with pytest.raises(ToolError, match="^Order not found$"):
        env.call("get_order_details", order_id="W1013897")


def test_hints_need_an_example_with_a_leading_symbol() -> None:
    from scenarios.domains.common import argument_hints

    params = {"properties": {"order_id": {"description": "The order id, such as '#W0000000'."},
                             "user_id": {"description": "The user id, such as 'sara_doe_496'."},
                             "note": {"description": "Free text."}}}
    assert argument_hints("t", params, {"user_id": "bob", "note": "x", "order_id": "#W1"}) == []
    assert argument_hints("t", params, {"order_id": 5}) == []  # not a string: the schema's check, not ours
    assert argument_hints("t", params, {"order_id": "W1", "user_id": "bob"}) == [
        'order_id values start with \'#\'. Call t again now with {"order_id": "#W1", "user_id": "bob"}.']
    assert argument_hints("t", {}, {"order_id": "W1"}) == []

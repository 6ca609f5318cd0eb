"""Direct behaviour of the domain tools: tau2's semantics, messages and upstream quirks."""

from __future__ import annotations

import json

import pytest

from scenarios.canonical import canonical_hash
from scenarios.domains import DomainStateError, load_domain
from scenarios.domains.environment import DomainEnvironment
from tools.errors import ToolError
from tools.execute import CallRequest, execute_calls

pytestmark = pytest.mark.core  # needs no extra: also run on the bare core install (.ci/core_check.sh)

# ----- retail ------------------------------------------------------------------------------


def test_retail_unknown_order_gives_tau2_message() -> None:
    env = load_domain("retail")
    with pytest.raises(ToolError, match="^Order not found$"):
        env.call("get_order_details", order_id="W1013897")  # the '#' is missing
    assert env.call("get_order_details", order_id="#W1013897")["user_id"] == "juan_garcia_9528"


async def test_retail_toolkit_reports_errors_and_bad_arguments_to_the_model() -> None:
    toolkit = load_domain("retail").agent_toolkit()
    results = await execute_calls(
        [
            CallRequest("1", "get_order_details", '{"order_id": "#W0000000"}'),
            CallRequest("2", "cancel_pending_order", {"order_id": "#W1013897"}),
            CallRequest("3", "calculate", {"expression": "(2 + 3) / 4"}),
        ],
        toolkit.as_dict(),
    )
    # The agent toolkit adds what to do next to tau2's message (tests/scenarios/test_domains_call_errors.py).
    assert results[0].content.startswith("Error: Order not found\n") and results[0].is_error
    assert results[1].error_kind == "arguments" and "reason" in results[1].content
    assert results[2].content == "1.25"


def test_retail_modify_items_reproduces_the_last_variant_bug() -> None:
    env = load_domain("retail")
    order = env.call(
        "modify_pending_order_items",
        order_id="#W1013897",
        item_ids=["8293778132", "3229676465"],
        new_item_ids=["1906487464", "2439754078"],
        payment_method_id="gift_card_6369065",
    )
    diff = 0.0
    diff += 102.02 - 100.62
    diff += 49.51 - 51.94
    last = env.call("get_item_details", item_id="2439754078")
    assert [i["item_id"] for i in order["items"][:2]] == ["1906487464", "2439754078"]
    # Upstream bug: both items take the price and options of the last new variant.
    assert [i["price"] for i in order["items"][:2]] == [49.51, 49.51]
    assert order["items"][0]["options"] == order["items"][1]["options"] == last["options"]
    assert order["status"] == "pending (item modified)"
    assert order["payment_history"][-1] == {
        "transaction_type": "refund",
        "amount": abs(diff),  # not rounded
        "payment_method_id": "gift_card_6369065",
    }
    card = env.call("get_user_details", user_id="juan_garcia_9528")["payment_methods"][
        "gift_card_6369065"
    ]
    assert card["balance"] == round(24.0 - diff, 2) == 25.03
    with pytest.raises(ToolError, match="^Non-pending order cannot be modified$"):
        env.call(
            "modify_pending_order_items",
            order_id="#W1013897",
            item_ids=[],
            new_item_ids=[],
            payment_method_id="x",
        )


def test_retail_modify_items_validation_messages() -> None:
    env = load_domain("retail")
    before = env.db_hash()
    args = {"order_id": "#W1013897", "payment_method_id": "gift_card_6369065"}
    with pytest.raises(
        ToolError, match="^The new item id should be different from the old item id$"
    ):
        env.call(
            "modify_pending_order_items",
            item_ids=["8293778132"],
            new_item_ids=["8293778132"],
            **args,
        )
    with pytest.raises(ToolError, match="^9999999999 not found$"):
        env.call("modify_pending_order_items", item_ids=["9999999999"], new_item_ids=["1"], **args)
    with pytest.raises(ToolError, match="^The number of items to be exchanged should match$"):
        env.call("modify_pending_order_items", item_ids=["8293778132"], new_item_ids=[], **args)
    assert env.db_hash() == before


def test_retail_cancel_refunds_gift_card_at_once() -> None:
    env = load_domain("retail")
    with pytest.raises(ToolError, match="^Invalid reason$"):
        env.call("cancel_pending_order", order_id="#W1013897", reason="changed my mind")
    order = env.call("cancel_pending_order", order_id="#W1013897", reason="no longer needed")
    assert (order["status"], order["cancel_reason"]) == ("cancelled", "no longer needed")
    assert order["payment_history"][-1] == {
        "transaction_type": "refund",
        "amount": 152.56,
        "payment_method_id": "gift_card_6369065",
    }
    user = env.call("get_user_details", user_id="juan_garcia_9528")
    assert user["payment_methods"]["gift_card_6369065"]["balance"] == round(24.0 + 152.56, 2)
    with pytest.raises(ToolError, match="^Non-pending order cannot be cancelled$"):
        env.call("cancel_pending_order", order_id="#W1013897", reason="no longer needed")


def test_retail_return_and_lookups() -> None:
    env = load_domain("retail")
    with pytest.raises(ToolError, match="^Payment method not found$"):
        env.call(
            "return_delivered_order_items",
            order_id="#W1067251",
            item_ids=["7848293342"],
            payment_method_id="x",
        )
    order = env.call(
        "return_delivered_order_items",
        order_id="#W1067251",
        item_ids=["7848293342", "6452271382"],
        payment_method_id="credit_card_3362387",
    )
    assert order["status"] == "return requested"
    assert order["return_items"] == ["6452271382", "7848293342"]  # stored sorted
    email = env.call("get_user_details", user_id="raj_sanchez_2970")["email"]
    assert env.call("find_user_id_by_email", email=f"  {email.upper()} ") == "raj_sanchez_2970"
    products = json.loads(env.call("list_all_product_types"))
    assert len(products) == 50 and list(products) == sorted(products)
    with pytest.raises(ToolError, match="^Invalid characters in expression$"):
        env.call("calculate", expression="__import__('os')")


# ----- airline -----------------------------------------------------------------------------

BOOKING = {
    "user_id": "sophia_silva_7557",
    "origin": "ORD",
    "destination": "PHL",
    "flight_type": "one_way",
    "cabin": "economy",
    "flights": [{"flight_number": "HAT271", "date": "2024-05-26"}],
    "passengers": [
        {"first_name": "Sophia", "last_name": "Silva", "dob": "1957-10-05"},
        {"first_name": "Kevin", "last_name": "Smith", "dob": "2001-04-12"},
    ],
    "payment_methods": [{"payment_id": "certificate_8045380", "amount": 348}],
    "total_baggages": 0,
    "nonfree_baggages": 0,
    "insurance": "no",
}


def _seats(env: DomainEnvironment, number: str, date: str) -> dict[str, int]:
    seats: dict[str, int] = env.db["flights"][number]["dates"][date]["available_seats"]
    return seats


def test_airline_booking_takes_seats_and_uses_the_certificate() -> None:
    env = load_domain("airline")
    seats = dict(_seats(env, "HAT271", "2024-05-26"))
    reservation = env.call("book_reservation", **BOOKING)
    assert reservation["reservation_id"] == "HATHAT"
    assert reservation["created_at"] == "2024-05-15T15:00:00"
    assert reservation["flights"] == [
        {
            "flight_number": "HAT271",
            "origin": "ORD",
            "destination": "PHL",
            "date": "2024-05-26",
            "price": 174,
        }
    ]
    assert reservation["status"] is None
    assert _seats(env, "HAT271", "2024-05-26")["economy"] == seats["economy"] - 2
    user = env.call("get_user_details", user_id="sophia_silva_7557")
    assert "certificate_8045380" not in user["payment_methods"]
    assert user["reservations"][-1] == "HATHAT"
    assert seats["economy"] == 3  # one seat is left, too few for a second booking of two
    with pytest.raises(ToolError, match="^Not enough seats on flight HAT271$"):
        env.call("book_reservation", **BOOKING)

    cancelled = env.call(
        "cancel_reservation", reservation_id="hathat"
    )  # ids match case-insensitively
    assert cancelled["status"] == "cancelled"
    assert cancelled["payment_history"] == [
        {"payment_id": "certificate_8045380", "amount": 348},
        {"payment_id": "certificate_8045380", "amount": -348},
    ]
    # tau2 does not release seats on cancellation.
    assert _seats(env, "HAT271", "2024-05-26")["economy"] == seats["economy"] - 2


def test_airline_booking_checks_the_total_before_changing_anything() -> None:
    env = load_domain("airline")
    before = env.db_hash()
    bad = dict(BOOKING, payment_methods=[{"payment_id": "certificate_8045380", "amount": 300}])
    with pytest.raises(
        ToolError, match="^Payment amount does not add up, total price is 348, but paid 300$"
    ):
        env.call("book_reservation", **bad)
    too_much = [{"payment_id": "gift_card_5094406", "amount": 348}]  # the gift card holds 274
    with pytest.raises(ToolError, match="^Not enough balance in payment method gift_card_5094406$"):
        env.call("book_reservation", **dict(BOOKING, payment_methods=too_much))
    with pytest.raises(ToolError, match="invalid reservation.cabin"):
        env.call("book_reservation", **dict(BOOKING, cabin="first"))
    with pytest.raises(ToolError, match="invalid passenger: dob: Field required"):
        env.call(
            "book_reservation", **dict(BOOKING, passengers=[{"first_name": "A", "last_name": "B"}])
        )
    assert env.db_hash() == before


def test_airline_certificates_and_update_rules() -> None:
    env = load_domain("airline")
    message = env.call("send_certificate", user_id="Sophia_Silva_7557", amount=100)
    assert (
        message
        == "Certificate certificate_3221322 added to user Sophia_Silva_7557 with amount 100."
    )
    methods = env.db["users"]["sophia_silva_7557"]["payment_methods"]
    assert methods["certificate_3221322"] == {
        "source": "certificate",
        "id": "certificate_3221322",
        "amount": 100.0,
    }
    assert isinstance(methods["certificate_3221322"]["amount"], float)
    assert "certificate_3221323" in env.call(
        "send_certificate", user_id="sophia_silva_7557", amount=50
    )
    reservation_id = env.db["users"]["sophia_silva_7557"]["reservations"][0]
    with pytest.raises(ToolError, match="^Certificate cannot be used to update reservation$"):
        env.call(
            "update_reservation_baggages",
            reservation_id=reservation_id,
            total_baggages=5,
            nonfree_baggages=5,
            payment_id="certificate_3221322",
        )
    with pytest.raises(ToolError, match="^User nobody not found$"):
        env.call("get_user_details", user_id="nobody")
    direct = env.call("search_direct_flight", origin="ORD", destination="PHL", date="2024-05-26")
    assert direct and all(f["date"] is None and f["status"] == "available" for f in direct)


# ----- mock, call dispatch and initial state -------------------------------------------------


def test_mock_tools_and_dispatch_errors() -> None:
    env = load_domain("mock")
    task = env.call("create_task", user_id="user_1", title="Write report")
    assert task == {
        "task_id": "task_2",
        "title": "Write report",
        "description": None,
        "status": "pending",
    }
    assert env.db["users"]["user_1"]["tasks"] == ["task_1", "task_2"]
    with pytest.raises(ToolError, match="^User user_9 not found$"):
        env.call("create_task", user_id="user_9", title="x")
    with pytest.raises(ToolError, match="^Tool 'delete_task' not found.$"):
        env.call("delete_task", task_id="task_1")
    with pytest.raises(ToolError, match="invalid arguments for create_task"):
        env.call("create_task", user="user_1")
    assert (
        env.call("dismiss_notification", "user", notification_id="notif_1")
        == "Notification notif_1 dismissed"
    )
    assert env.run_env_assertion(
        {
            "env_type": "user",
            "func_name": "assert_notification_status",
            "arguments": {"notification_id": "notif_1", "expected_status": "read"},
        }
    )
    with pytest.raises(ToolError, match="^User tools not available$"):
        load_domain("retail").call("check_notifications", "user")


async def test_mock_toolkit_validates_enums_from_the_tau2_schema() -> None:
    toolkit = load_domain("mock").agent_toolkit()
    (result,) = await execute_calls(
        [CallRequest("1", "update_task_status", {"task_id": "task_1", "status": "done"})],
        toolkit.as_dict(),
    )
    assert result.error_kind == "arguments" and "'pending' or 'completed'" in result.content


def test_environments_are_isolated_and_results_are_copies() -> None:
    first, second = load_domain("retail"), load_domain("retail")
    base = second.db_hash()
    first.call("cancel_pending_order", order_id="#W1013897", reason="ordered by mistake")
    assert first.db_hash() != base and second.db_hash() == base
    details = second.call("get_order_details", order_id="#W1013897")
    details["status"] = "tampered"
    assert second.db["orders"]["#W1013897"]["status"] == "pending"
    assert first.db_hash() == canonical_hash(first.dump())


def test_initial_state_merge_and_errors() -> None:
    env = load_domain("mock")
    env.apply_initial_state(
        {
            "initialization_data": {
                "agent_data": {
                    "users": {"user_1": {"name": "Renamed"}},
                    "tasks": {
                        "task_9": {"task_id": "task_9", "title": "New", "status": "completed"}
                    },
                }
            }
        }
    )
    assert env.db["users"]["user_1"] == {
        "user_id": "user_1",
        "name": "Renamed",
        "tasks": ["task_1"],
    }
    assert env.db["tasks"]["task_9"]["description"] is None  # filled in like tau2's model_validate
    with pytest.raises(DomainStateError, match="unknown table 'projects'"):
        env.apply_initial_state({"initialization_data": {"agent_data": {"projects": {}}}})
    with pytest.raises(DomainStateError, match=r"agent_data.tasks.task_1.status: Input should be"):
        env.apply_initial_state(
            {"initialization_data": {"agent_data": {"tasks": {"task_1": {"status": "done"}}}}}
        )
    with pytest.raises(DomainStateError, match="has no user DB"):
        load_domain("retail").apply_initial_state({"initialization_data": {"user_data": {"x": {}}}})


def test_message_history_replay_is_strict_about_recorded_outputs() -> None:
    call = {"id": "c1", "name": "create_task", "arguments": {"user_id": "user_1", "title": "T"}}
    wrong = {"role": "tool", "id": "c1", "content": '{"task_id": "task_7"}'}
    history = [{"role": "assistant", "tool_calls": [call]}, wrong]
    with pytest.raises(DomainStateError, match="the history records"):
        load_domain("mock").apply_initial_state({"message_history": history})
    lenient = load_domain("mock")
    lenient.apply_initial_state({"message_history": history}, strict=False)
    assert "task_2" in lenient.db["tasks"]
    with pytest.raises(DomainStateError, match="expected the tool message answering 'c1'"):
        load_domain("mock").apply_initial_state({"message_history": history[:1]})


def test_custom_databases_are_validated_and_canonicalised() -> None:
    env = load_domain(
        "mock",
        db={"tasks": {"t": {"task_id": "t", "title": "x", "status": "pending"}}, "users": {}},
    )
    assert env.dump()["tasks"]["t"] == {
        "task_id": "t",
        "title": "x",
        "description": None,
        "status": "pending",
    }
    assert env.db_hash() == canonical_hash(env.dump())
    with pytest.raises(DomainStateError, match=r"^db\.extra: Extra inputs are not permitted$"):
        load_domain("mock", db={"tasks": {}, "users": {}, "extra": 1})
    with pytest.raises(DomainStateError, match=r"^db\.users\.u\.tasks: Field required$"):
        load_domain("mock", db={"tasks": {}, "users": {"u": {"user_id": "u", "name": "U"}}})
    with pytest.raises(KeyError, match="unknown domain 'bank'"):
        load_domain("bank")


def test_custom_retail_prices_become_floats() -> None:
    products = {
        "p": {
            "name": "Mug",
            "product_id": "p",
            "variants": {"i": {"item_id": "i", "options": {}, "available": True, "price": 10}},
        }
    }
    env = load_domain("retail", db={"products": products, "users": {}, "orders": {}})
    price = env.call("get_item_details", item_id="i")["price"]
    assert price == 10.0 and isinstance(price, float)

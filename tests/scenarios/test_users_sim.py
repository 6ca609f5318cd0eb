"""Users: the scripted user, the LLM-simulated user (over a FunctionModel) and its guard rails."""

from __future__ import annotations

import pytest

from agent.messages import Message, ModelRequest, ModelResponse, ToolCall
from agent.models import FunctionModel
from scenarios.scenario import Condition, ScriptedReply, ScriptedTurn
from scenarios.tau2_tasks import StructuredInstructions
from scenarios.users.base import (
    OUT_OF_SCOPE,
    STOP,
    TRANSFER,
    UserSimulationError,
    UserView,
    signal_of,
)
from scenarios.users.scripted import ScriptedUser
from scenarios.users.simulated import SimulatedUser, format_instructions

pytestmark = pytest.mark.core  # needs no extra: also run on the bare core install (.ci/core_check.sh)


def view(turn: int, agent: str = "", calls: tuple[str, ...] = ()) -> UserView:
    dialogue = [Message.assistant("Hi! How can I help you today?")]
    if agent:
        dialogue += [Message.user("earlier"), Message.assistant(agent)]
    return UserView(dialogue, turn, [ToolCall(name=n) for n in calls])


async def test_scripted_user_plays_turns_conditions_and_replies() -> None:
    user = ScriptedUser(
        [
            "Create a task.",
            ScriptedTurn(say="Thanks!", when=Condition(contains="task_2"), otherwise="Which id?"),
            ScriptedTurn(say="Only if you called the tool", when=Condition(tool_called="create_task")),
            "Bye.",
        ],
        replies=[ScriptedReply(when=Condition(regex=r"\bconfirm\b"), say="yes", times=1)],
    )
    assert (await user.respond(view(0))).text == "Create a task."
    # A reply fires first (once), and does not consume a turn.
    assert (await user.respond(view(1, "Please confirm."))).text == "yes"
    # The conditional turn fails: its otherwise text is said.
    assert (await user.respond(view(2, "Please confirm again, nothing made yet."))).text == "Which id?"
    # The tool condition fails and there is no otherwise: skipped, so the next turn is said.
    assert (await user.respond(view(3, "done", calls=("get_users",)))).text == "Bye."
    final = await user.respond(view(4, "bye"))
    assert final.text == STOP and final.signal == "stop"


async def test_scripted_tool_condition_holds() -> None:
    user = ScriptedUser([ScriptedTurn(say="seen", when=Condition(tool_called=["create_task", "x"]))])
    reply = await user.respond(view(1, "ok", calls=("create_task",)))
    assert reply.text == "seen" and reply.record == {"scripted": "turn[0]"}


def test_signals() -> None:
    assert signal_of(f"Thanks! {STOP}") == "stop"
    assert signal_of(TRANSFER) == "transfer"
    assert signal_of(OUT_OF_SCOPE) == "out_of_scope"
    assert signal_of(f"{TRANSFER} then {STOP}") == "transfer"
    assert signal_of("no token") is None


def test_structured_instructions_text() -> None:
    text = format_instructions(
        StructuredInstructions(domain="retail", reason_for_call="Return a lamp.", known_info="You are mei_1.", unknown_info=None, task_instructions=".")
    )
    assert "Return a lamp." in text and "mei_1" in text and "How to behave" not in text


async def test_simulated_user_flips_roles_seeds_turns_and_books_cost() -> None:
    seen: list[ModelRequest] = []

    def fn(request: ModelRequest) -> str:
        seen.append(request)
        return "I want to return my lamp." if len(seen) == 1 else f"All done. {STOP}"

    user = SimulatedUser(FunctionModel(fn, name="sim"), "Return the lamp from order #W1.", "Polite", seed=7)
    first = await user.respond(view(0))
    assert first.text == "I want to return my lamp." and first.signal is None
    system, *rest = seen[0].messages
    assert system.role == "system" and "###STOP###" in system.text and "Polite" in system.text and "#W1" in system.text
    # The agent's greeting reaches the simulator as its "user".
    assert [m.role for m in rest] == ["user"] and rest[0].text.startswith("Hi!")
    assert seen[0].settings.seed == 7000 and seen[0].settings.temperature == 0.0
    assert first.ledger.entries[0].label == "user_sim"
    second = await user.respond(view(1, "Done, the lamp is returned."))
    assert second.signal == "stop"
    assert [m.role for m in seen[1].messages[1:]] == ["user", "assistant", "user"]
    assert seen[1].settings.seed == 7001


async def test_simulated_user_retries_empty_then_fails() -> None:
    answers = iter(["", "Hello, I need help."])
    user = SimulatedUser(FunctionModel(lambda r: next(answers)), "Need help.")
    reply = await user.respond(view(0))
    assert reply.text == "Hello, I need help." and len(reply.ledger.entries) == 2
    empty = SimulatedUser(FunctionModel(lambda r: "  "), "Need help.")
    with pytest.raises(UserSimulationError, match="empty message twice"):
        await empty.respond(view(0))


async def test_simulated_user_may_not_stop_before_asking() -> None:
    user = SimulatedUser(FunctionModel(lambda r: STOP), "Need help.")
    with pytest.raises(UserSimulationError, match="before making any request"):
        await user.respond(view(0))
    later = SimulatedUser(FunctionModel(lambda r: TRANSFER), "Need help.")
    assert (await later.respond(view(2, "I transferred you."))).signal == "transfer"


async def test_simulated_user_model_failure_is_a_user_error() -> None:
    def broken(request: ModelRequest) -> ModelResponse:
        raise RuntimeError("server down")

    with pytest.raises(UserSimulationError, match="server down"):
        await SimulatedUser(FunctionModel(broken), "x").respond(view(0))


async def test_simulated_user_strips_role_prefix_and_keeps_reasoning() -> None:
    model = FunctionModel(lambda r: ModelResponse(text="Customer: I need a refund.", reasoning="be brief"))
    reply = await SimulatedUser(model, "Refund.").respond(view(0))
    assert reply.text == "I need a refund." and reply.reasoning == "be brief"

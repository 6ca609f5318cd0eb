"""The OpenAI adapter's pure parts: message mapping, stream assembly, retry timing, configuration."""

from __future__ import annotations

import random
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from types import SimpleNamespace as NS

import pytest

from agent.messages import Message, ModelRequest, ModelSettings, ToolCall
from agent.models.base import ModelError
from agent.models.openai_compat import OpenAIModel, is_local_url
from agent.models.openai_wire import (
    StreamAccumulator,
    TextCallGate,
    ThinkStreamSplitter,
    error_detail,
    finish_reason,
    split_think,
    text_tool_calls,
    to_openai_messages,
)
from agent.models.retry import RetryLog, RetryPolicy, Verdict, call_with_retries, parse_retry_after

pytestmark = pytest.mark.core  # needs no extra: also run on the bare core install (.ci/core_check.sh)


def test_messages_map_to_the_openai_shapes() -> None:
    call = ToolCall(id="c1", name="lookup", arguments='{"q": "x"}')
    history = [
        Message.system("be brief"),
        Message.user([{"type": "text", "text": "see"}, {"type": "image_url", "image_url": {"url": "data:,"}}]),
        Message.assistant("", [call], reasoning="need data"),
        Message.tool("c1", "lookup", "found", is_error=False),
        Message.assistant("done", reasoning="easy"),
    ]
    history[1].metadata["planted_by"] = "rein"
    out = to_openai_messages(history, send_reasoning=False)
    assert out[0] == {"role": "system", "content": "be brief"}
    assert out[1]["content"][1]["type"] == "image_url" and "metadata" not in out[1]
    assert out[2] == {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": '{"q": "x"}'}}],
    }
    assert out[3] == {"role": "tool", "tool_call_id": "c1", "content": "found"}
    assert out[4] == {"role": "assistant", "content": "done"}
    with_reasoning = to_openai_messages(history, send_reasoning=True)
    assert with_reasoning[2]["reasoning_content"] == "need data"
    assert with_reasoning[4]["reasoning_content"] == "easy"


def test_finish_reasons_and_error_bodies() -> None:
    assert finish_reason("stop", has_tool_calls=True) == "tool_calls"
    assert finish_reason("length", False) == "length"
    assert finish_reason("function_call", False) == "tool_calls"
    assert finish_reason(None, False) == "stop"
    assert finish_reason("something_new", False) == "stop"
    assert error_detail({"error": {"message": "bad key"}}, "x") == "bad key"
    assert error_detail({"detail": "nope"}, "x") == "nope"
    assert error_detail(None, "fallback") == "fallback"


def test_stream_accumulator_joins_tool_call_fragments_by_index() -> None:
    acc = StreamAccumulator()
    fn = lambda name=None, args=None: NS(name=name, arguments=args)  # noqa: E731
    acc.add_tool_deltas([NS(index=0, id="a", function=fn("get_weather", '{"ci'))])
    acc.add_tool_deltas([NS(index=1, id="b", function=fn("get_time", ""))])
    acc.add_tool_deltas([NS(index=0, id=None, function=fn(None, 'ty": "Paris"}'))])
    acc.add_tool_deltas([NS(index=1, id=None, function=fn(None, '{"tz": "UTC"}'))])
    acc.finish = "tool_calls"
    response = acc.response(model="m", tool_names=[], parse_text_calls=True)
    assert [(c.id, c.name, c.arguments) for c in response.tool_calls] == [
        ("a", "get_weather", '{"city": "Paris"}'),
        ("b", "get_time", '{"tz": "UTC"}'),
    ]
    assert response.finish_reason == "tool_calls" and response.usage.requests == 1


def test_stream_accumulator_handles_servers_without_indexes() -> None:
    acc = StreamAccumulator()
    acc.add_tool_deltas([NS(index=None, id="x1", function=NS(name="f", arguments='{"a": 1}'))])
    acc.add_tool_deltas([NS(index=None, id="x2", function=NS(name="g", arguments="{}"))])
    response = acc.response(model="m", tool_names=[], parse_text_calls=False)
    assert [c.name for c in response.tool_calls] == ["f", "g"]


def test_think_blocks_become_reasoning_even_split_across_chunks() -> None:
    assert split_think("<think>plan</think>\nAnswer") == ("Answer", "plan")
    assert split_think("no think") == ("no think", None)
    assert split_think("<think>cut off") == ("", "cut off")
    splitter = ThinkStreamSplitter()
    pieces = [splitter.feed(c) for c in ["<thi", "nk>abc</th", "ink>Hel", "lo"]]
    pieces.append(splitter.flush())
    reasoning = "".join(p[0] for p in pieces)
    text = "".join(p[1] for p in pieces)
    assert (reasoning, text) == ("abc", "Hello")
    plain = ThinkStreamSplitter()
    assert plain.feed("Hi there") == ("", "Hi there")


def test_text_tool_calls_only_for_offered_tools() -> None:
    names = ["get_weather"]
    assert text_tool_calls('{"name": "get_weather", "arguments": {"city": "Oslo"}}', names)[1][0].name == "get_weather"
    tagged = 'Sure.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>'
    text, calls = text_tool_calls(tagged, names)
    assert text == "Sure." and calls[0].parsed_arguments() == {"city": "Oslo"}
    assert text_tool_calls('{"name": "rm_rf", "arguments": {}}', names) == ('{"name": "rm_rf", "arguments": {}}', [])
    assert text_tool_calls('{"name": "get_weather", "arguments": {}}', []) == ('{"name": "get_weather", "arguments": {}}', [])
    assert text_tool_calls('{"answer": 42}', names) == ('{"answer": 42}', [])


def test_text_gate_passes_prose_and_holds_json() -> None:
    prose = TextCallGate(active=True)
    assert prose.feed("  ") == "" and prose.feed("Hello") == "  Hello" and prose.feed("!") == "!"
    held = TextCallGate(active=True)
    assert held.feed('{"name"') == "" and held.feed(': "x"}') == ""
    assert held.release(became_calls=True) == ""
    json_answer = TextCallGate(active=True)
    json_answer.feed('{"a": 1}')
    assert json_answer.release(became_calls=False) == '{"a": 1}'
    assert TextCallGate(active=False).feed("{") == "{"


def test_retry_after_headers() -> None:
    assert parse_retry_after({"Retry-After": "3"}) == 3.0
    assert parse_retry_after({"retry-after-ms": "250", "retry-after": "9"}) == 0.25
    assert parse_retry_after({"retry-after": "soon"}) is None
    assert parse_retry_after({}) is None
    when = datetime(2030, 1, 1, tzinfo=UTC)
    now = (when - timedelta(seconds=7)).timestamp()
    assert parse_retry_after({"retry-after": format_datetime(when, usegmt=True)}, now=now) == pytest.approx(7.0)


def test_backoff_grows_with_jitter_and_server_hints_are_capped() -> None:
    policy = RetryPolicy(initial_delay=1.0, multiplier=2.0, max_delay=5.0, jitter=0.5, max_retry_after=10.0)
    rng = random.Random(0)
    waits = [policy.backoff(i, rng) for i in range(6)]
    for i, wait in enumerate(waits):
        base = min(5.0, 2.0**i)
        assert base * 0.5 <= wait <= base
    assert len({round(w, 6) for w in waits}) == len(waits)  # jittered, not lockstep
    assert policy.delay(0, retry_after=3.0) == 3.0
    assert policy.delay(0, retry_after=120.0) == 10.0


async def test_call_with_retries_stops_on_fatal_and_when_out_of_retries() -> None:
    slept: list[float] = []

    async def sleep(s: float) -> None:
        slept.append(s)

    outcomes: Iterator[Exception | str] = iter([TimeoutError("t"), ConnectionError("c"), "ok"])

    async def flaky() -> str:
        item = next(outcomes)
        if isinstance(item, Exception):
            raise item
        return item

    classify = lambda exc: Verdict(True, type(exc).__name__, 0.01 if isinstance(exc, TimeoutError) else None)  # noqa: E731
    log = RetryLog()
    assert await call_with_retries(flaky, classify, RetryPolicy(initial_delay=0.2, jitter=0.0), log=log, sleep=sleep) == "ok"
    assert log.attempts == 3 and slept == [0.01, 0.4] and log.reasons == ["TimeoutError", "ConnectionError"]

    async def always_fails() -> str:
        raise ValueError("bad request")

    log = RetryLog()
    with pytest.raises(ValueError):
        await call_with_retries(always_fails, lambda e: Verdict(False, "fatal"), RetryPolicy(), log=log, sleep=sleep)
    assert log.attempts == 1
    log = RetryLog()
    with pytest.raises(ValueError):
        await call_with_retries(always_fails, lambda e: Verdict(True, "again"), RetryPolicy(max_retries=2), log=log, sleep=sleep)
    assert log.attempts == 3


def test_local_urls_need_no_key_and_remote_ones_do(monkeypatch: pytest.MonkeyPatch) -> None:
    for url in ("http://localhost:8000/v1", "http://127.0.0.1:1/v1", "http://[::1]:8/v1", "http://192.168.1.5/v1", "http://gpu.local/v1"):
        assert is_local_url(url), url
    for remote in ("https://api.openai.com/v1", "https://8.8.8.8/v1", None):
        assert not is_local_url(remote), remote
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with pytest.raises(ModelError, match="OPENAI_API_KEY"):
        OpenAIModel("gpt-4o-mini")
    local = OpenAIModel("m", base_url="http://127.0.0.1:9/v1")
    assert local.client.api_key == "sk-no-key-required" and local.client.max_retries == 0


def test_environment_supplies_url_key_and_model(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", "https://llm.example.com/v1")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("REIN_MODEL", "served-model")
    model = OpenAIModel()
    assert model.model == "served-model" and model.name == "openai:served-model"
    assert str(model.client.base_url).startswith("https://llm.example.com/v1")
    assert model.send_reasoning  # not OpenAI itself: sent until the server objects
    official = OpenAIModel("gpt-4o-mini", base_url="https://api.openai.com/v1")
    assert not official.send_reasoning
    assert "max_completion_tokens" in official._params(_req(), "gpt-4o-mini")
    assert "max_tokens" in model._params(_req(), "served-model")


def _req() -> ModelRequest:
    return ModelRequest(messages=[Message.user("hi")], settings=ModelSettings(max_tokens=5, seed=1, stop=["x"]))


def test_a_server_is_sent_only_the_tools_it_may_call() -> None:
    tools = [{"type": "function", "function": {"name": n, "parameters": {"type": "object"}}} for n in ("a", "b")]
    model = OpenAIModel("served-model", base_url="http://127.0.0.1:9/v1")
    request = ModelRequest(messages=[Message.user("hi")], tools=tools, settings=ModelSettings(allowed_tools=["b"], tool_choice="auto"))
    params = model._params(request, "served-model")
    assert [t["function"]["name"] for t in params["tools"]] == ["b"] and params["tool_choice"] == "auto"
    none_left = request.model_copy(update={"settings": ModelSettings(allowed_tools=[], tool_choice="auto")})
    assert "tools" not in model._params(none_left, "served-model")


def test_tools_go_with_an_explicit_tool_choice() -> None:
    # llama-cpp-python's chatml-function-calling drops the tools of a request without tool_choice.
    tools = [{"type": "function", "function": {"name": "a", "parameters": {"type": "object"}}}]
    model = OpenAIModel("served-model", base_url="http://127.0.0.1:9/v1")
    params = model._params(ModelRequest(messages=[Message.user("hi")], tools=tools), "served-model")
    assert params["tool_choice"] == "auto"
    assert "tool_choice" not in model._params(ModelRequest(messages=[Message.user("hi")]), "served-model")
    forced = ModelRequest(messages=[Message.user("hi")], tools=tools, settings=ModelSettings(tool_choice="none"))
    assert model._params(forced, "served-model")["tool_choice"] == "none"

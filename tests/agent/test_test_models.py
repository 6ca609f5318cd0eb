"""The shipped deterministic models (scripted, function, cassette) and the cost ledger."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent.ledger import CostLedger, Price, PriceTable
from agent.messages import Message, ModelRequest, ModelResponse, ModelSettings, Usage
from agent.models import (
    CassetteModel,
    FunctionModel,
    ModelError,
    ScriptedModel,
    TextDelta,
    call,
    reply,
    resolve_model,
)

pytestmark = pytest.mark.core  # needs no extra: also run on the bare core install (.ci/core_check.sh)


def req(text: str, **settings: object) -> ModelRequest:
    return ModelRequest(messages=[Message.user(text)], settings=ModelSettings(**settings))


async def test_scripted_plays_steps_in_order_and_records_requests() -> None:
    model = ScriptedModel([reply("one"), call("f", x=1), lambda r: f"echo {r.messages[-1].text}"])
    assert (await model.complete(req("a"))).text == "one"
    second = await model.complete(req("b"))
    assert second.tool_calls[0].name == "f" and json.loads(second.tool_calls[0].arguments) == {"x": 1}
    assert (await model.complete(req("c"))).text == "echo c"
    assert [r.messages[-1].text for r in model.requests] == ["a", "b", "c"]
    model.assert_done()
    with pytest.raises(ModelError, match="no step left"):
        await model.complete(req("d"))


def test_scripted_detects_leftover_steps() -> None:
    model = ScriptedModel([reply("unused")])
    with pytest.raises(AssertionError, match="1 unused step"):
        model.assert_done()


async def test_scripted_usage_is_estimated_and_stream_yields_final() -> None:
    model = ScriptedModel([reply("hello world")])
    items = [i async for i in model.stream(req("count my tokens please"))]
    assert isinstance(items[0], TextDelta) and items[0].text == "hello world"
    final = items[-1]
    assert isinstance(final, ModelResponse)
    assert final.usage.requests == 1 and final.usage.input_tokens > 0 and final.usage.output_tokens > 0


async def test_function_model_sync_and_async() -> None:
    async def fn(request: ModelRequest) -> ModelResponse:
        return ModelResponse(text=request.messages[-1].text.upper())

    assert (await FunctionModel(fn).complete(req("hi"))).text == "HI"
    assert (await FunctionModel(lambda r: "plain").complete(req("x"))).text == "plain"


async def test_cassette_records_then_replays(tmp_path: Path) -> None:
    path = tmp_path / "calls.jsonl"
    inner = ScriptedModel([reply("live answer")])
    recorder = CassetteModel(path, inner, mode="auto")
    assert (await recorder.complete(req("q", temperature=0.0))).text == "live answer"
    assert recorder.misses == 1
    replayer = CassetteModel(path, mode="replay")
    assert (await replayer.complete(req("q", temperature=0.0))).text == "live answer"
    assert replayer.hits == 1
    # a different request (other settings) is not in the cassette
    with pytest.raises(ModelError, match="no recording"):
        await replayer.complete(req("q", temperature=0.5))
    inner.assert_done()


def test_cassette_corrupt_file_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "calls.jsonl"
    path.write_text('{"key": "abc", "response": {"text": "ok"}}\nnot json\n')
    with pytest.raises(ModelError, match=r"calls.jsonl:2: corrupt cassette entry"):
        CassetteModel(path, mode="replay")


def test_resolve_model_names() -> None:
    assert resolve_model("echo").name == "echo"
    assert isinstance(resolve_model("scripted"), ScriptedModel)
    with pytest.raises(ModelError, match="unknown model 'bogus:x'"):
        resolve_model("bogus:x")


def test_ledger_prices_and_labels() -> None:
    table = PriceTable({"gpt-4o": Price(input_per_mtok=2.5, output_per_mtok=10), "gpt-4o-mini": Price(input_per_mtok=0.15, output_per_mtok=0.6)})
    assert table.price_for("openai:gpt-4o-mini-2024-07-18").input_per_mtok == 0.15  # longest prefix wins
    assert table.price_for("local:qwen").cost(Usage(input_tokens=10**6)) == 0
    ledger = CostLedger()
    ledger.book_model("gpt-4o", Usage(input_tokens=1_000_000, output_tokens=100_000, requests=1), table)
    ledger.book_model("gpt-4o-mini", Usage(input_tokens=1_000_000, requests=1), table, label="inception")
    ledger.book_tool("search", 0.01)
    ledger.book_tool("free", 0.0)
    assert ledger.cost == pytest.approx(2.5 + 1.0 + 0.15 + 0.01)
    assert ledger.by_label() == pytest.approx({"agent": 3.51, "inception": 0.15})
    assert ledger.summary()["requests"] == 2 and len(ledger.entries) == 3

"""The @tool decorator: schemas from signatures and docstrings, validation, execution."""

from __future__ import annotations

import asyncio
import threading
from typing import Annotated, Literal

import pytest
from pydantic import BaseModel, Field

from tools import (
    CallRequest,
    Tool,
    ToolArgumentError,
    ToolError,
    ToolExecutionError,
    ToolKind,
    Toolkit,
    ToolRetryBudgetExceeded,
    execute_calls,
    load_toolkit,
    tool,
)
from tools.builtin import evaluate_arithmetic
from tools.execute import ERROR_TEXT_LIMIT, describe_exception

pytestmark = pytest.mark.core  # needs no extra: also run on the bare core install (.ci/core_check.sh)


class Address(BaseModel):
    city: str
    zip: str


@tool(kind=ToolKind.WRITE)
def ship(order_id: str, address: Address, speed: Literal["standard", "express"] = "standard") -> dict:
    """Ship an order to an address.

    Args:
        order_id: The order's id, such as '#W123'.
        address: Where to ship it.
        speed: Delivery speed.
    """
    return {"order_id": order_id, "city": address.city, "speed": speed}


def test_schema_from_signature_and_docstring() -> None:
    schema = ship.openai_schema()
    fn = schema["function"]
    assert fn["name"] == "ship"
    assert fn["description"] == "Ship an order to an address."
    params = fn["parameters"]
    assert params["required"] == ["order_id", "address"]
    assert params["properties"]["order_id"] == {"type": "string", "description": "The order's id, such as '#W123'."}
    assert params["properties"]["speed"]["enum"] == ["standard", "express"]
    assert params["additionalProperties"] is False
    assert ship.kind is ToolKind.WRITE


def test_parse_arguments_validates_and_coerces() -> None:
    args = ship.parse_arguments('{"order_id": "#W1", "address": {"city": "Oslo", "zip": "0150"}}')
    assert isinstance(args["address"], Address)
    assert args["speed"] == "standard"


def test_annotated_constraints_reach_the_schema_and_the_checks() -> None:
    @tool
    def search(query: str, k: Annotated[int, Field(ge=1, le=20)] = 5) -> str:
        """Search.

        Args:
            query: What to look for.
            k: How many results.
        """
        return query * k

    k = search.openai_schema()["function"]["parameters"]["properties"]["k"]
    assert k == {"type": "integer", "minimum": 1, "maximum": 20, "default": 5, "description": "How many results."}
    assert search.parse_arguments('{"query": "x", "k": 20}')["k"] == 20
    with pytest.raises(ToolArgumentError, match="k: Input should be less than or equal to 20"):
        search.parse_arguments('{"query": "x", "k": 1000000000000000}')


@pytest.mark.parametrize(
    ("raw", "fragment"),
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "must be a JSON object"),
        ('{"address": {"city": "Oslo", "zip": "1"}}', "order_id: Field required"),
        ('{"order_id": "#W1", "address": {"city": "Oslo"}}', "address.zip: Field required"),
        ('{"order_id": "#W1", "address": {"city": "O", "zip": "1"}, "speed": "warp"}', "speed:"),
        ('{"order_id": "#W1", "address": {"city": "O", "zip": "1"}, "extra": 1}', "extra: Extra inputs"),
    ],
)
def test_invalid_arguments_carry_the_detail(raw: str, fragment: str) -> None:
    with pytest.raises(ToolArgumentError) as info:
        ship.parse_arguments(raw)
    assert fragment in str(info.value)


async def test_async_tool_and_timeout() -> None:
    @tool(timeout_s=0.05)
    async def slow(seconds: float) -> str:
        """Sleep."""
        await asyncio.sleep(seconds)
        return "done"

    [ok] = await execute_calls([CallRequest("1", "slow", '{"seconds": 0}')], {"slow": slow})
    assert ok.content == "done" and not ok.is_error
    [late] = await execute_calls([CallRequest("2", "slow", '{"seconds": 1}')], {"slow": slow})
    assert late.is_error and late.error_kind == "timeout" and "timed out" in late.content
    assert "outcome unknown" not in late.content  # not a WRITE: nothing can have half-happened


async def test_timed_out_sync_write_has_an_unknown_outcome_and_a_daemon_thread() -> None:
    release = threading.Event()

    @tool(kind=ToolKind.WRITE, timeout_s=0.05)
    def stuck() -> str:
        """Blocks until released."""
        release.wait(10)
        return "done"

    [r] = await execute_calls([CallRequest("1", "stuck", "{}")], {"stuck": stuck})
    assert r.error_kind == "timeout"
    assert r.content == "tool 'stuck' timed out after 0.05s; outcome unknown: it may still take effect, check before retrying"
    # Its thread runs on, but as a daemon: it cannot hold the interpreter open at exit.
    [thread] = [t for t in threading.enumerate() if t.name == "rein-tool-stuck"]
    assert thread.daemon
    release.set()
    thread.join(5)


def test_idempotent_option() -> None:
    @tool(kind=ToolKind.WRITE, idempotent=True)
    def flag(on: bool) -> bool:
        """Set a flag."""
        return on

    assert flag.idempotent and not ship.idempotent
    assert not flag.with_options(idempotent=False).idempotent


async def test_every_call_is_answered_in_order() -> None:
    calls = [
        CallRequest("a", "ship", '{"order_id": "1", "address": {"city": "A", "zip": "1"}}'),
        CallRequest("b", "nope", "{}"),
        CallRequest("c", "ship", "{broken"),
    ]
    results = await execute_calls(calls, {"ship": ship})
    assert [r.call_id for r in results] == ["a", "b", "c"]
    assert not results[0].is_error
    assert results[1].error_kind == "unknown_tool" and "available tools: ship" in results[1].content
    assert results[2].error_kind == "arguments"


async def test_reads_run_concurrently_and_writes_in_order() -> None:
    log: list[str] = []

    @tool(kind=ToolKind.READ)
    async def read(name: str) -> str:
        """Read."""
        log.append(f"start {name}")
        await asyncio.sleep(0.05)
        log.append(f"end {name}")
        return name

    @tool(kind=ToolKind.WRITE)
    def write(name: str) -> str:
        """Write."""
        log.append(f"write {name}")
        return name

    tools = {"read": read, "write": write}
    calls = [
        CallRequest("1", "write", '{"name": "w1"}'),
        CallRequest("2", "read", '{"name": "r1"}'),
        CallRequest("3", "read", '{"name": "r2"}'),
        CallRequest("4", "write", '{"name": "w2"}'),
    ]
    results = await execute_calls(calls, tools)
    assert [r.content for r in results] == ["w1", "r1", "r2", "w2"]
    # Both reads start before either ends (overlap shown by order, not by a wall-clock bound
    # that a loaded machine breaks).
    assert log[:2] == ["start r1", "start r2"]
    assert log[-2:] == ["write w1", "write w2"]


async def test_retry_budget() -> None:
    @tool(max_argument_retries=1)
    def f(x: int) -> int:
        """Identity."""
        return x

    counts: dict[str, int] = {}
    [r] = await execute_calls([CallRequest("1", "f", '{"x": "nan"}')], {"f": f}, counts)
    assert r.error_kind == "arguments" and counts == {"f": 1}
    with pytest.raises(ToolRetryBudgetExceeded):
        await execute_calls([CallRequest("2", "f", "{}")], {"f": f}, counts)


async def test_execution_errors_return_or_raise() -> None:
    @tool
    def fails() -> str:
        """Fail."""
        raise KeyError("boom")

    @tool
    def refuses() -> str:
        """Refuse on purpose."""
        raise ToolError("Order not found")

    [r] = await execute_calls([CallRequest("1", "fails", "{}")], {"fails": fails})
    assert r.is_error and r.content == "Error: KeyError: 'boom'"
    [r] = await execute_calls([CallRequest("1", "refuses", "{}")], {"refuses": refuses})
    assert r.content == "Error: Order not found"
    strict = fails.with_options(on_error="raise")
    with pytest.raises(ToolExecutionError):
        await execute_calls([CallRequest("1", "fails", "{}")], {"fails": strict})


async def test_unexpected_exceptions_reach_the_model_sanitized() -> None:
    @tool
    def opens() -> str:
        """Open a file that is not there."""
        raise FileNotFoundError(2, "No such file or directory", "/srv/app/secrets/config.yaml")

    @tool
    def dumps() -> str:
        """Fail with a traceback-like, very long message."""
        raise ValueError("first line " + "x" * 1000 + "\nTraceback (most recent call last):\n  File \"/a/b.py\"")

    @tool
    def refuses() -> str:
        """A ToolError is shown in full, however long."""
        raise ToolError("see /docs/help/orders " + "y" * 500)

    tools = {"opens": opens, "dumps": dumps, "refuses": refuses}
    opened, dumped, refused = await execute_calls([CallRequest(n, n, "{}") for n in tools], tools)
    assert opened.content == "Error: FileNotFoundError: [Errno 2] No such file or directory: '<path>'"
    assert dumped.content.startswith("Error: ValueError: first line xxx") and dumped.content.endswith("…")
    assert len(dumped.content) == len("Error: ValueError: ") + ERROR_TEXT_LIMIT
    assert "Traceback" not in dumped.content
    assert refused.content == "Error: see /docs/help/orders " + "y" * 500
    assert describe_exception(ZeroDivisionError("division by zero")) == "ZeroDivisionError: division by zero"
    assert describe_exception(RuntimeError()) == "RuntimeError"
    assert describe_exception(OSError("1/2 of C:\\Users\\me\\x.txt")) == "OSError: 1/2 of <path>"


def test_toolkit_and_registry() -> None:
    kit = load_toolkit("builtin")
    assert [t.name for t in kit] == ["think", "calculate"]
    with pytest.raises(ValueError):
        Toolkit([ship, ship])
    with pytest.raises(KeyError, match="unknown toolkit"):
        load_toolkit("nope")
    merged = kit.merged(load_toolkit("recovery"))
    assert "transfer_to_human_agents" in merged and isinstance(merged["think"], Tool)


def test_calculate_is_safe() -> None:
    assert evaluate_arithmetic("(2 + 3) * 4 / 2") == 10
    for hostile in ["__import__('os')", "2 ** 10000", "[1][0]", "1/0"]:
        with pytest.raises(ToolError):
            evaluate_arithmetic(hostile)
    with pytest.raises(ToolError, match=r"^not arithmetic: \"__import__\('os'\)\"; use numbers, \+ - \* / // % \*\* and"):
        evaluate_arithmetic("__import__('os')")
    # '^' is how calculators write powers: the error says what to write instead.
    with pytest.raises(ToolError, match=r"'\^' is not a power here: write powers with \*\*"):
        evaluate_arithmetic("67495912^3")
    assert evaluate_arithmetic("67495912 ** 3") == 67495912**3


async def test_calculate_gives_the_corrected_call_for_a_caret_power() -> None:
    from tools.builtin import calculate
    from tools.execute import CallRequest, execute_calls

    power, other, broken = await execute_calls(
        [CallRequest("1", "calculate", {"expression": "67495912^3 - 5"}),
         CallRequest("2", "calculate", {"expression": "2 & 3"}),
         CallRequest("3", "calculate", {"expression": "2^(3"})],
        {"calculate": calculate},
    )
    assert power.is_error and power.content == (
        "Error: '^' is not a power here: write powers with ** (for example 2 ** 10). "
        'Call calculate again now with {"expression": "67495912**3 - 5"}.')
    # no certain correction, no call: an operator that is not arithmetic, or a '^' in a broken expression
    assert "Call calculate again" not in other.content and other.content.startswith("Error: not arithmetic")
    assert "Call calculate again" not in broken.content

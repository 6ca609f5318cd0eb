"""`rein mcp serve` over HTTP with API keys: keys checked, hosts checked, threads and journaled
direct tool calls kept per tenant. Real `rein` processes, the SDK's client, the real SQLite file."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sqlite3
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")
httpx = pytest.importorskip("httpx")

from mcp import Client  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402
from mcp.shared._httpx_utils import create_mcp_http_client  # noqa: E402

from agent import Agent  # noqa: E402
from agent.cli.mcp_calls import CALL_ID_META, calls_thread  # noqa: E402
from agent.cli.mcp_server import AgentMcpServer, thread_key  # noqa: E402
from agent.server.auth import key_id  # noqa: E402
from tools import tool  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from test_mcp_serve import REIN, banner_url, echo_spec, history, server_env, text  # noqa: E402

KEYS = "alice: alice-key-1\nalice: alice-key-2\nbob-key\n"
BOB = key_id("bob-key")
INITIALIZE = {
    "jsonrpc": "2.0", "id": 1, "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
}
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


@pytest.fixture
def spec(tmp_path: Path) -> Path:
    return echo_spec(tmp_path)


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return server_env(tmp_path)


@pytest.fixture
def keys(tmp_path: Path) -> Path:
    path = tmp_path / "keys.txt"
    path.write_text(KEYS)
    return path


@contextlib.contextmanager
def running(*args: str, env: dict[str, str]) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """A `rein mcp serve --transport http --port 0 ARGS` process and its URL; killed at the end."""
    cmd = [str(REIN), "mcp", "serve", "--transport", "http", "--port", "0", *args]
    process = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = process.stdout.readline() if process.stdout else ""
        if "/mcp" not in line:
            process.kill()
            pytest.fail(f"no banner: {line!r} {process.communicate()[1]}")
        yield process, banner_url(line)
    finally:
        if process.poll() is None:
            process.kill()
        process.wait()


def stop(process: subprocess.Popen[str]) -> str:
    """SIGTERM, a clean exit, and what the server said on stderr."""
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=20)
    assert process.returncode == 0
    return err


def client(url: str, key: str | None) -> Client:
    """The SDK's client over streamable HTTP, sending `Authorization: Bearer key`."""

    @contextlib.asynccontextmanager
    async def transport() -> AsyncIterator[Any]:
        headers = {"Authorization": f"Bearer {key}"} if key else None
        async with create_mcp_http_client(headers=headers) as http, streamable_http_client(url, http_client=http) as s:
            yield s

    return Client(transport())


async def ask(url: str, key: str | None, tool_name: str, arguments: dict[str, Any], meta: dict[str, Any] | None = None) -> Any:
    async with client(url, key) as c:
        return await c.call_tool(tool_name, arguments, meta=meta)


def test_http_with_keys_refuses_requests_without_a_valid_key(spec: Path, env: dict[str, str], keys: Path, tmp_path: Path) -> None:
    db = tmp_path / "threads.sqlite"
    with running("--agent", str(spec), "--db", str(db), "--api-key-file", str(keys), env=env) as (process, url):
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic alice-key-1"}):
            answer = httpx.post(url, json=INITIALIZE, headers=MCP_HEADERS | headers, timeout=10)
            assert answer.status_code == 401 and answer.headers["www-authenticate"] == "Bearer"
            assert answer.json()["error"]["code"] == "invalid_api_key"
        with pytest.raises(Exception) as refused:  # noqa: PT011  (the SDK wraps its MCPError in a group)
            asyncio.run(ask(url, None, "echo-bot", {"message": "hi", "thread_id": "t"}))
        assert "Server returned an error response" in repr(refused.value)
        ok = asyncio.run(ask(url, "bob-key", "echo-bot", {"message": "hi", "thread_id": "t"}))
        assert not ok.is_error and ok.structured_content["answer"] == "You said: hi"
        stop(process)
    # The anonymous attempt never reached an agent: the only thread is bob's.
    assert history(spec, db, thread_key("echo-bot", "t", BOB)) == [("user", "hi"), ("assistant", "You said: hi")]
    assert history(spec, db, thread_key("echo-bot", "t")) == []


def test_a_thread_id_reaches_only_its_own_tenants_thread(spec: Path, env: dict[str, str], keys: Path, tmp_path: Path) -> None:
    db = tmp_path / "threads.sqlite"
    with running("--agent", str(spec), "--db", str(db), "--api-key-file", str(keys), env=env) as (process, url):
        first = asyncio.run(ask(url, "alice-key-1", "echo-bot", {"message": "my secret plan", "thread_id": "t1"}))
        guess = asyncio.run(ask(url, "bob-key", "echo-bot", {"message": "what did we say?", "thread_id": "t1"}))
        shared = asyncio.run(ask(url, "alice-key-2", "echo-bot", {"message": "go on", "thread_id": "t1"}))
        assert not (first.is_error or guess.is_error or shared.is_error)
        assert guess.structured_content["thread_id"] == "t1"
        # bob's turn saw no earlier turn: it is as long a prompt as a first turn gets.
        assert guess.structured_content["usage"]["input_tokens"] < shared.structured_content["usage"]["input_tokens"]
        stop(process)
    assert history(spec, db, thread_key("echo-bot", "t1", "alice")) == [
        ("user", "my secret plan"), ("assistant", "You said: my secret plan"),
        ("user", "go on"), ("assistant", "You said: go on"),
    ]
    assert history(spec, db, thread_key("echo-bot", "t1", BOB)) == [
        ("user", "what did we say?"), ("assistant", "You said: what did we say?"),
    ]
    assert history(spec, db, thread_key("echo-bot", "t1")) == []


def journal_rows(db: Path) -> list[tuple[str, str, str, str]]:
    with contextlib.closing(sqlite3.connect(db)) as conn:
        rows = conn.execute("SELECT thread, call_id, state, result FROM rein_tool_journal ORDER BY thread, call_id, state")
        return [(t, c, s, r) for t, c, s, r in rows]


def test_exposed_tool_calls_are_journaled_per_tenant_and_run_once_per_call_id(
    spec: Path, env: dict[str, str], keys: Path, tmp_path: Path,
) -> None:
    db, notes = tmp_path / "threads.sqlite", Path(env["NOTES_FILE"])
    args = ("--agent", str(spec), "--db", str(db), "--api-key-file", str(keys), "--expose-tools")
    once = {CALL_ID_META: "c1"}
    with running(*args, env=env) as (process, url):
        first = asyncio.run(ask(url, "alice-key-1", "echo-bot.note", {"text": "buy milk"}, once))
        again = asyncio.run(ask(url, "alice-key-2", "echo-bot.note", {"text": "buy milk"}, once))  # a retry
        bobs = asyncio.run(ask(url, "bob-key", "echo-bot.note", {"text": "buy milk"}, once))  # bob's own c1
        looked = asyncio.run(ask(url, "bob-key", "echo-bot.lookup", {"key": "k"}))
        assert [text(r) for r in (first, again, bobs, looked)] == ["noted buy milk"] * 3 + ["value of k"]
        assert notes.read_text() == "buy milk\nbuy milk\n"  # alice's call ran once, bob's once
        stop(process)
    rows = journal_rows(db)
    alice, bob = calls_thread("echo-bot.note", "alice"), calls_thread("echo-bot.note", BOB)
    assert [(t, c, s) for t, c, s, _ in rows if c == "c1"] == [
        (alice, "c1", "finished"), (alice, "c1", "started"), (bob, "c1", "finished"), (bob, "c1", "started"),
    ]
    lookups = [(t, s) for t, c, s, _ in rows if t == calls_thread("echo-bot.lookup", BOB)]
    assert lookups == [(calls_thread("echo-bot.lookup", BOB), "finished")]  # a READ: its answer only
    assert all(t.startswith(("@alice/", f"@{BOB}/")) for t, *_ in rows)


def test_a_non_loopback_host_needs_keys_or_an_explicit_no_auth(spec: Path, env: dict[str, str], keys: Path) -> None:
    refused = subprocess.run(
        [str(REIN), "mcp", "serve", "--transport", "http", "--host", "0.0.0.0", "--port", "0", "--agent", str(spec)],
        env=env, capture_output=True, text=True, timeout=60,
    )
    assert refused.returncode == 2 and refused.stdout == ""
    assert refused.stderr.count("\n") == 1 and "refusing to serve 0.0.0.0 without API keys" in refused.stderr
    contradictory = subprocess.run(
        [str(REIN), "mcp", "serve", "--transport", "http", "--host", "0.0.0.0", "--port", "0", "--agent", str(spec),
         "--api-key-file", str(keys), "--no-auth"],
        env=env, capture_output=True, text=True, timeout=60,
    )
    assert contradictory.returncode == 2 and "--no-auth contradicts" in contradictory.stderr
    stdio = subprocess.run([str(REIN), "mcp", "serve", "--api-key-file", str(keys)], env=env,
                           capture_output=True, text=True, timeout=60)
    assert stdio.returncode == 2 and "apply to --transport http only" in stdio.stderr
    with running("--host", "0.0.0.0", "--agent", str(spec), "--db", "memory", "--no-auth", env=env) as (process, url):
        answer = asyncio.run(ask(url.replace("0.0.0.0", "127.0.0.1"), None, "echo-bot", {"message": "hi"}))
        assert answer.structured_content["answer"] == "You said: hi"
        assert "WARNING: --no-auth on 0.0.0.0" in stop(process)


def test_the_host_header_is_checked_on_every_interface(spec: Path, env: dict[str, str], keys: Path) -> None:
    args = ("--host", "0.0.0.0", "--agent", str(spec), "--db", "memory", "--api-key-file", str(keys),
            "--allowed-host", "mcp.example.com")
    with running(*args, env=env) as (process, url):
        local = url.replace("0.0.0.0", "127.0.0.1")
        port = local.rsplit(":", 1)[1].split("/")[0]
        auth = MCP_HEADERS | {"Authorization": "Bearer bob-key"}

        def status(host: str, origin: str | None = None) -> int:
            headers = auth | {"Host": host} | ({"Origin": origin} if origin else {})
            return httpx.post(local, json=INITIALIZE, headers=headers, timeout=10).status_code

        assert status(f"evil.example:{port}") == 421  # a rebound DNS name
        assert status(f"127.0.0.1:{port}", origin="http://evil.example") == 403
        assert status(f"mcp.example.com:{port}") == 200 and status("mcp.example.com", "https://mcp.example.com") == 200
        ok = asyncio.run(ask(local, "bob-key", "echo-bot", {"message": "hi"}))
        assert ok.structured_content["answer"] == "You said: hi"
        stop(process)


# --- exactly-once of a direct call, in process ---------------------------------------------------

RUNS: list[str] = []


@tool(kind="WRITE", on_error="raise")
def charge(amount: int) -> str:
    """Charge an amount; the first attempt dies after the money moved.

    Args:
        amount: Cents.
    """
    RUNS.append(f"charged {amount}")
    if len(RUNS) == 1:
        raise RuntimeError("connection lost after the charge")
    return f"charged {amount}"


def test_a_write_call_cut_off_is_not_run_again_under_the_same_call_id(tmp_path: Path) -> None:
    agent = Agent("echo", [charge], name="shop", checkpointer=f"sqlite:{tmp_path / 'threads.sqlite'}")
    server = AgentMcpServer({"shop": agent}, expose_tools=True)

    async def calls() -> list[Any]:
        try:
            once = {CALL_ID_META: "order-7"}
            cut = await server.call_tool("shop.charge", {"amount": 500}, "alice", once)
            retried = await server.call_tool("shop.charge", {"amount": 500}, "alice", once)
            other = await server.call_tool("shop.charge", {"amount": 500}, "alice", {CALL_ID_META: "order-8"})
            return [cut, retried, other]
        finally:
            await server.aclose()

    RUNS.clear()
    cut, retried, other = asyncio.run(calls())
    assert cut.is_error and "connection lost" in text(cut)
    assert retried.is_error and "interrupted" in text(retried)  # outcome unknown: never charged twice
    assert (other.is_error, text(other)) == (False, "charged 500")
    assert RUNS == ["charged 500", "charged 500"]


def test_a_session_belongs_to_the_tenant_that_opened_it(spec: Path, env: dict[str, str], keys: Path, tmp_path: Path) -> None:
    with running("--agent", str(spec), "--db", str(tmp_path / "threads.sqlite"), "--api-key-file", str(keys),
                 env=env) as (process, url):
        opened = httpx.post(url, json=INITIALIZE, headers=MCP_HEADERS | {"Authorization": "Bearer alice-key-1"}, timeout=10)
        assert opened.status_code == 200, opened.text
        session = opened.headers["mcp-session-id"]
        listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
        for key, status in (("bob-key", 404), ("alice-key-2", 200)):
            answer = httpx.post(url, json=listing, timeout=10, headers=MCP_HEADERS | {
                "Authorization": f"Bearer {key}", "Mcp-Session-Id": session, "Mcp-Protocol-Version": "2025-06-18"})
            assert answer.status_code == status, (key, answer.text)
        # Nor may bob open the session's stream of server messages.
        stream = httpx.get(url, timeout=10, headers={"Accept": "text/event-stream", "Authorization": "Bearer bob-key",
                                                      "Mcp-Session-Id": session})
        assert stream.status_code == 404
        stop(process)

"""`rein mcp serve`: agents as MCP tools, over stdio and streamable HTTP (real `rein` processes),
checked with the SDK's own client; failure paths against the same server in process."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

from mcp import Client, StdioServerParameters  # noqa: E402

from agent import Agent, FunctionModel, ScriptedModel  # noqa: E402
from agent.cli.mcp_server import AgentMcpServer, thread_key  # noqa: E402
from agent.errors import UserFacingError  # noqa: E402
from agent.messages import ModelRequest  # noqa: E402
from agent.models import call, reply  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import mcp_serve_tools  # noqa: E402

REIN = Path(sys.executable).parent / "rein"


def echo_spec(tmp_path: Path) -> Path:
    """A spec of the echo-bot agent with the tools of mcp_serve_tools."""
    path = tmp_path / "echo.yaml"
    path.write_text('name: echo-bot\nmodel: echo\ntools: ["mcp_serve_tools:TOOLS"]\n')
    return path


def server_env(tmp_path: Path) -> dict[str, str]:
    """The server's environment: our test tools importable, and where `note` writes."""
    path = os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path, "NOTES_FILE": str(tmp_path / "notes.txt"), "REIN_HOME": str(tmp_path)}


@pytest.fixture
def spec(tmp_path: Path) -> Path:
    return echo_spec(tmp_path)


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return server_env(tmp_path)


def banner_url(line: str) -> str:
    """The /mcp URL of the server's first line: `rein mcp serve: TOOLS on URL (auth …)`."""
    return "http" + line.split(" on http", 1)[1].split()[0]


def text(result: Any) -> str:
    return "\n".join(block.text for block in result.content)


async def converse(client: Client, notes: Path) -> None:
    """What both transports must do: list, two turns on one thread, a new thread, tools, errors."""
    listed = {t.name: t for t in (await client.list_tools()).tools}
    assert sorted(listed) == ["echo-bot", "echo-bot.lookup", "echo-bot.note"]  # wipe needs approval
    assert listed["echo-bot"].input_schema["required"] == ["message"]
    lookup, note = listed["echo-bot.lookup"].annotations, listed["echo-bot.note"].annotations
    assert lookup is not None and lookup.read_only_hint is True
    assert note is not None and note.destructive_hint is True
    assert listed["echo-bot.note"].input_schema["properties"]["text"]["type"] == "string"

    first = await client.call_tool("echo-bot", {"message": "hello there", "thread_id": "t1"})
    second = await client.call_tool("echo-bot", {"message": "again", "thread_id": "t1"})
    fresh = await client.call_tool("echo-bot", {"message": "again"})
    assert not first.is_error and not second.is_error and not fresh.is_error
    assert first.structured_content["answer"] == "You said: hello there"
    assert second.structured_content | {"usage": None, "cost": None} == {
        "answer": "You said: again", "thread_id": "t1", "termination": "agent_stop",
        "usage": None, "cost": None, "error": None,
    }
    # The echo model is prompted with the whole thread: the same message costs more input on t1.
    assert second.structured_content["usage"]["input_tokens"] > fresh.structured_content["usage"]["input_tokens"]
    new_thread = fresh.structured_content["thread_id"]
    assert new_thread not in ("", "t1") and f"thread_id: {new_thread}" in text(fresh)

    noted = await client.call_tool("echo-bot.note", {"text": "buy milk"})
    assert (noted.is_error, text(noted)) == (False, "noted buy milk")
    assert notes.read_text() == "buy milk\n"
    bad = await client.call_tool("echo-bot.note", {"text": 3})
    assert bad.is_error and text(bad) == "invalid arguments for 'note': text: Input should be a valid string"
    missing = await client.call_tool("echo-bot", {"thread_id": "t1"})
    assert missing.is_error and "message is required" in text(missing)
    unknown = await client.call_tool("echo-bot.wipe", {})
    assert unknown.is_error and "unknown tool 'echo-bot.wipe'" in text(unknown)
    assert notes.exists()


def history(spec: Path, db: Path, thread: str) -> list[tuple[str, str]]:
    agent = Agent.from_spec(spec, checkpointer=f"sqlite:{db}")
    try:
        return [(m.role, m.text) for m in agent.history(thread)]
    finally:
        agent.close()


def test_stdio_serves_the_agent_and_its_tools(spec: Path, env: dict[str, str], tmp_path: Path) -> None:
    db = tmp_path / "threads.sqlite"
    params = StdioServerParameters(
        command=str(REIN), args=["mcp", "serve", "--agent", str(spec), "--db", str(db), "--expose-tools"], env=env,
    )

    async def session() -> None:
        async with Client(params) as client:
            await converse(client, Path(env["NOTES_FILE"]))

    asyncio.run(session())
    # Both turns landed on one thread, stored under the MCP namespace.
    assert history(spec, db, thread_key("echo-bot", "t1")) == [
        ("user", "hello there"), ("assistant", "You said: hello there"),
        ("user", "again"), ("assistant", "You said: again"),
    ]
    assert history(spec, db, "echo-bot/t1") == []


@pytest.fixture
def http_server(spec: Path, env: dict[str, str], tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], str]]:
    cmd = [str(REIN), "mcp", "serve", "--transport", "http", "--port", "0", "--agent", str(spec),
           "--db", str(tmp_path / "threads.sqlite"), "--expose-tools"]
    process = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = process.stdout.readline() if process.stdout else ""
        assert "/mcp" in line, f"no banner: {line!r} {process.stderr.read() if process.poll() is not None and process.stderr else ''}"
        yield process, banner_url(line)
    finally:
        if process.poll() is None:
            process.kill()
        process.wait()


def test_streamable_http_serves_the_agent_and_stops_on_sigterm(http_server: tuple[subprocess.Popen[str], str], env: dict[str, str]) -> None:
    process, url = http_server
    assert url.startswith("http://127.0.0.1:")

    async def session() -> None:
        async with Client(url) as client:
            await converse(client, Path(env["NOTES_FILE"]))

    asyncio.run(session())
    process.send_signal(signal.SIGTERM)
    out, _ = process.communicate(timeout=20)
    assert process.returncode == 0 and "stopped" in out


def test_bad_spec_is_a_clear_error_not_a_server(tmp_path: Path) -> None:
    done = subprocess.run([str(REIN), "mcp", "serve", "--agent", str(tmp_path / "missing.yaml")],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "missing.yaml" in done.stderr


# --- failures, against the same server in process (the SDK's in-memory client) ----------------


def serve(*agents: Agent, expose_tools: bool = False) -> AgentMcpServer:
    return AgentMcpServer({a.name: a for a in agents}, expose_tools=expose_tools)


async def ask(server: AgentMcpServer, *calls: dict[str, Any], tool: str = "bot") -> list[Any]:
    async with Client(server.lowlevel()) as client:
        return list(await asyncio.gather(*(client.call_tool(tool, c) for c in calls)))


def test_a_model_error_is_a_tool_error_and_the_server_keeps_serving() -> None:
    model = ScriptedModel([], name="empty")
    server = serve(Agent(model, name="bot", checkpointer="memory"))

    async def both() -> list[Any]:
        failed = await ask(server, {"message": "hi", "thread_id": "x"})
        model.add(reply("back"))
        return [*failed, *(await ask(server, {"message": "hi again", "thread_id": "x"}))]

    failed, ok = asyncio.run(both())
    assert failed.is_error and text(failed).startswith("the turn ended in model_error: ModelError: scripted model 'empty' has no step left")
    assert failed.structured_content["thread_id"] == "x"
    assert (ok.is_error, ok.structured_content["answer"]) == (False, "back")


def test_a_busy_thread_is_a_tool_error() -> None:
    started, release = asyncio.Event(), asyncio.Event()

    async def slow(request: ModelRequest) -> str:
        started.set()
        await release.wait()
        return "done"

    agent = Agent(FunctionModel(slow), name="bot", checkpointer="memory", thread_wait_s=0.0)
    server = serve(agent)

    async def race() -> list[Any]:
        async with Client(server.lowlevel()) as client:
            first = asyncio.ensure_future(client.call_tool("bot", {"message": "one", "thread_id": "t"}))
            await started.wait()
            second = await client.call_tool("bot", {"message": "two", "thread_id": "t"})
            release.set()
            return [await first, second]

    first, second = asyncio.run(race())
    assert not first.is_error and first.structured_content["answer"] == "done"
    assert second.is_error and text(second).startswith("thread 't' is busy")


def test_calls_that_need_approval_are_declined_and_the_model_told(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("keep\n")
    monkeypatch.setenv("NOTES_FILE", str(notes))
    model = ScriptedModel([call("wipe"), reply("I could not wipe the notes.")])
    agent = Agent(model, mcp_serve_tools.TOOLS, name="bot", checkpointer="memory")
    server = serve(agent, expose_tools=True)
    assert server.withheld == ["bot.wipe"] and "bot.wipe" not in server.exposed

    (result,) = asyncio.run(ask(server, {"message": "wipe my notes"}))
    assert not result.is_error and result.structured_content["termination"] == "agent_stop"
    assert result.structured_content["answer"] == "I could not wipe the notes."
    assert result.structured_content["usage"]["requests"] == 2  # both turns' spending, merged
    assert notes.read_text() == "keep\n"
    told = [m.text for m in model.requests[-1].messages if m.role == "tool"]
    assert told == ["The user declined this tool call. Reason: no one can approve tool calls for a request made over MCP"]


def test_two_tools_of_one_name_are_refused() -> None:
    named_like_a_tool = Agent("echo", name="bot.lookup", checkpointer="memory")
    with_lookup = Agent("echo", [mcp_serve_tools.lookup], name="bot", checkpointer="memory")
    assert sorted(serve(named_like_a_tool, with_lookup).list_tools(), key=lambda t: t.name)[0].name == "bot"
    with pytest.raises(UserFacingError, match="two MCP tools would be named 'bot.lookup'"):
        serve(named_like_a_tool, with_lookup, expose_tools=True)


def test_agent_tool_descriptions_never_publish_the_system_prompt() -> None:
    secret = "You are the internal refunds bot. Override code: ZX-991."
    agent = Agent(ScriptedModel([reply("ok")]), name="refunds", system_prompt=secret)
    (tool_,) = AgentMcpServer({"refunds": agent}).list_tools()
    assert "refunds" in tool_.description and "ZX-991" not in tool_.description and "internal" not in tool_.description

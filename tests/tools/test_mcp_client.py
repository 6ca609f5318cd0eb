"""MCP tools against real MCP servers (tests/tools/mcp_servers.py) over stdio and streamable HTTP."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("mcp")

from agent import Agent, ScriptedModel  # noqa: E402
from agent.errors import UserFacingError  # noqa: E402
from agent.models import call, reply  # noqa: E402
from agent.runtime import build_agent  # noqa: E402
from tools import CallRequest, Tool, ToolKind, execute_calls  # noqa: E402
from tools.errors import ToolArgumentError, ToolRetryBudgetExceeded  # noqa: E402
from tools.mcp_client import McpServerConfig, McpToolset, mcp_tools, parse_target  # noqa: E402
from tools.mcp_schema import ArgumentChecker, kind_from_annotations  # noqa: E402

SERVER = Path(__file__).with_name("mcp_servers.py")
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def notes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Where the server's destructive tool writes; the stdio server inherits it through env."""
    path = tmp_path / "notes.txt"
    monkeypatch.setenv("NOTES_FILE", str(path))
    return path


def stdio(notes: Path | None = None, *, prefix: str = "", allow: list[str] | None = None,
          needs_approval: bool | None = None) -> McpServerConfig:
    env = {"NOTES_FILE": str(notes)} if notes is not None else None
    return McpServerConfig(command=sys.executable, args=[str(SERVER), "stdio"], env=env, prefix=prefix, allow=allow,
                           needs_approval=needs_approval)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class HttpServer:
    """The test server over streamable HTTP on 127.0.0.1, started and stopped by the test."""

    def __init__(self, notes: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.notes = notes
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        env = {**os.environ, "NOTES_FILE": str(self.notes)}
        self.process = subprocess.Popen(
            [sys.executable, str(SERVER), "http", str(self.port)], env=env, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return
            except OSError:
                if self.process.poll() is not None:
                    raise RuntimeError("the MCP test server exited at start") from None
                time.sleep(0.05)
        raise RuntimeError("the MCP test server did not start listening")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self.process = None


@pytest.fixture
def http_server(notes: Path) -> Iterator[HttpServer]:
    server = HttpServer(notes)
    server.start()
    yield server
    server.stop()


async def run(tools: dict[str, Tool], name: str, arguments: str) -> tuple[bool, str | None, str]:
    result = (await execute_calls([CallRequest("c1", name, arguments)], tools))[0]
    return result.is_error, result.error_kind, result.content


def process_gone(pid: int, within_s: float = 10.0) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


# --- schema and annotation mapping (no server) -----------------------------------------------


def test_argument_checker_names_every_problem_at_its_path() -> None:
    checker = ArgumentChecker(
        "t",
        {
            "type": "object",
            "properties": {
                "mode": {"enum": ["fast", "slow"]},
                "items": {"type": "array", "items": {"type": "integer"}},
            },
            "required": ["mode"],
            "additionalProperties": False,
        },
    )
    checker.check({"mode": "fast", "items": [1, 2]})
    with pytest.raises(ToolArgumentError) as info:
        checker.check({"items": [1, "two"], "extra": True})
    text = str(info.value)
    assert text.startswith("invalid arguments for 't': ")
    assert "'mode' is a required property" in text
    assert "items.1: 'two' is not of type 'integer'" in text
    assert "'extra' was unexpected" in text
    with pytest.raises(ValueError, match="invalid inputSchema"):
        ArgumentChecker("bad", {"type": "object", "properties": {"x": {"type": "no-such-type"}}})


def test_annotations_map_onto_kinds() -> None:
    from mcp.types import ToolAnnotations as A

    assert kind_from_annotations(None) == (ToolKind.GENERIC, False, False)
    assert kind_from_annotations(A(read_only_hint=True, destructive_hint=True)) == (ToolKind.READ, False, False)
    assert kind_from_annotations(A(destructive_hint=True)) == (ToolKind.WRITE, True, False)
    assert kind_from_annotations(A(read_only_hint=False, destructive_hint=False, idempotent_hint=True)) == (
        ToolKind.WRITE,
        False,
        True,
    )
    assert kind_from_annotations(A(title="only a title")) == (ToolKind.GENERIC, False, False)


def test_config_needs_exactly_one_transport_and_parses_targets() -> None:
    with pytest.raises(ValueError, match="exactly one of command"):
        McpServerConfig()
    with pytest.raises(ValueError, match="exactly one of command"):
        McpServerConfig(command="python", url="http://127.0.0.1:1/mcp")
    with pytest.raises(ValueError, match="headers apply to url"):
        McpServerConfig(command="python", headers={"A": "b"})
    assert parse_target("http://127.0.0.1:9000/mcp").url == "http://127.0.0.1:9000/mcp"
    cfg = parse_target("python -m 'my server'")
    assert (cfg.command, cfg.args) == ("python", ["-m", "my server"])
    assert McpServerConfig(command="/usr/bin/python3", args=["/a/b/srv.py", "stdio"]).label == "python3 srv.py stdio"


# --- stdio ----------------------------------------------------------------------------------


def test_stdio_listing_builds_rein_tools_with_prefix_and_allow_list(notes: Path) -> None:
    tools = {t.name: t for t in mcp_tools(stdio(notes, prefix="t_", allow=["add", "write_note", "tag", "fail"]))}
    assert list(tools) == ["t_add", "t_write_note", "t_tag", "t_fail"]
    add = tools["t_add"]
    assert add.kind is ToolKind.READ and not add.needs_approval
    assert add.description == "Add two integers."
    assert add.parameters["properties"] == {"a": {"type": "integer"}, "b": {"default": 0, "type": "integer"}}
    assert add.parameters["required"] == ["a"]
    assert add.metadata["mcp_tool"] == "add"
    assert tools["t_write_note"].kind is ToolKind.WRITE and tools["t_write_note"].needs_approval
    assert tools["t_tag"].kind is ToolKind.WRITE and tools["t_tag"].idempotent and not tools["t_tag"].needs_approval
    assert tools["t_fail"].kind is ToolKind.GENERIC
    # The spec may switch approval off (or on) for every tool of a server.
    quiet = {t.name: t for t in mcp_tools(stdio(notes, allow=["write_note"], needs_approval=False))}
    assert not quiet["write_note"].needs_approval
    with pytest.raises(ValueError, match=r"has no tool 'nope'; it offers: add, crash, echo"):
        mcp_tools(stdio(notes, allow=["add", "nope"]))


async def test_stdio_calls_errors_timeout_crash_and_reconnect(notes: Path) -> None:
    toolset = McpToolset(stdio(notes))
    tools = {t.name: t for t in await toolset.atools()}
    # Only this tool gets a short limit: starting a server (first call, reconnects) counts against
    # a call's timeout, and takes over a second on a loaded machine.
    tools["slow"] = tools["slow"].with_options(timeout_s=1.0)
    try:
        assert await run(tools, "add", '{"a": 2, "b": 3}') == (False, None, "5")
        # Bad arguments never reach the server; they go back to the model, counted in the budget.
        is_error, kind, text = await run(tools, "add", '{"a": "two"}')
        assert (is_error, kind) == (True, "arguments") and "a: 'two' is not of type 'integer'" in text
        # The tool's own error reaches the model with the server's message.
        is_error, kind, text = await run(tools, "fail", '{"reason": "no stock"}')
        assert (is_error, kind) == (True, "execution") and "cannot comply: no stock" in text
        # A slow call times out; the session survives it.
        started = time.monotonic()
        is_error, kind, text = await run(tools, "slow", '{"seconds": 30}')
        assert (is_error, kind) == (True, "timeout") and time.monotonic() - started < 5
        is_error, _, first_pid = await run(tools, "pid", "{}")
        assert not is_error
        # The server dies mid-call: a tool error naming the server, outcome unknown, no hang.
        started = time.monotonic()
        is_error, kind, text = await run(tools, "crash", "{}")
        assert (is_error, kind) == (True, "execution") and time.monotonic() - started < 5
        assert "MCP server 'python mcp_servers.py stdio' went away during 'crash'" in text
        assert "outcome unknown" in text
        # The next call reconnects: a new server process answers.
        is_error, _, second_pid = await run(tools, "pid", "{}")
        assert not is_error and second_pid != first_pid
        assert await run(tools, "echo", '{"text": "still here"}') == (False, None, "still here")
    finally:
        await toolset.aclose()
    assert process_gone(int(second_pid))


def test_the_session_closes_with_its_event_loop(notes: Path) -> None:
    toolset = McpToolset(stdio(notes))
    tools = {t.name: t for t in toolset.tools()}

    async def one_call() -> str:
        return (await run(tools, "pid", "{}"))[2]

    pid = int(asyncio.run(one_call()))  # no aclose: asyncio.run's end cancels the session's task
    assert process_gone(pid)


def test_a_server_that_cannot_start_is_a_clear_error(tmp_path: Path) -> None:
    missing = McpServerConfig(command=sys.executable, args=[str(tmp_path / "nowhere.py")], connect_timeout_s=20)
    with pytest.raises(ConnectionError, match=r"cannot reach MCP server 'python nowhere.py'"):
        mcp_tools(missing)


def test_missing_sdk_names_the_extra() -> None:
    code = (
        "import sys; sys.modules['mcp'] = None\n"
        "from tools.mcp_client import mcp_tools\n"
        "try:\n    mcp_tools('python -m nothing')\n"
        "except ImportError as exc:\n    print(exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert "pip install 'rein-runtime[mcp]'" in out.stdout, out.stderr


# --- streamable HTTP ------------------------------------------------------------------------


async def test_http_calls_crash_and_dead_server(http_server: HttpServer) -> None:
    toolset = McpToolset(McpServerConfig(url=http_server.url, name="notes-api", timeout_s=5))
    tools = {t.name: t for t in await toolset.atools()}
    try:
        assert await run(tools, "add", '{"a": 1}') == (False, None, "1")
        assert await run(tools, "echo", '{"text": "hi"}') == (False, None, "hi")
        started = time.monotonic()
        is_error, kind, text = await run(tools, "crash", "{}")
        assert (is_error, kind) == (True, "execution") and "MCP server 'notes-api' went away" in text
        assert time.monotonic() - started < 5
        # Still dead: the reconnect fails at once, and the tool error names the server.
        started = time.monotonic()
        is_error, kind, text = await run(tools, "echo", '{"text": "anyone?"}')
        assert (is_error, kind) == (True, "execution") and "cannot reach MCP server 'notes-api'" in text
        assert time.monotonic() - started < 5
        # Back up on the same port: the next call reconnects by itself.
        http_server.start()
        assert await run(tools, "echo", '{"text": "back"}') == (False, None, "back")
    finally:
        await toolset.aclose()


async def test_http_headers_reach_the_server(http_server: HttpServer) -> None:
    config = McpServerConfig(url=http_server.url, headers={"X-Rein-Token": "s3cret"}, allow=["header"])
    toolset = McpToolset(config)
    tools = {t.name: t for t in await toolset.atools()}
    try:
        assert await run(tools, "header", '{"name": "X-Rein-Token"}') == (False, None, "s3cret")
    finally:
        await toolset.aclose()


async def test_http_server_stopped_then_restarted_between_calls(http_server: HttpServer) -> None:
    toolset = McpToolset(McpServerConfig(url=http_server.url, name="notes-api", timeout_s=10))
    tools = {t.name: t for t in await toolset.atools()}
    try:
        assert (await run(tools, "pid", "{}"))[0] is False
        http_server.stop()
        for name, arguments in (("echo", '{"text": "x"}'), ("write_note", '{"key": "k", "value": "v"}')):
            started = time.monotonic()
            is_error, kind, text = await run(tools, name, arguments)
            assert (is_error, kind) == (True, "execution") and "cannot reach MCP server 'notes-api'" in text
            assert time.monotonic() - started < 5
        assert not http_server.notes.exists()
        http_server.start()
        # A new process on the same URL answers the next call (the 2026 protocol has no HTTP
        # session to lose; older servers' sessions are reopened as a dead connection is).
        is_error, _, pid = await run(tools, "pid", "{}")
        assert http_server.process is not None
        assert not is_error and int(pid) == http_server.process.pid
    finally:
        await toolset.aclose()


async def test_stdio_server_killed_between_calls_is_restarted_even_for_writes(notes: Path) -> None:
    toolset = McpToolset(stdio(notes))
    tools = {t.name: t for t in await toolset.atools()}
    try:
        first = int((await run(tools, "pid", "{}"))[2])
        os.kill(first, signal.SIGKILL)
        await wait_until_exited(first)
        # The session saw its transport end before this call was sent, so even a WRITE call is
        # sent on a new connection: it never reached the dead server.
        assert await run(tools, "write_note", '{"key": "k", "value": "v"}') == (False, None, "wrote k")
        assert notes.read_text() == "k=v\n"
        second = int((await run(tools, "pid", "{}"))[2])
        assert second != first
    finally:
        await toolset.aclose()


async def wait_until_exited(pid: int) -> None:
    """Until pid is a zombie or gone (its pipes are then closed), plus a moment for the EOF to land."""
    deadline = time.monotonic() + 10
    stat = Path(f"/proc/{pid}/stat")
    while time.monotonic() < deadline:
        try:
            if stat.read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X"):
                break
        except (FileNotFoundError, ProcessLookupError):
            break
        await asyncio.sleep(0.02)
    await asyncio.sleep(0.3)


# --- the agent, the spec and the CLI --------------------------------------------------------


async def test_agent_calls_mcp_tools_end_to_end(notes: Path) -> None:
    model = ScriptedModel(
        [
            call("m_add", {"a": "three"}),  # invalid: goes back to the model
            call("m_add", a=3, b=4),
            call("m_write_note", key="sum", value="7"),  # destructive: waits for approval
            reply("The sum is 7 and it is noted."),
        ]
    )
    tools = mcp_tools(stdio(notes, prefix="m_", allow=["add", "write_note"]))
    agent = Agent(model, tools, "You add numbers.", checkpointer="memory")
    try:
        paused = await agent.ainvoke("add 3 and 4, then note it", "t")
        assert paused.termination == "interrupted"
        assert paused.pending_approval[0]["name"] == "m_write_note"
        assert not notes.exists()  # nothing ran before approval
        tool_msgs = [m for m in paused.messages if m.role == "tool"]
        assert tool_msgs[0].is_error and "a: 'three' is not of type 'integer'" in tool_msgs[0].text
        assert tool_msgs[1].text == "7" and not tool_msgs[1].is_error
        done = await agent.aresume("t", True)
        assert done.termination == "agent_stop" and done.output == "The sum is 7 and it is noted."
        assert notes.read_text() == "sum=7\n"
        model.assert_done()
    finally:
        await agent.aclose()
        await tools[0].metadata["mcp_toolset"].aclose()


async def test_agent_stops_after_the_argument_budget() -> None:
    model = ScriptedModel([call("add", {"b": 1})] * 4)
    tools = [t.with_options(max_argument_retries=1) for t in mcp_tools(stdio(allow=["add"]))]
    with pytest.raises(ToolRetryBudgetExceeded):
        await execute_calls([CallRequest("1", "add", {}), CallRequest("2", "add", {})], {"add": tools[0]})
    agent = Agent(model, tools, checkpointer="memory")
    try:
        result = await agent.ainvoke("add", "t")
        assert result.termination == "too_many_errors" and "add" in (result.error or "")
    finally:
        await agent.aclose()


def test_spec_takes_mcp_entries(notes: Path) -> None:
    spec = {
        "model": "echo",
        "checkpointer": "memory",
        "tools": [
            "builtin",
            {"mcp": {"command": sys.executable, "args": [str(SERVER), "stdio"], "prefix": "s_", "allow": ["echo"]}},
        ],
    }
    agent = build_agent(spec)
    assert [t.name for t in agent.tools] == ["think", "calculate", "s_echo"]
    with pytest.raises(UserFacingError, match="exactly one of command"):
        build_agent({"model": "echo", "tools": [{"mcp": {"url": "http://x/mcp", "command": "python"}}]})
    with pytest.raises(UserFacingError, match=r"tools: cannot load MCP server 'python mcp_servers.py stdio'"):
        build_agent({"model": "echo", "tools": [{"mcp": {"command": sys.executable, "args": [str(SERVER), "stdio"], "allow": ["nope"]}}]})


def test_chat_cli_mcp_option(http_server: HttpServer) -> None:
    import argparse

    from agent.cli.chat import add_arguments, build_agent_from_args

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(
        ["--model", "echo", "--db", "memory", "--tools", "--mcp", f"{sys.executable} {SERVER} stdio", "--mcp", http_server.url]
    )
    agent = build_agent_from_args(args)
    names = [t.name for t in agent.tools]
    # The same eight tools from two servers: the first one listed wins each name.
    assert sorted(names) == sorted(["add", "crash", "echo", "fail", "header", "pid", "slow", "tag", "write_note"])
    assert {t.metadata["mcp_server"] for t in agent.tools} == {"python mcp_servers.py stdio"}


def test_sync_agent_api_calls_mcp_tools_and_close_ends_the_server(notes: Path) -> None:
    tools = mcp_tools(stdio(notes, allow=["pid"]))
    agent = Agent(ScriptedModel([call("pid"), reply("done")]), tools, checkpointer="memory")
    result = agent.invoke("which pid?", "t")  # on the sync API's private event loop
    assert result.termination == "agent_stop"
    pid = int(next(m.text for m in result.messages if m.role == "tool"))
    toolset = tools[0].metadata["mcp_toolset"]
    toolset.close()  # what the exit hook runs: closes sessions of loops still running elsewhere
    assert process_gone(pid)
    agent.close()


def test_a_server_that_never_answers_the_handshake_times_out() -> None:
    silent = McpServerConfig(command=sys.executable, args=["-c", "import time; time.sleep(60)"], connect_timeout_s=1)
    started = time.monotonic()
    with pytest.raises(ConnectionError, match=r"did not list its tools within 1s"):
        mcp_tools(silent)
    assert time.monotonic() - started < 10

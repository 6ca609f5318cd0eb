"""`rein chat` and agent specs under faults: answers that arrive without tokens, unknown models,
unreachable endpoints, and spec tool entries that are not tools."""

from __future__ import annotations

import io
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agent.cli import main
from agent.cli.chat import chat
from agent.errors import UserFacingError
from agent.messages import ModelRequest
from agent.models import ScriptedModel, call, reply
from agent.models.base import StreamItem
from agent.modes import StepLimits
from agent.runtime import Agent, build_agent
from tools.builtin import builtin_toolkit

pytestmark = pytest.mark.core  # needs no extra: also run on the bare core install (.ci/core_check.sh)

ROOT = Path(__file__).resolve().parents[2]
QUESTION = "What is 19*3?"


class UnstreamedModel(ScriptedModel):
    """Plays its script back like ScriptedModel, but its stream holds every token back (as
    adapters do that parse tool calls out of the text): only the final response arrives."""

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamItem]:
        yield await self.complete(request)


async def _chat_once(model: ScriptedModel, step_limits: StepLimits | None = None) -> tuple[int, str]:
    agent = Agent(model=model, tools=list(builtin_toolkit()), checkpointer="memory", step_limits=step_limits)
    out = io.StringIO()
    rc = await chat(agent, None, [QUESTION], io.StringIO(), out)
    return rc, out.getvalue()


@pytest.mark.parametrize("model_class", [UnstreamedModel, ScriptedModel], ids=["no-tokens", "streamed"])
async def test_the_answer_is_printed_exactly_once(model_class: type[ScriptedModel]) -> None:
    model = model_class([call("calculate", expression="19*3"), reply("19*3 is 57.")])
    rc, text = await _chat_once(model)
    assert rc == 0
    assert "→ calculate" in text and "← calculate [ok] 57" in text
    assert text.count("19*3 is 57.") == 1
    # The answer comes after the tool call, not before it.
    assert text.index("19*3 is 57.") > text.index("← calculate")


@pytest.mark.parametrize("model_class", [UnstreamedModel, ScriptedModel], ids=["no-tokens", "streamed"])
async def test_a_turn_cut_short_shows_its_last_answer_once(model_class: type[ScriptedModel]) -> None:
    # One model call allowed: the turn ends in max_steps, its answer the text beside the tool call.
    model = model_class([call("calculate", expression="19*3", text="Let me compute that.")])
    rc, text = await _chat_once(model, step_limits=StepLimits(agentic=1))
    assert rc == 0
    assert text.count("Let me compute that.") == 1
    assert "(turn ended: max_steps)" in text


def test_echo_answers_once_per_turn_through_the_cli(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["chat", "--model", "echo", "--db", "memory", "-m", "hello", "-m", "again"]) == 0
    out = capsys.readouterr().out
    assert out.count("You said: hello") == 1 and out.count("You said: again") == 1


def test_an_unknown_model_is_one_line_and_exit_2() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "agent.cli", "chat", "--model", "nosuch", "--db", "memory", "-m", "hi"],
        capture_output=True, text=True, cwd=ROOT, timeout=60,
    )
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "unknown model 'nosuch'" in lines[0]
    for prefix in ("local:", "openai:", "cassette:", "echo", "scripted"):
        assert prefix in lines[0]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_an_unreachable_endpoint_says_why_and_exits_non_zero(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "agent.yaml"
    # One retry keeps the test short; the point is that the attempts are counted and reported.
    spec.write_text("model: openai:m\nmodel_options: {max_retries: 1}\ncheckpointer: memory\n")
    url = f"http://127.0.0.1:{_closed_port()}/v1"
    rc = main(["chat", "--spec", str(spec), "--base-url", url, "-m", "hi", "-m", "again"])
    out = capsys.readouterr().out
    assert rc == 1
    assert "(turn ended: model_error: " in out
    assert "connection refused" in out and "after 2 attempts" in out and url in out
    assert out.count("agent>") == 1  # the second message is not sent to a dead endpoint


def test_spec_refuses_a_callable_that_is_not_a_marked_factory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    marker = tmp_path / "called"
    (tmp_path / "spec_tools_fixture.py").write_text(
        "from pathlib import Path\n"
        "from tools import tool, toolkit_factory\n"
        f"MARKER = Path({str(marker)!r})\n"
        "def make():\n"
        "    MARKER.write_text('called')\n"
        "    return []\n"
        "@tool\n"
        "def ping() -> str:\n"
        "    '''Answer pong.'''\n"
        "    return 'pong'\n"
        "@toolkit_factory\n"
        "def marked():\n"
        "    return (t for t in [ping])\n"
        "TOOLS = [ping]\n"
        "MIXED = [ping, 'not a tool']\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(UserFacingError, match=r"tools: cannot load 'spec_tools_fixture:make': .*function.*toolkit_factory"):
        build_agent({"model": "echo", "tools": ["spec_tools_fixture:make"], "checkpointer": "memory"})
    assert not marker.exists()
    with pytest.raises(UserFacingError, match=r"'spec_tools_fixture:MIXED': .* holds a str"):
        build_agent({"model": "echo", "tools": ["spec_tools_fixture:MIXED"], "checkpointer": "memory"})
    for entry in ("spec_tools_fixture:marked", "spec_tools_fixture:TOOLS", "spec_tools_fixture:ping"):
        agent = build_agent({"model": "echo", "tools": [entry], "checkpointer": "memory"})
        assert [t.name for t in agent.tools] == ["ping"]
    # rein's own factories are marked, so their paths work as well as their names.
    agent = build_agent({"model": "echo", "tools": ["tools.builtin:builtin_toolkit", "builtin"], "checkpointer": "memory"})
    assert [t.name for t in agent.tools] == ["think", "calculate"]
    assert main(["chat", "--model", "echo", "--db", "memory", "--tools", "os:getpid", "-m", "hi"]) == 2
    err = capsys.readouterr().err
    assert "tools: cannot load 'os:getpid'" in err and "not a rein Tool" in err

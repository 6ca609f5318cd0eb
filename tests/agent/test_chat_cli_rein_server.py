"""`rein chat --model openai:NAME --base-url URL` against `rein serve`: the server's agent runs its
own tools, so rein chat sends none (a rein server refuses client-side tools with 400)."""

from __future__ import annotations

import pytest

from agent.cli import main
from agent.cli.chat import is_rein_server
from agent.models import EchoModel
from agent.runtime import Agent
from agent.server import BackgroundServer, create_app

KEY = "chat-cli-key"


def test_rein_chat_talks_to_a_rein_server(capsys: pytest.CaptureFixture[str]) -> None:
    agent = Agent(EchoModel(), checkpointer="memory", name="echo")
    with BackgroundServer(create_app({"echo": agent}, api_keys=[KEY])) as server:
        base = f"{server.url}/v1"
        assert is_rein_server(base, KEY) and not is_rein_server(base, "wrong-key")
        code = main(["chat", "--model", "openai:echo", "--base-url", base, "--api-key", KEY, "--db", "memory",
                     "-m", "hello there"])
        out = capsys.readouterr()
    assert code == 0, out.err
    assert "You said: hello there" in out.out
    assert "is a rein server" in out.err


def test_an_unreachable_endpoint_is_not_a_rein_server() -> None:
    assert not is_rein_server("http://127.0.0.1:9/v1")

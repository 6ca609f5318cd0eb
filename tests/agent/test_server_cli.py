"""`rein serve`: argument errors, and a real server process stopped by SIGTERM and restarted."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import openai
import pytest
from openai import OpenAI

from agent.cli import main
from agent.models import EchoModel
from agent.runtime import Agent
from agent.server import key_id, storage_id

REIN = Path(sys.executable).parent / "rein"


@pytest.fixture
def echo_spec(tmp_path: Path) -> Path:
    spec = tmp_path / "echo.yaml"
    spec.write_text("name: echo-bot\nmodel: echo\n")
    return spec


def test_empty_key_file_is_an_error_not_an_open_server(tmp_path: Path, echo_spec: Path, capsys) -> None:
    keys = tmp_path / "keys.txt"
    keys.write_text("# no keys yet\n")
    assert main(["serve", "--agent", str(echo_spec), "--api-key-file", str(keys), "--port", "0"]) == 2
    assert "holds no keys" in capsys.readouterr().err


def test_bad_spec_duplicate_names_and_bad_limits_are_errors(tmp_path: Path, echo_spec: Path, capsys) -> None:
    assert main(["serve", "--agent", str(tmp_path / "missing.yaml")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(["serve", "--agent", str(echo_spec), "--agent", str(echo_spec)]) == 2
    assert "two agents are named 'echo-bot'" in capsys.readouterr().err
    assert main(["serve", "--agent", str(echo_spec), "--max-body-bytes", "0"]) == 2
    assert "--max-body-bytes" in capsys.readouterr().err


def test_malformed_key_file_and_cors_origin_are_errors(tmp_path: Path, echo_spec: Path, capsys) -> None:
    keys = tmp_path / "keys.txt"
    keys.write_text("ok-key\nsupport team: k2\n")
    assert main(["serve", "--agent", str(echo_spec), "--api-key-file", str(keys), "--port", "0"]) == 2
    assert f"{keys} line 2: expected `KEY` or `TENANT: KEY`" in capsys.readouterr().err
    assert main(["serve", "--agent", str(echo_spec), "--db", "memory", "--cors-origin", "https://chat.example.com/"]) == 2
    assert "CORS origin 'https://chat.example.com/' is not an origin" in capsys.readouterr().err


def test_port_in_use_is_a_clear_error(echo_spec: Path, capsys) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["serve", "--agent", str(echo_spec), "--port", str(port), "--db", "memory"]) == 2
    assert f"cannot listen on 127.0.0.1:{port}" in capsys.readouterr().err


def start(args: list[str]) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([str(REIN), "serve", *args, "--port", "0", "--log-level", "warning"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline() if proc.stdout else ""
    if "/v1" not in line:
        proc.kill()
        raise AssertionError(f"rein serve did not start: {line!r} {proc.stderr.read() if proc.stderr else ''}")
    url = line.split(" on ", 1)[1].split("/v1", 1)[0]
    deadline = time.monotonic() + 30
    while True:  # the socket is bound before uvicorn listens on it
        try:
            if httpx.get(f"{url}/healthz", trust_env=False).status_code == 200:
                return proc, url
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            proc.kill()
            raise AssertionError("rein serve never became healthy")
        time.sleep(0.05)


def stop(proc: subprocess.Popen) -> int:
    proc.send_signal(signal.SIGTERM)
    return proc.wait(timeout=30)


@pytest.mark.slow
def test_serve_process_auth_sigterm_and_restart_keep_the_thread(tmp_path: Path, echo_spec: Path) -> None:
    db, keys = tmp_path / "threads.sqlite", tmp_path / "keys.txt"
    keys.write_text("cli-key\nteam: team-key-1\nteam: team-key-2\n")
    args = ["--agent", str(echo_spec), "--db", str(db), "--api-key-file", str(keys),
            "--cors-origin", "https://chat.example.com"]
    thread = {"X-Rein-Thread": "cli-thread"}

    def client(url: str, key: str = "cli-key") -> OpenAI:
        return OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0, http_client=httpx.Client(trust_env=False))

    proc, url = start(args)
    try:
        with pytest.raises(openai.AuthenticationError):
            client(url, "wrong").chat.completions.create(model="echo-bot", messages=[{"role": "user", "content": "hi"}])
        r = client(url).chat.completions.create(model="echo-bot", messages=[{"role": "user", "content": "one"}],
                                                extra_headers=thread)
        assert r.choices[0].message.content == "You said: one"
        for key in ("team-key-1", "team-key-2"):  # one tenant: both keys write its one thread
            client(url, key).chat.completions.create(model="echo-bot", extra_headers=thread,
                                                     messages=[{"role": "user", "content": key}])
        preflight = httpx.options(f"{url}/v1/chat/completions", trust_env=False, headers={
            "Origin": "https://chat.example.com", "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization, x-rein-thread"})
        assert preflight.headers["access-control-allow-origin"] == "https://chat.example.com"
    finally:
        assert stop(proc) == 0
    assert "stopped" in (proc.stdout.read() if proc.stdout else "")
    proc, url = start(args)
    try:
        r = client(url).chat.completions.create(model="echo-bot", messages=[{"role": "user", "content": "two"}],
                                                extra_headers=thread)
        assert r.choices[0].message.content == "You said: two"
    finally:
        assert stop(proc) == 0
    agent = Agent(EchoModel(), checkpointer=f"sqlite:{db}")
    try:
        history = agent.history(storage_id("echo-bot", "cli-thread", key_id("cli-key")))
        team = agent.history(storage_id("echo-bot", "cli-thread", "team"))
    finally:
        agent.close()
    assert [m.text for m in history] == ["one", "You said: one", "two", "You said: two"]
    assert [m.text for m in team] == ["team-key-1", "You said: team-key-1", "team-key-2", "You said: team-key-2"]


def test_serving_freezes_the_start_up_heap_and_still_collects_new_cycles() -> None:
    # In a process of its own: freezing is for the life of a process, not for pytest's.
    script = (
        "import gc, weakref\n"
        "from agent.cli.serve import freeze_heap\n"
        "import agent.server\n"
        "freeze_heap()\n"
        "class Node: pass\n"
        "a, b = Node(), Node(); a.peer, b.peer = b, a\n"
        "gone = weakref.ref(a); del a, b\n"
        "gc.collect()\n"
        "print(gc.get_freeze_count(), gone() is None, gc.get_threshold()[0])\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True)
    frozen, collected, gen0 = out.stdout.split()
    assert int(gen0) == 10_000  # collected less often than Python's default (700)
    # The imported libraries (tens of thousands of objects) are out of the collector's walks...
    assert int(frozen) > 10_000
    # ...while a cycle made while serving is still freed.
    assert collected == "True"


def test_a_keyed_server_says_how_derived_threads_are_shared(tmp_path: Path, echo_spec: Path) -> None:
    keys = tmp_path / "keys.txt"
    keys.write_text("web-app-key\n")
    proc, _ = start(["--agent", str(echo_spec), "--db", str(tmp_path / "t.sqlite"), "--api-key-file", str(keys)])
    assert stop(proc) == 0
    notes = [line for line in (proc.stderr.read() if proc.stderr else "").splitlines() if "derived from its conversation" in line]
    assert len(notes) == 1 and "per end user" in notes[0]

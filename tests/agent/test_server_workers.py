"""`rein serve` as several processes over one Postgres database: --workers N, and separate
processes that continue each other's threads, replay repeated requests and survive a restart."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from agent.cli import main
from agent.models import EchoModel
from agent.runtime import Agent
from agent.server import storage_id
from tests.agent.test_server_load_bench import load_bench

REIN = Path(sys.executable).parent / "rein"


@pytest.fixture
def echo_spec(tmp_path: Path) -> Path:
    spec = tmp_path / "echo.yaml"
    spec.write_text("name: echo-bot\nmodel: echo\n")
    return spec


def children(pid: int) -> set[int]:
    found = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            fields = stat.rsplit(")", 1)[1].split()
            if int(fields[1]) == pid and fields[0] != "Z":
                found.add(int(entry))
    return found


def test_several_workers_on_sqlite_or_memory_are_refused(tmp_path: Path, echo_spec: Path, capsys) -> None:
    assert main(["serve", "--agent", str(echo_spec), "--db", str(tmp_path / "t.sqlite"), "--workers", "2"]) == 2
    err = capsys.readouterr().err
    assert "--workers 2 needs threads in Postgres" in err and "echo-bot" in err
    assert main(["serve", "--agent", str(echo_spec), "--db", "memory", "--workers", "3"]) == 2
    assert "needs threads in Postgres" in capsys.readouterr().err
    assert main(["serve", "--agent", str(echo_spec), "--db", "memory", "--workers", "0"]) == 2
    assert "--workers must be at least 1" in capsys.readouterr().err


@pytest.mark.slow
def test_workers_share_one_port_and_a_dead_worker_is_replaced(echo_spec: Path, postgres_url: str) -> None:
    proc = subprocess.Popen([str(REIN), "serve", "--agent", str(echo_spec), "--db", postgres_url, "--port", "0",
                             "--workers", "2", "--log-level", "warning"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        assert "2 workers" in line, (line, proc.stderr.read() if proc.stderr else "")
        url = line.split(" on ", 1)[1].split("/v1", 1)[0]
        deadline = time.monotonic() + 60
        while len(children(proc.pid)) < 2 or not _healthy(url):
            assert time.monotonic() < deadline, "the workers never came up"
            time.sleep(0.1)
        workers = children(proc.pid)
        assert len(workers) == 2
        thread = {"X-Rein-Thread": "w-thread"}
        with httpx.Client(base_url=url, trust_env=False, timeout=30) as client:
            for word in ("one", "two", "three", "four"):
                r = client.post("/v1/chat/completions", headers=thread,
                                json={"model": "echo-bot", "messages": [{"role": "user", "content": word}]})
                assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == f"You said: {word}"
            if children(proc.pid) != workers:  # a worker died by itself: show the supervisor's account
                proc.send_signal(signal.SIGTERM)
                pytest.fail(f"a worker exited unasked: {proc.communicate(timeout=60)[1][-3000:]}")
            os.kill(min(workers), signal.SIGKILL)
            deadline = time.monotonic() + 60
            while len(children(proc.pid) - workers) < 1 or len(children(proc.pid)) < 2:
                assert time.monotonic() < deadline, "the dead worker was not replaced"
                time.sleep(0.1)
            r = client.post("/v1/chat/completions", headers=thread,
                            json={"model": "echo-bot", "messages": [{"role": "user", "content": "five"}]})
            assert r.status_code == 200
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=60)
    assert code == 0
    assert children(proc.pid) == set()
    agent = Agent(EchoModel(), checkpointer=postgres_url)
    try:
        texts = [m.text for m in agent.history(storage_id("echo-bot", "w-thread"))]
    finally:
        agent.close()
    assert texts[0::2] == ["one", "two", "three", "four", "five"]


def _healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/healthz", trust_env=False, timeout=2).status_code == 200
    except httpx.TransportError:
        return False


@pytest.mark.slow
def test_two_processes_alternate_turns_replay_repeats_and_survive_a_restart(postgres_url: str, capsys) -> None:
    bench = load_bench()
    code = bench.main(["--processes", "--db", postgres_url, "--conversations", "6", "--turns", "4", "--json"])
    result = json.loads(capsys.readouterr().out)
    assert code == 0, result["details"]
    # Every third conversation sent each turn to both processes at once: 2 × 4 extra answers.
    assert result["answered"] == 6 * 4 + 2 * 4
    assert result["thread_problems"] == 0 and result["failed"] == 0
    assert result["p50_ms"] <= result["p95_ms"]

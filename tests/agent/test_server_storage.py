"""The threads database of `rein serve` and its faults, on real server processes and real SQLite:
a database deleted or replaced while serving, the write-ahead log emptied on a clean stop, files
created owner-only, storage errors answered 503 with their cause, and a start-up that fails in one
line."""

from __future__ import annotations

import asyncio
import os
import resource
import shutil
import signal
import sqlite3
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from agent.models import EchoModel
from agent.runtime import Agent
from agent.server import storage_id
from agent.sqlite_file import StorageFault

REIN = Path(sys.executable).parent / "rein"


class Served:
    """A `rein serve` process on 127.0.0.1 with one echo agent."""

    def __init__(self, proc: subprocess.Popen[str], url: str) -> None:
        self.proc = proc
        self.url = url

    def chat(self, text: str, thread: str = "t1") -> httpx.Response:
        return httpx.post(
            f"{self.url}/v1/chat/completions", trust_env=False, timeout=60, headers={"X-Rein-Thread": thread},
            json={"model": "echo-bot", "messages": [{"role": "user", "content": text}]},
        )

    def health(self) -> httpx.Response:
        return httpx.get(f"{self.url}/healthz", trust_env=False, timeout=10)

    def stop(self) -> tuple[int, str]:
        """SIGTERM, then the exit status and everything the server wrote to stderr."""
        self.proc.send_signal(signal.SIGTERM)
        _, err = self.proc.communicate(timeout=60)
        return self.proc.returncode, err


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Callable[..., Served]]:
    spec = tmp_path / "echo.yaml"
    spec.write_text("name: echo-bot\nmodel: echo\n")
    started: list[Served] = []

    def start(db: Path, file_size_limit: int | None = None) -> Served:
        def in_child() -> None:
            os.umask(0o022)  # the usual umask, which leaves new files readable by everyone
            if file_size_limit is not None:  # a full disk, for this process alone (no privileges needed)
                resource.setrlimit(resource.RLIMIT_FSIZE, (file_size_limit, file_size_limit))

        proc = subprocess.Popen(
            [str(REIN), "serve", "--agent", str(spec), "--db", str(db), "--port", "0", "--log-level", "warning"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=in_child,
        )
        line = proc.stdout.readline() if proc.stdout else ""
        if "/v1" not in line:
            proc.kill()
            raise AssertionError(f"rein serve did not start: {line!r} {proc.communicate()[1]}")
        served = Served(proc, line.split(" on ", 1)[1].split("/v1", 1)[0])
        started.append(served)
        deadline = time.monotonic() + 30
        while True:  # the socket is bound before uvicorn serves on it
            try:
                if served.health().status_code == 200:
                    return served
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "rein serve never became healthy"
            time.sleep(0.05)

    yield start
    for served in started:
        if served.proc.poll() is None:
            served.proc.kill()
            served.proc.wait()


def assert_storage_503(response: httpx.Response, *words: str) -> None:
    assert response.status_code == 503, response.text
    error = response.json()["error"]
    assert error["code"] == "storage_unavailable"
    for word in words:
        assert word in error["message"]


def assert_unhealthy(served: Served, *words: str) -> None:
    health = served.health()
    assert health.status_code == 503, health.text
    assert health.json()["status"] == "unhealthy"
    for word in words:
        assert word in health.json()["error"]


async def history(db: Path, thread: str) -> list[str]:
    agent = Agent(EchoModel(), name="echo-bot", checkpointer=f"sqlite:{db}")
    async with agent:
        return [m.text for m in await agent.ahistory(storage_id("echo-bot", thread))]


@pytest.mark.slow
def test_a_database_deleted_while_serving_fails_requests_and_health(tmp_path: Path, serve: Callable[..., Served]) -> None:
    db = tmp_path / "threads.sqlite"
    served = serve(db)
    assert served.chat("one").status_code == 200
    db.unlink()
    # Before: 200, and the turn went to the deleted file, lost when the server stopped.
    assert_storage_503(served.chat("two"), str(db), "deleted")
    assert_storage_503(served.chat("hello", thread="another"), "deleted")
    assert_unhealthy(served, str(db), "deleted")
    code, err = served.stop()
    assert code == 0 and "Traceback" not in err


@pytest.mark.slow
def test_a_database_replaced_while_serving_fails_requests_and_health(tmp_path: Path, serve: Callable[..., Served]) -> None:
    db = tmp_path / "threads.sqlite"
    served = serve(db)
    assert served.chat("one").status_code == 200
    other = tmp_path / "restored.sqlite"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE t (x)")
    conn.close()
    os.replace(other, db)
    assert_storage_503(served.chat("two"), "replaced")
    assert_unhealthy(served, "replaced")
    served.stop()


async def test_a_commit_that_races_a_deletion_is_not_confirmed(tmp_path: Path) -> None:
    # The server refuses requests once the file is gone; a turn already running finds out at its commit.
    db = tmp_path / "threads.sqlite"
    async with Agent(EchoModel(), checkpointer=f"sqlite:{db}") as agent:
        assert (await agent.ainvoke("one", "T")).output == "You said: one"
        db.unlink()
        with pytest.raises(StorageFault, match="deleted"):
            await agent.ainvoke("two", "T")


@pytest.mark.slow
def test_a_clean_stop_leaves_every_turn_in_the_database_file(tmp_path: Path, serve: Callable[..., Served]) -> None:
    db = tmp_path / "threads.sqlite"
    served = serve(db)
    for text in ("one", "two"):
        assert served.chat(text).status_code == 200
    assert served.stop()[0] == 0
    wal = Path(f"{db}-wal")
    assert not wal.exists() or wal.stat().st_size == 0
    # A backup of the .sqlite file alone holds the thread (before: an empty 4 KB file).
    backup = tmp_path / "backup" / "threads.sqlite"
    backup.parent.mkdir()
    shutil.copyfile(db, backup)
    assert asyncio.run(history(backup, "t1")) == ["one", "You said: one", "two", "You said: two"]


@pytest.mark.slow
def test_the_database_and_its_folder_are_created_owner_only(tmp_path: Path, serve: Callable[..., Served]) -> None:
    db = tmp_path / "rein-home" / "threads.sqlite"
    served = serve(db)
    try:
        assert served.chat("one").status_code == 200
        assert stat.S_IMODE(db.parent.stat().st_mode) == 0o700
        for name in (db, Path(f"{db}-wal"), Path(f"{db}-shm")):
            assert stat.S_IMODE(name.stat().st_mode) == 0o600, name
    finally:
        served.stop()


@pytest.mark.slow
def test_a_full_disk_is_a_503_naming_it_and_unhealthy_until_a_turn_commits(
    tmp_path: Path, serve: Callable[..., Served]
) -> None:
    db = tmp_path / "threads.sqlite"
    served = serve(db, file_size_limit=2_000_000)
    assert served.chat("one").status_code == 200
    # Its checkpoint (the message and its echo) cannot be written within the limit.
    failed = served.chat("x" * 1_500_000)
    assert_storage_503(failed)  # before: 500 "internal error: OperationalError", /healthz ok
    assert "disk" in failed.json()["error"]["message"]
    assert_unhealthy(served, "disk")
    streamed = httpx.post(
        f"{served.url}/v1/chat/completions", trust_env=False, timeout=60, headers={"X-Rein-Thread": "s"},
        json={"model": "echo-bot", "stream": True, "messages": [{"role": "user", "content": "y" * 1_500_000}]},
    )
    assert '"code":"storage_unavailable","status":503' in streamed.text
    # Room again for a small turn: it commits, and the server is healthy again.
    assert served.chat("two").status_code == 200
    assert served.health().status_code == 200
    code, err = served.stop()
    assert code == 0 and "Traceback" not in err
    assert "threads database: disk I/O error" in err


def test_a_corrupt_database_stops_the_start_in_one_line(tmp_path: Path) -> None:
    spec = tmp_path / "echo.yaml"
    spec.write_text("name: echo-bot\nmodel: echo\n")
    db = tmp_path / "threads.sqlite"
    db.write_bytes(b"not SQLite at all " * 512)
    proc = subprocess.run(
        [str(REIN), "serve", "--agent", str(spec), "--db", str(db), "--port", "0", "--log-level", "warning"],
        capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 2
    assert proc.stdout == ""  # before: it said it was serving, then printed a traceback
    assert proc.stderr.strip().splitlines() == [
        f"rein serve: error: cannot open the threads database {db}: file is not a database (SQLITE_NOTADB)"
    ]

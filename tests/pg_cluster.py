"""A throwaway PostgreSQL cluster on loopback, session-scoped, for tests of the Postgres paths.

Skips when PostgreSQL's server binaries or the `postgres` extra are not installed (.ci/run installs
both where it can).
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest


def _pg_bin() -> Path | None:
    found = shutil.which("initdb")
    if found:
        return Path(found).parent
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return Path(candidates[-1]).parent if candidates else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    pytest.importorskip("langgraph.checkpoint.postgres", reason="the postgres extra is not installed")
    pg = _pg_bin()
    if pg is None:
        pytest.skip("PostgreSQL server binaries (initdb) are not installed")
    # initdb refuses to run as root; run the cluster as the postgres user when we are root.
    as_user: list[str] = []
    if os.geteuid() == 0:
        if shutil.which("runuser") is None:
            pytest.skip("running as root without runuser")
        as_user = ["runuser", "-u", "postgres", "--"]
    base = Path(tempfile.mkdtemp(prefix="rein-pg-"))
    data = base / "data"
    if as_user:
        shutil.chown(base, "postgres")
    port = _free_port()
    subprocess.run([*as_user, str(pg / "initdb"), "-D", str(data), "-A", "trust", "-U", "rein"],
                   check=True, capture_output=True)
    server = subprocess.Popen(
        [*as_user, str(pg / "postgres"), "-D", str(data), "-p", str(port), "-h", "127.0.0.1", "-k", str(base)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    url = f"postgresql://rein@127.0.0.1:{port}/postgres"
    try:
        deadline = time.monotonic() + 30
        while True:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            if time.monotonic() > deadline or server.poll() is not None:
                pytest.skip("PostgreSQL did not start")
            time.sleep(0.1)
        time.sleep(0.3)
        yield url
    finally:
        server.terminate()
        server.wait(timeout=30)
        shutil.rmtree(base, ignore_errors=True)

"""Crash tests' shared move: run a worker process until it marks a point, then SIGKILL it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).parents[2]


def kill_at_marker(argv: list[str], marker: Path, point: str) -> None:
    """Run `python *argv` from the repo root, wait (up to 60 s) until it creates `marker`, then SIGKILL it."""
    proc = subprocess.Popen([sys.executable, *argv], cwd=ROOT)
    try:
        deadline = time.monotonic() + 60
        while not marker.exists():
            assert proc.poll() is None, f"worker exited before {point}"
            assert time.monotonic() < deadline, f"worker never reached {point}"
            time.sleep(0.02)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()

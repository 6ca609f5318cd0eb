"""Node.js clients for the server's protocol tests: each lives in tests/js/NAME/ with a package.json
and a package-lock.json, installed by .ci/run (`npm ci` in each folder) before the suite runs.

`node_project(NAME)` returns the folder with its node_modules, installing it with `npm ci` (from
the lock file, npm registry only) when a developer's checkout has not yet; it skips the test only
where Node.js itself is missing.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

JS_ROOT = Path(__file__).resolve().parent / "js"


def node_project(name: str) -> Path:
    """tests/js/NAME, installed."""
    folder = JS_ROOT / name
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip("Node.js and npm are needed for the JavaScript client tests")
    if not (folder / "node_modules").is_dir():
        done = subprocess.run(["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"], cwd=folder,
                              capture_output=True, text=True, timeout=600)
        if done.returncode != 0:
            raise RuntimeError(f"npm ci in {folder} failed:\n{done.stderr[-4000:]}")
    return folder


def run_node(name: str, script: str, *args: str, env: dict[str, str] | None = None, timeout: float = 120) -> Any:
    """Run tests/js/NAME/SCRIPT with node and return the JSON it prints last on stdout."""
    folder = node_project(name)
    done = subprocess.run(["node", script, *args], cwd=folder, capture_output=True, text=True, timeout=timeout, env=env)
    if done.returncode != 0:
        raise AssertionError(f"node {script} failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    assert lines, f"node {script} printed nothing; stderr:\n{done.stderr[-3000:]}"
    return json.loads(lines[-1])

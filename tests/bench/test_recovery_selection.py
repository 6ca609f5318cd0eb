"""bench/recovery.py's --tags / --ids selection and the report's seconds row, with the echo model."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.core  # needs no extra: also run on the bare core install (.ci/core_check.sh)

REPO = Path(__file__).resolve().parents[2]
BENCH = str(REPO / "bench" / "recovery.py")


def _bench(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, BENCH, "--model", "echo", "--interventions", "none", "--no-progress", *args],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )


def test_tags_and_ids_select_scenarios(tmp_path: Path) -> None:
    out = tmp_path / "controls"
    proc = _bench(tmp_path, "--tags", "airline,control,position:opening", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    runs = json.loads((out / "none" / "results.json").read_text())["runs"]
    assert sorted(r["scenario_id"] for r in runs) == ["recovery-airline-opening-control-18", "recovery-airline-opening-control-22"]
    assert "tags airline,control,position:opening" in (out / "comparison.md").read_text()
    assert "| mean seconds per run |" in proc.stdout
    assert json.loads((out / "comparison.json").read_text())["none"]["mean_seconds"] >= 0

    one = "recovery-retail-opening-vague_reference-5"
    proc = _bench(tmp_path, "--ids", one, "--out", str(tmp_path / "one"))
    assert proc.returncode == 0, proc.stderr
    assert [r["scenario_id"] for r in json.loads((tmp_path / "one" / "none" / "results.json").read_text())["runs"]] == [one]


def test_selection_errors(tmp_path: Path) -> None:
    proc = _bench(tmp_path, "--ids", "no-such-scenario", "--out", str(tmp_path / "x"))
    assert proc.returncode == 2 and "no such scenario" in proc.stderr
    proc = _bench(tmp_path, "--tags", "retail,airline", "--out", str(tmp_path / "y"))
    assert proc.returncode == 2 and "holds no scenario" in proc.stderr

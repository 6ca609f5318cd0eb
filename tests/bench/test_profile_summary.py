"""bench/profile_summary.py: a cProfile file grouped by the part of the stack each function is in."""

from __future__ import annotations

import cProfile
import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.core  # needs no extra: also run on the bare core install (.ci/core_check.sh)

BENCH = Path(__file__).resolve().parents[2] / "bench" / "profile_summary.py"


def test_the_table_covers_the_whole_profile_and_charges_builtins_to_their_caller(tmp_path: Path) -> None:
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(50):
        json.loads(json.dumps({"a": [1, 2, 3]}))
    profiler.disable()
    out = tmp_path / "p.out"
    profiler.dump_stats(out)
    run = subprocess.run([sys.executable, str(BENCH), str(out), "--turns", "50"], capture_output=True, text=True, check=True)
    rows = [line.split("|")[1:-1] for line in run.stdout.splitlines()[2:]]
    parts = {r[0].strip(): r for r in rows}
    assert "JSON, msgpack (ormsgpack)" in parts and parts["all"][1].strip() == "100%"
    shares = [float(r[2].strip().rstrip("%")) for r in rows[:-1]]
    assert abs(sum(shares) - 100) < 0.5
    # json.dumps's C encoder is a built-in called from json/encoder.py: it counts for JSON.
    assert float(parts["JSON, msgpack (ormsgpack)"][2].strip().rstrip("%")) > 20

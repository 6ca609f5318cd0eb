"""bench/server_load.py at a small size: concurrent conversations across a restart, every thread checked."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "server_load.py"


def test_small_load_run_has_no_errors_and_intact_threads(capsys) -> None:
    spec = importlib.util.spec_from_file_location("server_load_bench", BENCH)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = bench  # dataclasses look their module up there
    spec.loader.exec_module(bench)
    code = bench.main(["--conversations", "6", "--turns", "3", "--restart-after", "1", "--think-ms", "1",
                       "--in-process", "--json", "--max-seconds", "120"])
    result = json.loads(capsys.readouterr().out)
    assert code == 0, result["details"]
    assert result["ok"] == result["requests"] == 18
    assert result["errors"] == 0 and result["thread_problems"] == 0
    assert result["p50_ms"] is not None and result["p95_ms"] >= result["p50_ms"]

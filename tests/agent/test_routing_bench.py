"""bench/routing.py end to end with the echo model (no weights): the table's rows and its arithmetic."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
SHARED = (ROOT / ".." / "shared" / "data" / "routing").resolve()


def load_bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("routing_bench", ROOT / "bench" / "routing.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_grading_rules() -> None:
    bench = load_bench()
    assert bench.is_correct("So the answer is 1,800.", "1800")
    assert not bench.is_correct("1800 pounds, or 12 hours", "1800")  # the last number counts
    assert bench.is_correct("It is the Snow Monkey!", "Snow Monkey")
    assert bench.is_correct("a man able to stand upright", "a man who is able to stand upright")
    assert not bench.is_correct("soft spot", "Fontanelle")
    assert json.loads(bench.get_order.fn(order_id="#w1002"))["status"] == "pending"
    assert "No order" in bench.get_order.fn(order_id="W9")


@pytest.mark.slow
def test_bench_runs_with_the_echo_model(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    if not (SHARED / "routing_dev.jsonl").is_file():
        pytest.skip(f"shared routing data not found at {SHARED}")
    bench = load_bench()
    out = tmp_path / "r.json"
    assert bench.main(["--model", "echo", "--per-kind", "1", "--self", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    names = [r["strategy"] for r in result["table"]]
    assert names[:3] == ["always instant", "always reasoning", "always agentic"]
    assert {"routed (offline)", "routed (self)"} <= set(names)
    assert result["queries"] == 3 and len(result["per_query"]) == 3
    rows = {r["strategy"]: r for r in result["table"]}
    # The offline router sends each kind to its gold mode, so routed spend is the sum of those runs.
    gold_tokens = sum(q["runs"][q["mode"]]["ledger"]["input_tokens"] + q["runs"][q["mode"]]["ledger"]["output_tokens"]
                      for q in result["per_query"])
    assert [q["routes"]["routed (offline)"] for q in result["per_query"]] == [q["mode"] for q in result["per_query"]]
    assert rows["routed (offline)"]["tokens"] == gold_tokens
    picked = sum(q["runs"][q["routes"]["routed (self)"]]["ledger"]["input_tokens"]
                 + q["runs"][q["routes"]["routed (self)"]]["ledger"]["output_tokens"] for q in result["per_query"])
    assert rows["routed (self)"]["tokens"] > picked  # self-routing pays for its classification calls
    assert "| strategy | accuracy |" in capsys.readouterr().out

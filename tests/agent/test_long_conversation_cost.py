"""A served turn costs rein no more at turn 40 of a conversation than at turn 3 (bench/long_conversations.py)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "long_conversations.py"


def run_bench(capsys, *args: str) -> dict:
    spec = importlib.util.spec_from_file_location("long_conversations_bench", BENCH)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = bench
    spec.loader.exec_module(bench)
    assert bench.main([*args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_a_client_that_names_its_thread_costs_the_same_at_turn_40_as_at_turn_3(capsys) -> None:
    # Python calls are an exact count; a walk over the 80 messages of the thread, with one call
    # per message, would add at least 80 per turn.
    result = run_bench(capsys, "--model", "constant", "--threads", "2", "--turns", "42", "--at", "3,40")
    early, late = (result["at"][t]["python_calls_per_turn"] for t in ("3", "40"))
    assert late - early < 30, result["growth"]


def test_a_client_that_resends_its_history_pays_for_reading_it(capsys) -> None:
    # The protocol makes this O(history): the request holds every message, and it is checked
    # against the thread. The bench shows where that goes.
    result = run_bench(capsys, "--model", "constant", "--style", "history", "--threads", "2", "--turns", "12",
                       "--at", "2,10", "--window", "1", "--top", "3")
    early, late = (result["at"][t]["python_calls_per_turn"] for t in ("2", "10"))
    assert late > early and len(result["growth"]) == 3

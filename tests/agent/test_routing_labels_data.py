"""The shipped oracle labels: every row well formed, of a known task, once per model and pass."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from agent.routing.oracle import GREEDY, ModeRun, load_oracle, oracle_label
from scenarios.routing_tasks import load_tasks

LABELS = Path(__file__).resolve().parents[2] / "scenarios" / "routing_tasks" / "data" / "labels"
FILES = sorted(LABELS.glob("*.jsonl"))


def test_labels_are_shipped_for_the_bundled_models() -> None:
    assert {f.name for f in FILES} >= {"local_qwen2.5-coder-1.5b.jsonl", "local_qwen2.5-coder-0.5b.jsonl"}


@pytest.mark.parametrize("path", FILES, ids=[f.stem for f in FILES])
def test_every_row_is_a_known_task_once_per_model_and_pass_with_a_consistent_label(path: Path) -> None:
    tasks = {t.id: t for t in load_tasks()}
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    assert rows
    seen = Counter((r["model"], r.get("pass", GREEDY), r["id"]) for r in rows)
    assert [k for k, n in seen.items() if n > 1] == []
    for row in rows:
        task = tasks[row["id"]]
        assert row["split"] == task.split and row["query"] == task.query
        assert set(row["runs"]) == {"instant", "reasoning", "agentic"}
        # the stored label is the one the stored runs give: a regrade or a hand edit did not leave it stale
        assert row["oracle"] == oracle_label({m: ModeRun(**r) for m, r in row["runs"].items()}), row["id"]
    assert load_oracle(path)  # and the file reads as rein route eval reads it
    cassette = LABELS.parent / "cassettes" / path.name
    assert cassette.is_file(), f"{path.name} ships without its cassette"

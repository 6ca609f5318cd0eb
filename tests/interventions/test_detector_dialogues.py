"""The offline detector's labeled dialogues: splits disjoint by task and phrasing, every position
and negative kind present, and reproducible from the tau2 data."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest

from interventions.dialogue_dataset import (
    DIALOGUES_PATH,
    POSITIONS,
    SPLITS,
    build_dialogues,
    context_turns,
    read_dialogues,
    write_dialogues,
)
from interventions.error_map import NO_ERROR, load_error_map

pytestmark = pytest.mark.core  # needs no extra: also run on the bare core install (.ci/core_check.sh)


def test_shipped_splits_are_disjoint_by_task_and_phrasing() -> None:
    dialogues = list(read_dialogues(DIALOGUES_PATH))
    tasks: dict[str, set[tuple[str, str]]] = defaultdict(set)
    templates: dict[str, set[str]] = defaultdict(set)
    for d in dialogues:
        tasks[d.split].add((d.domain, d.source_task))
        templates[d.split].update(t for t in d.templates if not t.startswith("task:"))
    assert set(tasks) == set(SPLITS)
    for a in SPLITS:
        for b in SPLITS:
            if a < b:
                assert not tasks[a] & tasks[b], (a, b)
                assert not templates[a] & templates[b], (a, b)
    # Lead phrasings (identity, greetings, agent lines) are split too, not only the targets.
    assert any(t.startswith("lead.identity.") for t in templates["test"])
    assert len({d.id for d in dialogues}) == len(dialogues)


def test_every_split_has_every_label_position_and_negative_kind() -> None:
    dialogues = list(read_dialogues(DIALOGUES_PATH))
    labels = {NO_ERROR, *load_error_map().labels}
    for split in SPLITS:
        mine = [d for d in dialogues if d.split == split]
        assert {d.label for d in mine} == labels
        assert {d.position for d in mine if d.label != NO_ERROR} == set(POSITIONS)
        kinds = {r.kind for r in context_turns(mine) if r.label == NO_ERROR}
        assert {"identity", "greeting", "confirmation", "request", "read_request", "topic_opener"} <= kinds
        assert any(d.is_control for d in mine)


def test_context_turns_carry_the_turns_before_them() -> None:
    d = next(d for d in read_dialogues(DIALOGUES_PATH) if d.position == "after_read" and d.label != NO_ERROR)
    rows = context_turns([d])
    assert [r.kind for r in rows][-3:] == ["identity", "read_request", "error"][-len(rows):]
    last = rows[-1]
    assert last.is_target and last.label == d.label and last.text == d.target["text"]
    assert last.history == [(t["role"], t["text"]) for t in d.turns[:-1]]
    assert last.history[-1][0] == "assistant" and not rows[0].is_target


def test_dialogues_rebuild_byte_for_byte_from_the_tau2_data(shared_data: Path, tmp_path: Path) -> None:
    out = tmp_path / "dialogues.jsonl"
    write_dialogues(build_dialogues(shared_data / "tau2"), out)
    assert out.read_bytes() == DIALOGUES_PATH.read_bytes()

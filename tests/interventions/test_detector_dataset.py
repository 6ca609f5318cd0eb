"""The offline detector's labeled turns: held-out split disjoint by task and template, and
reproducible from the tau2 data."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest

from interventions.error_map import NO_ERROR, load_error_map
from interventions.train_detector import main as train_main
from interventions.turn_dataset import (
    DATASET_PATH,
    build_turns,
    read_turns,
    request_sentences,
    to_first_person,
)


def test_shipped_split_is_disjoint_by_task_and_template() -> None:
    rows = list(read_turns(DATASET_PATH))
    labels = {NO_ERROR, *load_error_map().labels}
    assert {r.label for r in rows} == labels
    by_split: dict[str, set[tuple[str, str]]] = defaultdict(set)
    templates: dict[str, set[str]] = defaultdict(set)
    for r in rows:
        by_split[r.split].add((r.domain, r.source_task))
        if not r.template.startswith("task:"):
            templates[r.split].add(r.template)
    assert set(by_split) == {"train", "test"}
    assert not by_split["train"] & by_split["test"]
    assert not templates["train"] & templates["test"]
    for split in ("train", "test"):
        assert {r.label for r in rows if r.split == split} == labels
    assert len({(r.domain, r.context, r.text) for r in rows}) == len(rows)


@pytest.mark.parametrize(
    ("second", "first"),
    [
        ("You want to cancel your order because you no longer need it.", "I want to cancel my order because I no longer need it."),
        ("You are Yusuf Rossi in zip code 19122.", "I am Yusuf Rossi in zip code 19122."),
        ("You name is Ivan Khan and your zip code is 28243.", "My name is Ivan Khan and my zip code is 28243."),
        ("Your cat is sick and you'd like to fly home.", "My cat is sick and I'd like to fly home."),
        ("It was sent to you by mistake.", "It was sent to me by mistake."),
    ],
)
def test_to_first_person(second: str, first: str) -> None:
    assert to_first_person(second) == first


def test_request_sentences_drop_instructions_to_the_simulator() -> None:
    got = request_sentences("You want to return the lamp. If the agent asks, say yes. Make sure you mention the order.")
    assert got == ["I want to return the lamp."]


def test_dataset_rebuilds_byte_for_byte_from_the_tau2_data(shared_data: Path, tmp_path: Path) -> None:
    from interventions.turn_dataset import write_turns

    rows = build_turns(shared_data / "tau2")
    out = tmp_path / "turns.jsonl"
    write_turns(rows, out)
    assert out.read_bytes() == DATASET_PATH.read_bytes()


def test_train_detector_cli_reports_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "hi"}\n', encoding="utf-8")
    assert train_main(["--no-rebuild", "--dataset", str(bad), "--out", str(tmp_path / "d.npz")]) == 2
    assert "not a labeled dialogue" in capsys.readouterr().err
    assert train_main(["--data", str(tmp_path), "--dataset", str(tmp_path / "x.jsonl"), "--out", str(tmp_path / "d.npz")]) == 2
    assert "tau2 data not found" in capsys.readouterr().err
    assert not (tmp_path / "d.npz").exists()

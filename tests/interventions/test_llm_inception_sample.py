"""The LLM-inception comparison runner: a seeded, balanced sample of test turns, scored beside the offline module."""

from __future__ import annotations

from collections import Counter

from agent.messages import ModelRequest
from agent.models import FunctionModel
from interventions.detector_eval import compare_on_sample, llm_predictions, sample_rows
from interventions.dialogue_dataset import DIALOGUES_PATH, read_dialogues
from interventions.error_map import load_error_map

TEST = [d for d in read_dialogues(DIALOGUES_PATH) if d.split == "test"]


def test_sample_is_seeded_and_balanced_over_types_positions_and_kinds() -> None:
    rows = sample_rows(TEST, 48, seed=1)
    assert [(r.dialogue, r.index) for r in rows] == [(r.dialogue, r.index) for r in sample_rows(TEST, 48, seed=1)]
    assert [(r.dialogue, r.index) for r in rows] != [(r.dialogue, r.index) for r in sample_rows(TEST, 48, seed=2)]
    errors, clean = rows[:48], rows[48:]
    assert all(r.label != "none" for r in errors) and all(r.label == "none" for r in clean) and len(clean) == 48
    # 48 error turns over 6 types x 4 positions: every cell twice.
    cells = Counter((r.label, r.position) for r in errors)
    assert len(cells) == 24 and set(cells.values()) == {2}
    kinds = Counter(r.kind for r in clean)
    assert len(kinds) >= 5 and max(kinds.values()) - min(kinds.values()) <= 1
    assert len({(r.dialogue, r.index) for r in rows}) == len(rows)


def test_llm_predictions_give_the_domain_tools_and_are_scored_beside_another_module() -> None:
    rows = sample_rows(TEST, 6, seed=0)
    seen: list[ModelRequest] = []

    def judge(request: ModelRequest) -> str:
        seen.append(request)
        # A fake diagnosis: flag every turn with a question mark as out of domain.
        latest = request.messages[1].text.rsplit("USER: ", 1)[-1]
        return '{"error_type": "unsupported_domain", "rationale": "x"}' if "?" in latest else '{"error_type": "none", "rationale": "ok"}'

    found = llm_predictions(rows, {d.id: d.domain for d in TEST}, FunctionModel(judge), progress=False)
    assert len(found) == len(seen) == 12
    prompts = [r.messages[1].text for r in seen]
    domains = {d.id: d.domain for d in TEST}
    for row, prompt in zip(rows, prompts, strict=True):
        tool = "get_order_details" if domains[row.dialogue] == "retail" else "get_reservation_details"
        assert f"- {tool}(" in prompt and prompt.rstrip().endswith("Classify the latest USER message.")
        assert f"USER: {' '.join(row.text.split())[:600]}" in prompt
    predicted = [f["predicted"] for f in found]
    assert predicted == [("unsupported_domain" if "?" in r.text else "none") for r in rows]
    table = compare_on_sample(rows, {"all none": ["none"] * 12, "fake llm": predicted})
    assert "Sample: 6 error turns, 6 error-free turns." in table
    assert "| all none | 0.00 | 0.00 | 0.0% (0/6) | 0.0% |" in table
    assert set(load_error_map().labels) >= {f["gold"] for f in found[:6]}

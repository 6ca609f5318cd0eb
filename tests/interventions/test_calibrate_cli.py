"""`rein calibrate SPEC`: the agent's turns built from its card, the threshold chosen and saved where
ReIn finds it; bad input gives a clear error."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from agent.cli import main
from interventions.calibration import Calibration, calibrations_dir, card_turns
from interventions.card import build_card

TOOLS = '''
from tools import Toolkit, tool
from tools.registry import toolkit_factory


@tool
def refill_prescription(rx_number: str, days_supply: int = 30) -> str:
    """Request a refill of an existing prescription.

    Args:
        rx_number: Prescription number, e.g. RX-48213.
        days_supply: Days of medication.
    """
    return "ok"


@toolkit_factory
def toolkit() -> Toolkit:
    return Toolkit([refill_prescription])
'''
SPEC = """name: pharmacy
model: echo
system_prompt: You are the assistant of Greenleaf Pharmacy. You help customers refill prescriptions.
tools: ["rxtools:toolkit"]
interventions: [rein]
"""


@pytest.fixture
def spec(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "rxtools.py").write_text(TOOLS, encoding="utf-8")
    (tmp_path / "agent.yaml").write_text(SPEC, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("REIN_HOME", str(tmp_path / "home"))
    return tmp_path / "agent.yaml"


def test_turns_come_from_the_card_with_limits_enums_and_references() -> None:
    schema = {"type": "function", "function": {"name": "cancel_order", "description": "Cancels a pending order.",
                                               "parameters": {"type": "object", "properties": {
                                                   "order_id": {"type": "string"},
                                                   "reason": {"type": "string", "enum": ["no longer needed", "ordered by mistake"]},
                                                   "items": {"type": "integer", "minimum": 1, "maximum": 5}}}}}
    turns = card_turns(build_card([schema], "You are the assistant of Acme Shop."))
    kinds = {t.kind for t in turns}
    assert {"tool_request", "at_limit", "outside_limit", "one_item", "two_items", "contradiction", "everyday"} <= kinds
    assert any("items 5" in t.text and t.label == "none" for t in turns)
    assert any(t.label == "unsupported_parameter" and "items 22" in t.text for t in turns)
    assert any(t.text.startswith("Cancel it") and t.label == "vague_reference" for t in turns)
    # A narrow agent: everyday tasks are outside its domain; a general assistant does them.
    assert all(t.label == "unsupported_domain" for t in turns if t.kind == "everyday")
    general = card_turns(build_card([schema], "You are a helpful assistant."))
    assert all(t.label == "none" for t in general if t.kind == "everyday")


@pytest.mark.slow
def test_calibrating_a_spec_writes_the_threshold_where_rein_finds_it(spec: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["calibrate", str(spec)]) == 0
    out = capsys.readouterr().out
    assert "false activations" in out and "calibration_file: agent.rein.json" in out
    beside = Calibration.load(spec.with_name("agent.rein.json"))
    saved = Calibration.load(calibrations_dir() / f"{beside.card}.json")
    assert saved == beside and beside.threshold >= beside.default_threshold  # never below without logs
    assert beside.at_chosen["ordinary_turns"] > 0 and beside.at_chosen["error_turns"] > 0
    # The spec's ReIn, built again, picks the calibration up by the agent's card.
    from agent.runtime import Agent

    agent = Agent.from_spec(spec)
    rein = agent.interventions[0]
    card = build_card([t.openai_schema() for t in agent.tools], agent.system_prompt)
    assert card.key == beside.card and rein.detector.threshold_for(card) == beside.threshold
    options = {"calibration_file": str(spec.with_name("agent.rein.json"))}
    pinned = Agent.from_spec(yaml.safe_load(SPEC) | {"interventions": [{"name": "rein", "options": options}]})
    assert pinned.interventions[0].detector.threshold == beside.threshold


def test_bad_input_is_a_clear_error(spec: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["calibrate", str(spec), "--lower"]) == 2
    assert "--lower needs --logged" in capsys.readouterr().err
    assert main(["calibrate", str(spec.with_name("missing.yaml"))]) == 2
    assert "Traceback" not in capsys.readouterr().err
    bad = spec.with_name("bad.rein.json")
    bad.write_text('{"format": "something else"}', encoding="utf-8")
    from agent.errors import UserFacingError
    from interventions import ReInIntervention

    with pytest.raises(UserFacingError, match="not a ReIn calibration file"):
        ReInIntervention(calibration_file=bad)

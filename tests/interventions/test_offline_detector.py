"""The offline inception module: the numpy classifier, the shipped detector file, and ReIn with it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from agent.errors import UserFacingError
from agent.models import ScriptedModel, reply
from agent.runtime import Agent
from interventions import ReInIntervention, with_recovery_tools
from interventions.classifier import TrainConfig, TurnClassifier, train_classifier
from interventions.offline import (
    DEFAULT_DETECTOR_PATH,
    FEATURE_BLOCKS,
    OfflineDetector,
    surface_cues,
)
from interventions.turns import DATASET_PATH, read_turns


def tool_loop(agent: Agent) -> Agent:
    """A bare tau2-style tool loop (no plan or summary steps), whatever the runtime's default mode paths."""
    if "mode_config" in getattr(type(agent.deps), "__dataclass_fields__", {}):
        from agent.modes import PLAIN_AGENTIC

        agent.deps.mode_config = PLAIN_AGENTIC
    return agent



def blobs(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    centres = rng.normal(0, 3, (3, 8))
    y = np.repeat(np.arange(3), 40)
    return centres[y] + rng.normal(0, 0.5, (120, 8)), y


@pytest.mark.parametrize("hidden", [0, 16])
def test_classifier_learns_and_round_trips(tmp_path: Path, hidden: int) -> None:
    x, y = blobs()
    clf = train_classifier(x, y, ["none", "a", "b"], TrainConfig(hidden=hidden, epochs=200, l2=1e-4))
    probs = clf.predict_proba(x)
    assert (probs.argmax(axis=1) == y).mean() == 1.0
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, rtol=1e-5)
    path = tmp_path / "clf.npz"
    clf.meta["note"] = "round trip"
    clf.save(path)
    again = TurnClassifier.load(path)
    assert again.labels == ["none", "a", "b"] and again.meta["note"] == "round trip"
    np.testing.assert_allclose(again.predict_proba(x), probs, rtol=1e-5)
    with pytest.raises(ValueError, match="width 8"):
        again.predict_proba(np.zeros((1, 5)))


def test_unreadable_classifier_files_are_user_errors(tmp_path: Path) -> None:
    junk = tmp_path / "junk.npz"
    junk.write_bytes(b"not a zip")
    with pytest.raises(UserFacingError, match="cannot read classifier"):
        TurnClassifier.load(junk)
    other = tmp_path / "other.npz"
    np.savez(other, w0=np.zeros((2, 2)))
    with pytest.raises(UserFacingError, match="not a rein turn classifier"):
        TurnClassifier.load(other)
    with pytest.raises(UserFacingError, match="train_detector"):
        _ = OfflineDetector(tmp_path / "missing.npz").classifier


def test_surface_cues() -> None:
    assert surface_cues("Cancel order #W2378156 please")[0] == 1.0
    assert surface_cues("Change reservation EHGLP3")[0] == 1.0
    assert surface_cues("Cancel that one, it is the thing")[0] == 0.0
    assert surface_cues("Cancel that one, it is the thing")[1] == 1.0
    assert surface_cues("do it but don't change it")[2] > 0


def test_shipped_detector_file_is_small_and_described() -> None:
    assert DEFAULT_DETECTOR_PATH.stat().st_size < 200_000
    clf = TurnClassifier.load(DEFAULT_DETECTOR_PATH)
    assert clf.labels[0] == "none" and len(clf.labels) == 7
    assert clf.meta["features"] == list(FEATURE_BLOCKS)
    assert clf.input_dim == 384 * 2 + 4
    assert 0.5 <= clf.meta["threshold"] <= 1.0
    metrics = json.loads((DEFAULT_DETECTOR_PATH.parent / "detector_metrics.json").read_text())
    assert metrics["held_out"]["rows"] == sum(1 for r in read_turns(DATASET_PATH) if r.split == "test")


@pytest.mark.slow
def test_shipped_detector_on_clear_cases_and_inside_rein() -> None:
    detector = OfflineDetector()
    found = detector.classify(
        [
            "Can you book me a hotel room in Paris for next weekend?",
            "Please cancel order #W2378156, I no longer need it.",
            "Yes, please go ahead.",
        ],
        ["", "", "Shall I cancel order #W2378156 now? Please confirm (yes/no)."],
    )
    assert [d.error_type for d in found] == ["unsupported_domain", "none", "none"]
    assert found[0].confidence >= detector.threshold and set(found[0].scores) == set(detector.classifier.labels)

    model = ScriptedModel([reply("I can only help with orders."), reply("Sure.")])
    agent = tool_loop(Agent(model, with_recovery_tools([]), "Retail agent.", interventions=[ReInIntervention()], checkpointer="memory"))
    planted = agent.invoke("Can you book me a hotel room in Paris for next weekend?", "t")
    clean = agent.invoke("Thanks, that's all.", "t")
    agent.close()
    assert planted.interventions[0]["error_type"] == "unsupported_domain"
    assert planted.interventions[0]["detector"] == "offline"
    assert model.requests[0].messages[2].tool_calls[0].name == "think"
    assert not clean.interventions[0]["activated"]


@pytest.mark.slow
def test_shipped_detector_keeps_its_held_out_quality_on_a_sample() -> None:
    rows = [r for r in read_turns(DATASET_PATH) if r.split == "test"][::6]
    found = OfflineDetector().classify([r.text for r in rows], [r.context for r in rows])
    errors = [(r.label, d.error_type) for r, d in zip(rows, found, strict=True) if r.label != "none"]
    clean = [d.error_type for r, d in zip(rows, found, strict=True) if r.label == "none"]
    recall = sum(p != "none" for _, p in errors) / len(errors)
    false_activations = sum(p != "none" for p in clean) / len(clean)
    # Floors well under the documented held-out numbers (recall 0.68, false activations 14.6%).
    assert recall >= 0.5 and false_activations <= 0.3

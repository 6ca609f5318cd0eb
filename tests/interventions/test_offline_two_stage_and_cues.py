"""The two-stage classifier (gate, then type head) and the similarity cues of the offline detector."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from agent.errors import UserFacingError
from interventions.classifier import (
    TWO_STAGE_FORMAT,
    ClassifierTrainConfig,
    TurnClassifier,
    TwoStageClassifier,
    file_format,
    train_classifier,
    train_two_stage,
)
from interventions.dialogue_dataset import (
    DOMAIN_TOOLS_PATH,
    build_domain_tools,
    read_domain_tools,
    write_domain_tools,
)
from interventions.offline import (
    BLOCK_WIDTHS,
    GENERIC_TOOLS,
    KNOWN_BLOCKS,
    OfflineDetector,
    tool_texts,
    turn_features,
)
from tools.builtin import recovery_tools, think


def blobs(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    centres = rng.normal(0, 3, (4, 8))
    y = np.repeat(np.arange(4), 40)
    return centres[y] + rng.normal(0, 0.5, (160, 8)), y


def test_two_stage_probabilities_are_the_gate_times_the_type_head(tmp_path: Path) -> None:
    x, y = blobs()
    names = ["none", "a", "b", "c"]
    clf = train_two_stage(x, y, names, ClassifierTrainConfig(epochs=200, l2=1e-4))
    probs = clf.predict_proba(x)
    assert probs.shape == (160, 4) and (probs.argmax(axis=1) == y).mean() == 1.0
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, rtol=1e-5)
    # The type head never saw a "none" row: it was fit on the error rows only.
    assert clf.meta["train"]["type_rows"] == 120 and clf.types[-1][0].shape[1] == 3
    path = tmp_path / "two.npz"
    clf.meta["note"] = "round trip"
    clf.save(path)
    assert file_format(path) == TWO_STAGE_FORMAT
    again = TwoStageClassifier.load(path)
    assert again.labels == names and again.meta["note"] == "round trip"
    np.testing.assert_allclose(again.predict_proba(x), probs, rtol=1e-5)
    with pytest.raises(ValueError, match="width 8"):
        again.predict_proba(np.zeros((1, 5)))
    with pytest.raises(ValueError, match="with and without an error"):
        train_two_stage(x, np.zeros(160, dtype=np.int64), names)


def test_detector_files_are_told_apart_by_format(tmp_path: Path) -> None:
    x, y = blobs()
    single = tmp_path / "single.npz"
    train_classifier(x, y, ["none", "a", "b", "c"], ClassifierTrainConfig(epochs=20)).save(single)
    with pytest.raises(UserFacingError, match="not a rein two-stage classifier"):
        TwoStageClassifier.load(single)
    two = tmp_path / "two.npz"
    clf = train_two_stage(x, y, ["none", "a", "b", "c"], ClassifierTrainConfig(epochs=20))
    clf.save(two)
    with pytest.raises(UserFacingError, match="not a rein turn classifier"):
        TurnClassifier.load(two)
    assert isinstance(OfflineDetector(two).classifier, TwoStageClassifier)
    assert isinstance(OfflineDetector(single).classifier, TurnClassifier)
    assert file_format(tmp_path / "missing.npz") == ""


def test_tool_texts_keep_the_domain_tools_only() -> None:
    schemas = [
        {"type": "function", "function": {"name": "cancel_pending_order", "description": "Cancel a pending order. If the order is delivered, it cannot be cancelled."}},
        {"name": "get_order_details", "description": "Get the status and details of an order."},
        *[t.openai_schema() for t in [*recovery_tools(), think]],
    ]
    assert tool_texts(schemas) == ["cancel pending order: Cancel a pending order.",
                                   "get order details: Get the status and details of an order."]
    # ReIn declares these to every agent, so they must not move the features.
    assert {t.name for t in [*recovery_tools(), think]} <= GENERIC_TOOLS
    assert sum(BLOCK_WIDTHS[b] for b in KNOWN_BLOCKS) == 384 * 4 + 8 + 4 + 3 + 6


def test_domain_tools_file_rebuilds_from_the_tau2_data(shared_data: Path, tmp_path: Path) -> None:
    out = tmp_path / "domain_tools.json"
    write_domain_tools(build_domain_tools(shared_data / "tau2"), out)
    assert out.read_bytes() == DOMAIN_TOOLS_PATH.read_bytes()
    shipped = read_domain_tools()
    assert set(shipped) == {"retail", "airline"}
    assert "cancel_pending_order" in {s["function"]["name"] for s in shipped["retail"]}
    assert json.loads(out.read_text())["airline"][0]["type"] == "function"


@pytest.mark.slow
def test_similarity_cues_see_requests_the_tools_cannot_serve() -> None:
    tools = tool_texts(read_domain_tools()["retail"])
    texts = ["Please cancel my pending order.", "What's the weather like in Paris tomorrow?", "Hi, user ID mia_li_3668."]
    history = [("assistant", "Hi! How can I help you today?")]
    x = turn_features(texts, [history] * 3, ("tools", "history"), [tools] * 3)
    best_tool, gap, earlier = x[:, 0], x[:, 2], x[:, 6]
    assert best_tool[0] > best_tool[1] + 0.2  # a tool does this; none does the weather
    assert gap[0] >= 0 and earlier.tolist() == [0.0, 0.0, 0.0]
    assert x[2].tolist() == [0.0] * 7  # no request part: nothing to compare
    # Without tools the tools block is zeros, not an error (classify() callers that have none).
    assert turn_features(texts[:1], [history], ("tools",)).tolist() == [[0.0] * 4]
    contradict = [*history, ("user", "Please cancel order #W2890441."), ("assistant", "Done, it is cancelled.")]
    again = turn_features(["Actually, don't cancel order #W2890441."], [contradict], ("history",))
    assert again[0, 1] > 0.5 and again[0, 2] == 1.0  # close to what the user said before

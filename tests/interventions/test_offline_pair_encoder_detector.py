"""The fine-tuned pair encoder: it learns, ships only its tuned layers, and round-trips through its file."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from agent.errors import UserFacingError
from interventions.offline import OfflineDetector
from interventions.pair_encoder import (
    MAX_TOKENS,
    PairEncoder,
    PairTrainConfig,
    is_pair_encoder,
    pair_inputs,
    train_pair_encoder,
)

pytest.importorskip("torch")

GREET = [("assistant", "Hi! How can I help you today?")]
ROWS = [
    ("Please cancel order #W2890441.", GREET, 0),
    ("I want to return the headphones from order #W7209932.", GREET, 0),
    ("Change the address on order #W4817420 to 12 Elm St.", GREET, 0),
    ("Exchange the jacket in order #W9931224 for size M.", GREET, 0),
    ("What is the weather in Paris tomorrow?", GREET, 1),
    ("Can you book me a hotel room in Rome?", GREET, 1),
    ("Can you sell me a used car?", GREET, 1),
    ("What's the score of the football game?", GREET, 1),
]


def test_pair_inputs_put_the_request_first_and_drop_identity() -> None:
    requests, agents, cues = pair_inputs(["Hi, I'm Mei Davis, zip code 80217. Cancel it."], [GREET])
    assert requests == ["Cancel it."] and agents == ["Hi! How can I help you today?"]
    assert cues.shape == (1, 8) and cues[0, 4] == 1.0  # a request is left
    requests, agents, _ = pair_inputs(["Hi, user ID mia_li_3668."], [[]])
    assert requests == ["Hi, user ID mia_li_3668."] and agents == [None]


@pytest.mark.slow
def test_pair_encoder_learns_and_round_trips(tmp_path: Path) -> None:
    labels = ["none", "unsupported_domain"]
    texts, histories = [r[0] for r in ROWS], [r[1] for r in ROWS]
    y = np.array([r[2] for r in ROWS])
    enc = train_pair_encoder(texts, histories, y, labels, PairTrainConfig(tuned_layers=1, epochs=25, batch_size=8, lr_head=1e-2, seed=3))
    probs = enc.predict_proba(texts, histories)
    assert (probs.argmax(axis=1) == y).all()
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, rtol=1e-5)
    # Only the top layer ships, in float16: 16 tensors of one BERT layer, about 1.8M parameters.
    assert all(k.startswith("0.") for k in enc.layer_state) and all(v.dtype == np.float16 for v in enc.layer_state.values())
    assert 1_500_000 < sum(v.size for v in enc.layer_state.values()) < 2_000_000
    path = tmp_path / "enc.npz"
    enc.meta["threshold"] = 0.6
    enc.save(path)
    assert is_pair_encoder(path) and 2_000_000 < path.stat().st_size < 5_000_000
    again = PairEncoder.load(path)
    np.testing.assert_allclose(again.predict_proba(texts, histories), probs, atol=1e-5)
    detector = OfflineDetector(path)
    assert detector.threshold == 0.6
    found = detector.classify_turns(["What is the weather in Paris tomorrow?", "Hi, user ID mia_li_3668."], [GREET, GREET])
    assert found[0].error_type == "unsupported_domain" and not found[1].is_error  # identity-only: never flagged
    long_turn = "Cancel order #W2890441. " * 100
    assert PairEncoder.load(path).predict_proba([long_turn], [GREET]).shape == (1, 2)  # cut to MAX_TOKENS
    assert MAX_TOKENS == 128


def test_unreadable_pair_encoder_files_are_user_errors(tmp_path: Path) -> None:
    other = tmp_path / "other.npz"
    np.savez(other, format=np.array("something/else"))
    assert not is_pair_encoder(other) and not is_pair_encoder(tmp_path / "missing.npz")
    with pytest.raises(UserFacingError, match="not a rein pair encoder"):
        PairEncoder.load(other)
    junk = tmp_path / "junk.npz"
    junk.write_bytes(b"not a zip")
    with pytest.raises(UserFacingError, match="cannot read pair encoder"):
        PairEncoder.load(junk)

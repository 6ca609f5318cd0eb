"""The offline router: shipped weights, clear cases, bad weight files, and the training pieces."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from agent.errors import UserFacingError
from agent.ledger import CostLedger
from agent.messages import Message
from agent.models import EchoModel
from agent.plugin_api import MODES, InterventionContext
from agent.plugins import load_mode_policy
from agent.routing import OfflineRouter, RouterWeights
from agent.routing.features import FEATURE_NAMES, features_of
from agent.routing.fit import RouterTrainConfig, augment, fit
from agent.routing.offline import DEFAULT_WEIGHTS
from agent.routing.router_eval import load_labeled, score_routes

PROBE = Path(__file__).resolve().parents[2] / "agent" / "routing" / "data" / "probe.jsonl"

CLEAR = [
    ("What is the capital of France?", "instant"),
    ("Who painted the ceiling of the Sistine Chapel?", "instant"),
    ("A baker makes 24 muffins an hour for 6 hours and sells them in boxes of 4. How many boxes does he fill?",
     "reasoning"),
    ("Tom has 3 times as many marbles as Ann, who has 12. How many marbles do they have together?", "reasoning"),
    ("You want to cancel order #W2378156 and get a refund to your original payment method.", "agentic"),
    ("You want to change the return flight on reservation 4WQ150 to a later date.", "agentic"),
]


@pytest.fixture(scope="module")
def router() -> OfflineRouter:
    return OfflineRouter()


@pytest.mark.slow
def test_shipped_weights_route_clear_cases(router: OfflineRouter) -> None:
    proba = router.predict_proba([q for q, _ in CLEAR])
    assert proba.shape == (len(CLEAR), 3)
    assert np.allclose(proba.sum(axis=1), 1.0, atol=1e-5)
    assert [MODES[i] for i in proba.argmax(axis=1)] == [m for _, m in CLEAR]


@pytest.mark.slow
async def test_decide_reads_the_latest_user_message(router: OfflineRouter) -> None:
    ctx = InterventionContext(
        dialogue=[Message.user("What is the capital of France?"), Message.assistant("Paris."),
                  Message.user("You want to cancel order #W2378156 and get a refund.")],
        tools=[], turn=1, model=EchoModel(), ledger=CostLedger())
    decision = await router.decide(ctx)
    assert decision.mode == "agentic" and set(decision.scores) == set(MODES)
    assert ctx.ledger.entries == []  # the offline router spends no model tokens


@pytest.mark.slow
def test_probe_set_accuracy_stays_above_the_embeddings_only_baseline(router: OfflineRouter) -> None:
    # The shipped router scored 0.78 on the probe set when trained; embeddings alone scored 0.70.
    rows = load_labeled(PROBE)
    proba = router.predict_proba([r.query for r in rows])
    report = score_routes([r.mode for r in rows], [MODES[i] for i in proba.argmax(axis=1)])
    assert report.n == 54
    assert report.accuracy >= 0.72


def test_plugin_name_builds_the_router() -> None:
    assert isinstance(load_mode_policy("offline"), OfflineRouter)


def test_shipped_file_is_small_and_describes_its_training() -> None:
    weights = RouterWeights.load(DEFAULT_WEIGHTS)
    assert DEFAULT_WEIGHTS.stat().st_size < 100_000
    assert weights.meta["features"] == list(FEATURE_NAMES)
    assert weights.meta["trained_on"] == "routing_train.jsonl"
    assert weights.W.shape == (384 + len(FEATURE_NAMES), 3)


def test_unreadable_or_mismatched_weights_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(UserFacingError, match="not found"):
        OfflineRouter(tmp_path / "missing.npz")
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"not a zip file")
    with pytest.raises(UserFacingError, match="unreadable"):
        OfflineRouter(bad)
    n = len(FEATURE_NAMES)
    wrong = RouterWeights(W=np.zeros((n + 1, 3)), b=np.zeros(3), feature_mean=np.zeros(n),
                          feature_std=np.ones(n), embedding_dim=0)
    wrong.save(tmp_path / "wrong.npz")
    with pytest.raises(UserFacingError, match="shape"):
        OfflineRouter(tmp_path / "wrong.npz")


def test_features_see_content_not_pronouns() -> None:
    names = list(FEATURE_NAMES)
    order = dict(zip(names, features_of("Cancel reservation 8JX2TD and refund my order #W4817420."), strict=True))
    assert order["identifiers"] > 0 and order["actions_on_records"] == 1.0 and order["owned_record"] == 1.0
    assert order["quantities"] == 0.0  # digits inside ids are not quantities
    math_row = dict(zip(names, features_of("She buys 3 pens at $2 each. How much does she spend?"), strict=True))
    assert math_row["quantities_with_cues"] == 1.0 and math_row["record_nouns"] == 0.0
    assert features_of("You want to know it.") == features_of("I want to know it.")


def test_augmentation_keeps_labels_and_frames_every_mode_alike() -> None:
    from agent.routing.router_eval import LabeledQuery

    rows = [LabeledQuery("Who wrote Hamlet?", "instant"),
            LabeledQuery("Ann has 3 apples and buys 4 more. How many apples does she have?", "reasoning"),
            LabeledQuery("You want to cancel your reservation ABC123.", "agentic")]
    out = augment(rows, copies=2)
    assert out[:3] == rows and len(out) == 9
    assert all(r.mode == rows[i // 2].mode for i, r in enumerate(out[3:]))
    assert all("How many apples" in r.query for r in out if r.mode == "reasoning")  # never cut


def test_fit_learns_a_separable_toy_problem_from_features() -> None:
    from agent.routing.router_eval import LabeledQuery

    rows = [LabeledQuery(q, m) for q, m in [
        ("Who wrote Hamlet?", "instant"), ("Capital of Peru?", "instant"),
        ("Ann has 3 apples and buys 4 more. How many apples in total?", "reasoning"),
        ("Each box holds 6 eggs and she has 5 boxes. How many eggs are left after 7 break?", "reasoning"),
        ("Cancel my order #W1234567 and refund it.", "agentic"), ("Change my reservation ZX81QP.", "agentic"),
    ]]
    weights = fit(rows, np.zeros((len(rows), 384), np.float32), RouterTrainConfig(use_embeddings=False, epochs=300))
    assert weights.embedding_dim == 0
    router = OfflineRouter(weights)
    assert [MODES[i] for i in router.predict_proba([r.query for r in rows]).argmax(axis=1)] == [r.mode for r in rows]

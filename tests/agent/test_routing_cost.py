"""The cost-aware policy (cheapest mode clearing a threshold) and cost-of-pass arithmetic."""

from __future__ import annotations

import numpy as np
import pytest

from agent.cost_of_pass import cost_of_pass, reduction
from agent.ledger import CostLedger, Price, PriceTable
from agent.messages import Usage
from agent.routing import CostAwareRouter, ModeCost, OfflineRouter, RouterWeights
from agent.routing.features import FEATURE_NAMES

NEEDS = {"instant": 0.7, "reasoning": 0.2, "agentic": 0.1}


def features_only_router(bias: tuple[float, float, float]) -> OfflineRouter:
    """A real OfflineRouter whose weights ignore the query (no embedding model needed)."""
    n = len(FEATURE_NAMES)
    return OfflineRouter(RouterWeights(W=np.zeros((n, 3), np.float32), b=np.array(bias, np.float32),
                                       feature_mean=np.zeros(n, np.float32), feature_std=np.ones(n, np.float32),
                                       embed_scale=0.0, embedding_dim=0))


@pytest.mark.parametrize(
    ("threshold", "mode"),
    [(0.6, "instant"), (0.7, "instant"), (0.8, "reasoning"), (0.9, "reasoning"), (0.95, "agentic")],
)
def test_cheapest_mode_that_clears_the_threshold(threshold: float, mode: str) -> None:
    router = CostAwareRouter(threshold=threshold, router=features_only_router((0, 0, 0)))
    decision = router.choose(NEEDS)
    assert decision.mode == mode
    assert decision.scores == {"instant": 0.7, "reasoning": 0.9, "agentic": 1.0}


def test_costs_decide_the_order_not_the_mode_names() -> None:
    costs = {"instant": ModeCost(500, 500), "reasoning": ModeCost(10, 10), "agentic": ModeCost(2000, 0)}
    decision = CostAwareRouter(threshold=0.7, costs=costs).choose(NEEDS)
    assert decision.mode == "reasoning"  # cheapest, and 0.9 clears 0.7


def test_measured_success_matrix_when_no_mode_clears() -> None:
    success = {m: {n: 0.5 for n in ("instant", "reasoning", "agentic")} for m in ("instant", "reasoning", "agentic")}
    success["agentic"] = {"instant": 0.6, "reasoning": 0.6, "agentic": 0.6}
    decision = CostAwareRouter(threshold=0.9, success=success).choose(NEEDS)
    assert decision.mode == "agentic" and "no mode reaches" in decision.reason


def test_dollar_costs_from_a_model_price() -> None:
    router = CostAwareRouter(unit="usd", model="gpt-4o-mini")
    cost = ModeCost(1_000_000, 1_000_000)
    assert cost.dollars(PriceTable().price_for("gpt-4o-mini")) == pytest.approx(0.75)
    assert router.cost_of("instant") < router.cost_of("reasoning") < router.cost_of("agentic")


def test_mode_costs_and_ledger_use_one_price_formula() -> None:
    price = Price(input_per_mtok=3.0, output_per_mtok=15.0)
    assert price.dollars(70.5, 63.25) == pytest.approx((70.5 * 3.0 + 63.25 * 15.0) / 1e6)
    assert ModeCost(70.5, 63.25).dollars(price) == price.dollars(70.5, 63.25)
    usage = Usage(input_tokens=1200, output_tokens=300, requests=1)
    assert price.cost(usage) == price.dollars(1200, 300) == pytest.approx(0.0081)
    assert CostLedger().book_model("claude-3-7-sonnet", usage).cost == pytest.approx(0.0081)


def test_route_uses_the_offline_router_probabilities() -> None:
    router = CostAwareRouter(threshold=0.8, router=features_only_router((0.0, 3.0, 0.0)))
    details = router.details("anything at all")
    assert details["mode"] == "reasoning"
    assert details["needs"]["reasoning"] > 0.8
    assert details["predicted_success"]["agentic"] == pytest.approx(1.0, abs=1e-3)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"threshold": 1.5}, "threshold"),
        ({"unit": "euro"}, "unit"),
        ({"unit": "usd"}, "model name or a price"),
        ({"costs": {"instant": ModeCost(1, 1)}}, "lack modes"),
        ({"success": {"instant": {"instant": 1.0}}}, "full matrix"),
    ],
)
def test_bad_options_are_rejected(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        CostAwareRouter(**kwargs)


def ledger(input_tokens: int, output_tokens: int, model: str = "local:qwen", tool_cost: float = 0.0,
           label: str = "agent") -> CostLedger:
    out = CostLedger()
    out.book_model(model, Usage(input_tokens=input_tokens, output_tokens=output_tokens, requests=1),
                   PriceTable({"gpt-x": Price(input_per_mtok=1.0, output_per_mtok=2.0)}), label=label)
    out.book_tool("search", tool_cost)
    return out


def test_cost_of_pass_in_tokens_and_dollars() -> None:
    ledgers = [ledger(100, 50), ledger(200, 100, model="gpt-x", tool_cost=0.01), ledger(50, 0)]
    result = cost_of_pass(ledgers, [True, True, False])
    assert (result.attempts, result.correct, result.tokens, result.output_tokens) == (3, 2, 500, 150)
    assert result.dollars == pytest.approx(0.01 + (200 * 1.0 + 100 * 2.0) / 1e6)
    assert result.tokens_per_pass == 250
    assert result.dollars_per_pass == pytest.approx(result.dollars / 2)
    assert result.accuracy == pytest.approx(2 / 3)
    assert result.as_dict()["tokens_per_pass"] == 250


def test_cost_of_pass_with_nothing_correct_is_infinite_and_labels_filter() -> None:
    ledgers = [ledger(100, 0), ledger(10, 0, label="router")]
    assert cost_of_pass(ledgers, [False, False]).tokens_per_pass is None
    assert cost_of_pass(ledgers, [True, False], labels={"router"}).tokens == 10
    with pytest.raises(ValueError):
        cost_of_pass(ledgers, [True])


def test_reduction_against_a_baseline() -> None:
    cheap = cost_of_pass([ledger(55, 0)], [True])
    dear = cost_of_pass([ledger(100, 0)], [True])
    assert reduction(cheap, dear) == pytest.approx(0.45)
    assert reduction(cheap, cost_of_pass([ledger(1, 0)], [False])) is None

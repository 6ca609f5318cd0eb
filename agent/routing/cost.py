"""The cost-aware policy: the cheapest mode whose predicted success clears a threshold.

Predicted success comes from the offline router's probabilities. The router estimates which mode
a query needs; a mode solves a query that needs it or any cheaper mode, so by default

    P(success | run in m) = sum over modes l not dearer than m of P(needs l)

(a `success` matrix can say otherwise, e.g. from measured per-mode accuracy). Costs are average
tokens per query of each mode; with a model price they are converted to dollars.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent.ledger import Price, PriceTable
from agent.plugin_api import MODES, InterventionContext, Mode, ModeDecision
from agent.routing.offline import OfflineRouter, last_user_text


@dataclass(frozen=True)
class ModeCost:
    """Average tokens one query costs in a mode."""

    input_tokens: float
    """Prompt tokens over all of the mode's calls."""
    output_tokens: float
    """Generated tokens over all of the mode's calls."""

    @property
    def tokens(self) -> float:
        """Input plus output tokens."""
        return self.input_tokens + self.output_tokens

    def dollars(self, price: Price) -> float:
        """The same usage priced in dollars."""
        return price.dollars(self.input_tokens, self.output_tokens)


# Mean tokens per query of each mode, measured by `python bench/routing.py` (15 queries, max_tokens
# 256) on the embedded model local:qwen2.5-coder-0.5b; see docs/routing.md. Only their order and
# ratios matter to the policy; pass costs= for another model or workload.
DEFAULT_MODE_COSTS: dict[str, ModeCost] = {
    "instant": ModeCost(input_tokens=70, output_tokens=63),
    "reasoning": ModeCost(input_tokens=116, output_tokens=198),
    "agentic": ModeCost(input_tokens=670, output_tokens=97),
}


DEFAULT_THRESHOLD = 0.8
"""The threshold of weights that carry no tuned one."""


def default_success() -> dict[str, dict[str, float]]:
    """success[m][l]: chance that mode m solves a query that needs mode l (1 if m is not cheaper)."""
    return {m: {need: 1.0 if MODES.index(m) >= MODES.index(need) else 0.0 for need in MODES} for m in MODES}


@dataclass
class CostAwareRouter:
    """Picks the cheapest mode whose predicted success is at least `threshold`."""

    threshold: float | None = None
    """Predicted success a mode must reach; when none does, the most likely to succeed wins. By
    default the one tuned with the weights (oracle-label weights), else DEFAULT_THRESHOLD."""
    costs: Mapping[str, ModeCost | Mapping[str, float]] | None = None
    """Cost per mode (ModeCost or {"input_tokens", "output_tokens"}); by default the costs measured with
    the weights (oracle-label weights), else DEFAULT_MODE_COSTS."""
    unit: str = "tokens"
    """"tokens", or "usd" to price the costs with `price`/`model`."""
    model: str | None = None
    """Model name whose list price converts tokens to dollars when unit is usd."""
    price: Price | None = None
    """Explicit price (overrides model)."""
    success: Mapping[str, Mapping[str, float]] | None = None
    """success[m][l] matrix; by default the one measured with the weights (oracle-label weights), else
    default_success()."""
    weights: str | Path | None = None
    """Offline router weights file; the shipped one by default."""
    router: OfflineRouter | None = field(default=None, repr=False)
    """A ready offline router (built from `weights` when None)."""
    name: str = "cost"
    """Policy name."""
    _mode_costs: dict[str, ModeCost] = field(init=False, repr=False, default_factory=dict)
    """`costs` with every entry a ModeCost (built in __post_init__)."""
    _threshold: float = field(init=False, repr=False, default=DEFAULT_THRESHOLD)
    """`threshold` resolved (set in __post_init__)."""

    def __post_init__(self) -> None:
        if self.unit not in ("tokens", "usd"):
            raise ValueError(f"unit must be 'tokens' or 'usd', got {self.unit!r}")
        # Weights trained on oracle labels carry the success matrix, mode costs and threshold measured
        # with them (agent/routing/oracle_train.py); the shipped source-label weights carry none.
        meta = self._router().weights.meta if self.router is not None or self.weights is not None else {}
        if self.threshold is None:
            tuned = meta.get("threshold")
            self.threshold = DEFAULT_THRESHOLD if tuned is None else float(tuned)
        if not 0.0 <= self.threshold <= 1.0:
            raise ValueError(f"threshold must be between 0 and 1, got {self.threshold}")
        self._threshold = self.threshold
        if self.success is None and meta.get("success"):
            self.success = meta["success"]
        raw = self.costs if self.costs is not None else meta.get("mode_costs") or DEFAULT_MODE_COSTS
        missing = [m for m in MODES if m not in raw]
        if missing:
            raise ValueError(f"costs lack modes: {', '.join(missing)}")
        self._mode_costs = {m: c if isinstance(c, ModeCost) else ModeCost(**c) for m, c in raw.items()}
        self.costs = self._mode_costs
        self.success = {m: dict(row) for m, row in (self.success or default_success()).items()}
        if set(self.success) != set(MODES) or any(set(r) != set(MODES) for r in self.success.values()):
            raise ValueError("success must be a full matrix over instant, reasoning, agentic")
        if self.unit == "usd" and self.price is None:
            if not self.model:
                raise ValueError("unit 'usd' needs a model name or a price")
            self.price = PriceTable().price_for(self.model)

    def cost_of(self, mode: Mode) -> float:
        """The mode's cost in this router's unit."""
        cost = self._mode_costs[mode]
        return cost.dollars(self.price) if self.unit == "usd" and self.price else cost.tokens

    def predicted_success(self, needs: Mapping[str, float]) -> dict[str, float]:
        """P(success) of each mode from the probabilities of which mode the query needs."""
        success = self.success or {}
        return {m: round(sum(needs.get(n, 0.0) * success[m][n] for n in MODES), 4) for m in MODES}

    def choose(self, needs: Mapping[str, float]) -> ModeDecision:
        """The cheapest mode clearing the threshold, given the needs distribution."""
        predicted = self.predicted_success(needs)
        by_cost = sorted(MODES, key=lambda m: (self.cost_of(m), MODES.index(m)))
        for mode in by_cost:
            if predicted[mode] >= self._threshold:
                reason = (f"cost-aware: cheapest mode with predicted success {predicted[mode]:.2f} >= "
                          f"{self._threshold:.2f} ({self.cost_of(mode):.4g} {self.unit})")
                return ModeDecision(mode, reason=reason, scores=predicted)
        best = max(by_cost, key=lambda m: predicted[m])  # stable: the cheaper mode wins ties
        return ModeDecision(best, reason=f"cost-aware: no mode reaches {self._threshold:.2f}; most likely to succeed",
                            scores=predicted)

    def _router(self) -> OfflineRouter:
        if self.router is None:
            self.router = OfflineRouter(self.weights)
        return self.router

    def route_sync(self, query: str) -> ModeDecision:
        """Route one query (embeds it on this thread)."""
        return self.choose(self._router().scores(query))

    def details(self, query: str) -> dict[str, Any]:
        """Needs probabilities, predicted success and cost per mode, and the choice."""
        needs = self._router().scores(query)
        decision = self.choose(needs)
        return {
            "mode": decision.mode,
            "reason": decision.reason,
            "needs": needs,
            "predicted_success": decision.scores,
            "cost": {m: round(self.cost_of(m), 8) for m in MODES},
            "unit": self.unit,
            "threshold": self.threshold,
        }

    async def route(self, query: str) -> ModeDecision:
        """route_sync off the event loop."""
        return await asyncio.to_thread(self.route_sync, query)

    async def decide(self, ctx: InterventionContext) -> ModeDecision:
        """Pick the mode of the current turn from its latest user message."""
        return await self.route(last_user_text(ctx))


__all__ = ["DEFAULT_MODE_COSTS", "DEFAULT_THRESHOLD", "CostAwareRouter", "ModeCost", "default_success"]

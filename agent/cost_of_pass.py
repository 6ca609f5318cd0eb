"""Cost-of-pass: what a strategy spends per correct answer (total cost / number of correct answers).

Costs come from cost ledgers: model tokens priced by the price table, plus tool calls that carry a
price. Both dollars (for priced models) and tokens (for free local models, whose dollar cost is
zero) are reported. With no correct answer the cost of a pass is infinite, reported as None.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from agent.ledger import CostLedger


@dataclass(frozen=True)
class CostOfPass:
    """Spend, accuracy and cost per correct answer over a set of attempts."""

    attempts: int
    """Number of queries attempted."""
    correct: float
    """Number answered correctly (with several recorded runs per query, the expected number: each
    query counts its share of runs that passed)."""
    tokens: int
    """Total model tokens (input plus output) over all attempts."""
    output_tokens: int
    """Total generated tokens over all attempts."""
    dollars: float
    """Total dollars (model tokens priced, plus priced tool calls)."""

    @property
    def accuracy(self) -> float:
        """Share of attempts answered correctly."""
        return self.correct / self.attempts if self.attempts else 0.0

    @property
    def tokens_per_pass(self) -> float | None:
        """Tokens per correct answer; None when nothing was correct (infinite)."""
        return self.tokens / self.correct if self.correct else None

    @property
    def dollars_per_pass(self) -> float | None:
        """Dollars per correct answer; None when nothing was correct (infinite)."""
        return self.dollars / self.correct if self.correct else None

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form, derived values included."""
        return {
            **asdict(self),
            "accuracy": round(self.accuracy, 4),
            "tokens_per_pass": None if self.tokens_per_pass is None else round(self.tokens_per_pass, 2),
            "dollars_per_pass": None if self.dollars_per_pass is None else round(self.dollars_per_pass, 8),
        }


def cost_of_pass(
    ledgers: Sequence[CostLedger], correct: Sequence[bool], *, labels: Collection[str] | None = None
) -> CostOfPass:
    """Cost-of-pass over attempts: one ledger and one correctness flag per query.

    labels restricts the spend to ledger entries with those labels (e.g. {"agent", "router"});
    None counts everything.
    """
    if len(ledgers) != len(correct):
        raise ValueError(f"{len(ledgers)} ledgers but {len(correct)} correctness flags")
    tokens = output = 0
    dollars = 0.0
    for ledger in ledgers:
        for entry in ledger.entries:
            if labels is not None and entry.label not in labels:
                continue
            tokens += entry.usage.total_tokens
            output += entry.usage.output_tokens
            dollars += entry.cost
    return CostOfPass(
        attempts=len(correct), correct=sum(bool(c) for c in correct), tokens=tokens, output_tokens=output,
        dollars=dollars,
    )


def reduction(strategy: CostOfPass, baseline: CostOfPass, unit: str = "tokens") -> float | None:
    """Relative cut in cost-of-pass against a baseline (0.45 = 45% cheaper per correct answer)."""
    ours = strategy.tokens_per_pass if unit == "tokens" else strategy.dollars_per_pass
    base = baseline.tokens_per_pass if unit == "tokens" else baseline.dollars_per_pass
    if ours is None or base is None or base == 0:
        return None
    return 1.0 - ours / base


__all__ = ["CostOfPass", "cost_of_pass", "reduction"]

"""Usage and cost accounting per run: tokens in and out, a price table per model, tool costs."""

from __future__ import annotations

from dataclasses import dataclass, field

from pydantic import BaseModel, Field

from agent.messages import Usage


class Price(BaseModel):
    """Price of a model in dollars per million tokens."""

    input_per_mtok: float = 0.0
    """Dollars per million input tokens."""
    output_per_mtok: float = 0.0
    """Dollars per million output tokens."""

    def dollars(self, input_tokens: float, output_tokens: float) -> float:
        """Dollar cost of these token counts (fractional ones too: per-query averages)."""
        return (input_tokens * self.input_per_mtok + output_tokens * self.output_per_mtok) / 1e6

    def cost(self, usage: Usage) -> float:
        """Dollar cost of the given usage."""
        return self.dollars(usage.input_tokens, usage.output_tokens)


# List prices, matched by model name prefix (longest prefix wins). Local and test models are free
# in dollars, which is why cost-of-pass on them is reported in tokens as well.
DEFAULT_PRICES: dict[str, Price] = {
    "gpt-4o-mini": Price(input_per_mtok=0.15, output_per_mtok=0.60),
    "gpt-4o": Price(input_per_mtok=2.50, output_per_mtok=10.0),
    "gpt-4.1-mini": Price(input_per_mtok=0.40, output_per_mtok=1.60),
    "gpt-4.1": Price(input_per_mtok=2.00, output_per_mtok=8.00),
    "o3-mini": Price(input_per_mtok=1.10, output_per_mtok=4.40),
    "claude-3-7-sonnet": Price(input_per_mtok=3.0, output_per_mtok=15.0),
}


@dataclass
class PriceTable:
    """Model name prefix → price; unknown models cost nothing."""

    prices: dict[str, Price] = field(default_factory=lambda: dict(DEFAULT_PRICES))
    """Prices by model-name prefix."""

    def price_for(self, model: str) -> Price:
        """The price of the longest matching prefix, or a zero price."""
        bare = model.split(":", 1)[-1]
        best = max((p for p in self.prices if bare.startswith(p)), key=len, default=None)
        return self.prices[best] if best else Price()


class LedgerEntry(BaseModel):
    """One booked item: a model request or a tool call."""

    kind: str
    """"model" or "tool"."""
    name: str
    """Model or tool name."""
    usage: Usage = Field(default_factory=Usage)
    """Tokens (model entries only)."""
    cost: float = 0.0
    """Dollars."""
    label: str = ""
    """What the spend was for (e.g. "agent", "inception", "user_sim", "router")."""


class CostLedger(BaseModel):
    """Everything a run spent."""

    entries: list[LedgerEntry] = Field(default_factory=list)
    """Booked items in order."""

    def book_model(self, model: str, usage: Usage, table: PriceTable | None = None, label: str = "agent") -> LedgerEntry:
        """Record a model request."""
        cost = (table or PriceTable()).price_for(model).cost(usage)
        entry = LedgerEntry(kind="model", name=model, usage=usage, cost=cost, label=label)
        self.entries.append(entry)
        return entry

    def book_tool(self, tool: str, cost: float, label: str = "agent") -> None:
        """Record a tool call's cost (zero-cost calls are not booked)."""
        if cost:
            self.entries.append(LedgerEntry(kind="tool", name=tool, cost=cost, label=label))

    def merge(self, other: CostLedger) -> None:
        """Append another ledger's entries."""
        self.entries.extend(other.entries)

    @property
    def usage(self) -> Usage:
        """Total tokens over model entries."""
        total = Usage()
        for e in self.entries:
            total = total + e.usage
        return total

    @property
    def cost(self) -> float:
        """Total dollars."""
        return sum(e.cost for e in self.entries)

    def by_label(self) -> dict[str, float]:
        """Dollars per label."""
        out: dict[str, float] = {}
        for e in self.entries:
            out[e.label] = out.get(e.label, 0.0) + e.cost
        return out

    def summary(self) -> dict[str, float | int]:
        """Tokens, requests and dollars, for reports."""
        u = self.usage
        return {
            "input_tokens": u.input_tokens,
            "output_tokens": u.output_tokens,
            "requests": u.requests,
            "cost_usd": round(self.cost, 6),
        }

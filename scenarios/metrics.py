"""Batch metrics: pass^k (tau2's combinatorial definition), success rates by group, process totals."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from math import comb
from typing import Any


def pass_hat_k(num_trials: int, success_count: int, k: int) -> float:
    """The chance that k trials drawn without replacement from num_trials all succeed:
    C(c, k) / C(n, k)."""
    if not 1 <= k <= num_trials:
        raise ValueError(f"k must be between 1 and the number of trials ({num_trials}), got {k}")
    if not 0 <= success_count <= num_trials:
        raise ValueError(f"success_count must be between 0 and {num_trials}, got {success_count}")
    return comb(success_count, k) / comb(num_trials, k)


def pass_k(successes: Mapping[str, Sequence[bool]], k: int) -> float | None:
    """Mean pass^k over scenarios that have at least k trials; None when none has."""
    values = [pass_hat_k(len(runs), sum(runs), k) for runs in successes.values() if len(runs) >= k]
    return sum(values) / len(values) if values else None


def pass_k_table(successes: Mapping[str, Sequence[bool]]) -> dict[int, float]:
    """pass^k for k = 1 … the largest number of trials any scenario has."""
    most = max((len(v) for v in successes.values()), default=0)
    out = {}
    for k in range(1, most + 1):
        value = pass_k(successes, k)
        if value is not None:
            out[k] = round(value, 6)
    return out


def group_rates(rows: Iterable[tuple[str, bool]]) -> dict[str, dict[str, float | int]]:
    """Success rate per group: {group: {runs, successes, rate}}, groups in first-seen order."""
    counts: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for group, ok in rows:
        counts[group][0] += 1
        counts[group][1] += int(ok)
    return {g: {"runs": n, "successes": s, "rate": round(s / n, 6)} for g, (n, s) in counts.items()}


def summarize(records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Summary of finished runs (run records as written to results.json)."""
    successes: dict[str, list[bool]] = defaultdict(list)
    by_error: list[tuple[str, bool]] = []
    terminations: dict[str, int] = defaultdict(int)
    cost = tokens = turns = tool_calls = tool_errors = 0.0
    rewards = []
    for r in records:
        ok = bool(r["evaluation"]["success"])
        successes[r["scenario_id"]].append(ok)
        for etype in r.get("error_types") or ["none"]:
            by_error.append((etype, ok))
        t = r["trajectory"]
        terminations[t["termination"]] += 1
        cost += float(t["agent_usage"].get("cost_usd", 0)) + float(t["user_usage"].get("cost_usd", 0))
        tokens += float(t["agent_usage"].get("input_tokens", 0)) + float(t["agent_usage"].get("output_tokens", 0))
        turns += len(t["turns"])
        tool_calls += sum(m["tool_calls"] for m in t["turns"])
        tool_errors += sum(m["tool_errors"] for m in t["turns"])
        rewards.append(float(r["evaluation"]["reward"]))
    n = len(records)
    return {
        "runs": n,
        "scenarios": len(successes),
        "success_rate": round(sum(sum(v) for v in successes.values()) / n, 6) if n else None,
        "mean_reward": round(sum(rewards) / n, 6) if n else None,
        "pass_k": pass_k_table(successes),
        "by_scenario": group_rates((r["scenario_id"], bool(r["evaluation"]["success"])) for r in records),
        "by_error_type": group_rates(by_error),
        "terminations": dict(terminations),
        "incomplete_grades": sum(1 for r in records if not r["evaluation"].get("complete", True)),
        "cost_usd": round(cost, 6),
        "agent_tokens": int(tokens),
        "mean_turns": round(turns / n, 3) if n else None,
        "tool_calls": int(tool_calls),
        "tool_errors": int(tool_errors),
    }

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


def is_infrastructure_error(record: Mapping[str, Any]) -> bool:
    """Whether a run record was graded as an infrastructure error (the model or user failed)."""
    return bool(record.get("evaluation", {}).get("infrastructure_error"))


def summarize(records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Summary of finished runs (run records as written to results.json).

    Runs graded as infrastructure errors count in terminations, cost and tokens, but not in
    success rates, mean reward or pass^k: they are listed apart under `infrastructure_errors`.
    """
    successes: dict[str, list[bool]] = defaultdict(list)
    by_error: list[tuple[str, bool]] = []
    terminations: dict[str, int] = defaultdict(int)
    infra: dict[str, Any] = {"runs": 0, "by_termination": defaultdict(int), "keys": []}
    cost = tokens = turns = tool_calls = tool_errors = 0.0
    rewards = []
    graded = []
    for r in records:
        t = r["trajectory"]
        terminations[t["termination"]] += 1
        cost += float(t["agent_usage"].get("cost_usd", 0)) + float(t["user_usage"].get("cost_usd", 0))
        tokens += float(t["agent_usage"].get("input_tokens", 0)) + float(t["agent_usage"].get("output_tokens", 0))
        turns += len(t["turns"])
        tool_calls += sum(m["tool_calls"] for m in t["turns"])
        tool_errors += sum(m["tool_errors"] for m in t["turns"])
        if is_infrastructure_error(r):
            infra["runs"] += 1
            infra["by_termination"][t["termination"]] += 1
            infra["keys"].append(r.get("key", f"{r['scenario_id']}#{r.get('trial', 0)}"))
            continue
        graded.append(r)
        ok = bool(r["evaluation"]["success"])
        successes[r["scenario_id"]].append(ok)
        for etype in r.get("error_types") or ["none"]:
            by_error.append((etype, ok))
        rewards.append(float(r["evaluation"]["reward"]))
    n, g = len(records), len(graded)
    infra["by_termination"] = dict(infra["by_termination"])
    return {
        "runs": n,
        "graded_runs": g,
        "scenarios": len({r["scenario_id"] for r in records}),
        "success_rate": round(sum(sum(v) for v in successes.values()) / g, 6) if g else None,
        "mean_reward": round(sum(rewards) / g, 6) if g else None,
        "pass_k": pass_k_table(successes),
        "by_scenario": group_rates((r["scenario_id"], bool(r["evaluation"]["success"])) for r in graded),
        "by_error_type": group_rates(by_error),
        "infrastructure_errors": infra,
        "terminations": dict(terminations),
        "incomplete_grades": sum(1 for r in graded if not r["evaluation"].get("complete", True)),
        "turns_at_step_limit": sum(1 for r in records for m in r["trajectory"]["turns"] if m.get("runtime_termination") == "max_steps"),
        "cost_usd": round(cost, 6),
        "agent_tokens": int(tokens),
        "mean_turns": round(turns / n, 3) if n else None,
        "tool_calls": int(tool_calls),
        "tool_errors": int(tool_errors),
    }

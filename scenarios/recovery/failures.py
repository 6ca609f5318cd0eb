"""Why each failed run of the error-recovery suite failed, read off its trajectory.

A rate says how often an arm recovers; the causes say where to work next. Each graded run that
did not pass gets one cause, the first that applies in the order of the pipeline (inception,
plan, agent's action, effect on the DB):

| cause | run kind | meaning |
|---|---|---|
| not_activated | error | the intervention did not fire on the error turn (arms whose intervention diagnoses turns) |
| wrong_plan | error | it fired there, but the plan names the other recovery tool |
| early_recovery | error | the agent called a recovery tool on a turn before the error |
| other_recovery_first | error | its first recovery call at or after the error turn is the other tool |
| plan_not_followed | error | the plan named the right tool; the agent never called a recovery tool |
| no_recovery_call | error | no plan (an arm without one), and no recovery call |
| db_mismatch | error, control | the recovery was right (or none was due), but the DB ended otherwise |
| unconfirmed_write | error | the recovery and the DB were right, but the write came before the user's "yes" (CONFIRMED) |
| planted_recovery | control | the intervention fired on an error-free turn and the agent called a recovery tool |
| recovery_call | control | the agent called a recovery tool by itself |
| other | any | none of the above (read the trajectory) |

    python -m scenarios.recovery.report rein=runs/rein/results.json --failures
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from scenarios.metrics import is_infrastructure_error
from scenarios.recovery.build import RECOVERY_TOOL_NAMES

CAUSES = (
    "not_activated",
    "wrong_plan",
    "early_recovery",
    "other_recovery_first",
    "plan_not_followed",
    "no_recovery_call",
    "db_mismatch",
    "unconfirmed_write",
    "planted_recovery",
    "recovery_call",
    "other",
)
"""Every cause, in the order they are tested."""


@dataclass
class FailedRun:
    """One graded run that did not pass, and why."""

    scenario_id: str
    """The scenario."""
    cause: str
    """One of CAUSES."""
    detail: str
    """What the trajectory shows, in a line (the plan's type and tool, the calls made)."""


def _recovery_calls(trajectory: dict[str, Any]) -> list[tuple[int, str]]:
    """(user turn, tool) of every recovery call the agent made, in order."""
    return [
        (int(m.get("turn", 0)), tc.get("name", ""))
        for m in trajectory.get("messages", [])
        if m.get("source") == "agent"
        for tc in m.get("tool_calls") or []
        if tc.get("name") in RECOVERY_TOOL_NAMES
    ]


def error_turn(trajectory: dict[str, Any]) -> int | None:
    """The user turn the (first) error was injected at; None for a control."""
    injected = trajectory.get("injected_errors") or []
    return int(injected[0].get("turn", 0)) if injected else None


def _plants(trajectory: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for r in trajectory.get("interventions", []) if r.get("activated")]


REVIEW_ONLY = frozenset({"self-refine"})
"""Interventions that review the agent's drafts and never diagnose a turn: the runtime records
them on every turn too (never activated), so their records say nothing about diagnosis."""


def diagnoses(records: list[dict[str, Any]]) -> bool:
    """Whether the arm's intervention diagnoses user turns (ReIn, NPI): its runs record each
    turn's verdict, fired or not. none records nothing and self-refine only reviews, so for them
    a missing plan is no cause."""
    return any(
        "activated" in rec and rec.get("name") not in REVIEW_ONLY
        for r in records
        for rec in (r.get("trajectory") or {}).get("interventions", [])
    )


def failure_of(record: dict[str, Any], diagnosed: bool) -> FailedRun | None:
    """The cause of a failed, graded run; None for a run that passed or was not graded.
    diagnosed: whether the arm's intervention diagnoses turns (diagnoses())."""
    from scenarios.users.error_types import ERROR_TYPES

    if record.get("success") or is_infrastructure_error(record) or "recovery" not in record.get("tags", []):
        return None
    sid = str(record.get("scenario_id", "?"))
    t = record.get("trajectory", {})
    components = (record.get("evaluation") or {}).get("components") or {}
    db_ok = components.get("DB") == 1.0
    calls = _recovery_calls(t)
    said = ", ".join(f"{tool}@{turn}" for turn, tool in calls) or "no recovery call"
    types = record.get("error_types") or []
    if not types:  # a control
        fired = _plants(t)
        if calls and fired:
            return FailedRun(sid, "planted_recovery", f"planted {fired[0].get('error_type')} on turn {fired[0].get('turn')}; {said}")
        if calls:
            return FailedRun(sid, "recovery_call", said)
        return FailedRun(sid, "db_mismatch" if not db_ok else "other", said)
    etype = types[0]
    expected = ERROR_TYPES[etype].recovery_tool
    turn = error_turn(t) or 0
    plan = next((r for r in _plants(t) if r.get("turn") == turn), None)
    planned = f"planted {plan.get('error_type')} -> {plan.get('recovery_tool')}" if plan else "no plan"
    detail = f"{etype} at turn {turn}; {planned}; {said}"
    if diagnosed and plan is None:
        return FailedRun(sid, "not_activated", detail)
    if plan is not None and plan.get("recovery_tool") != expected:
        return FailedRun(sid, "wrong_plan", detail)
    if any(at < turn for at, _ in calls):
        return FailedRun(sid, "early_recovery", detail)
    first = next((tool for at, tool in calls if at >= turn), None)
    if first is not None and first != expected:
        return FailedRun(sid, "other_recovery_first", detail)
    if first is None:
        return FailedRun(sid, "plan_not_followed" if plan is not None else "no_recovery_call", detail)
    if not db_ok:
        return FailedRun(sid, "db_mismatch", detail)
    return FailedRun(sid, "unconfirmed_write" if components.get("CONFIRMED") == 0.0 else "other", detail)


def failures(records: list[dict[str, Any]]) -> list[FailedRun]:
    """The failed, graded runs of one arm, each with its cause."""
    diagnosed = diagnoses(records)
    return [f for r in records if (f := failure_of(r, diagnosed)) is not None]


def failures_markdown(arms: dict[str, list[FailedRun]]) -> str:
    """A table of causes per arm, then each arm's failed runs."""
    counts = {name: Counter(f.cause for f in runs) for name, runs in arms.items()}
    used = [c for c in CAUSES if any(c in n for n in counts.values())]
    lines = ["Why runs failed (the first cause that applies):", "",
             "| cause | " + " | ".join(arms) + " |", "|---|" + "---:|" * len(arms)]
    lines += [f"| {c} | " + " | ".join(str(counts[a][c]) for a in arms) + " |" for c in used]
    lines.append("| **failed runs** | " + " | ".join(str(len(runs)) for runs in arms.values()) + " |")
    for name, runs in arms.items():
        lines += ["", f"{name}:", ""]
        lines += [f"- {f.scenario_id}: **{f.cause}** ({f.detail})" for f in runs] or ["- none failed"]
    return "\n".join(lines)

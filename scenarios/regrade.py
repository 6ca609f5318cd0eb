"""Grading saved runs again, against the scenarios as they are now, without running any model.

Grading rules and scenario criteria change (a new check, a stricter requirement); the
trajectories a run saved hold everything grading reads (messages, tool results, the end DB
hash), so the old runs can be graded by the new rules instead of being run again:

    records = await regrade(load_runs("runs/rein/results.json"), load_scenarios("suite.yaml"))

The environment itself is not saved, so env assertions, if a scenario has any, cannot be checked
here: such a record is marked incomplete by the grader, as a run without an environment is.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from agent.errors import UserFacingError
from scenarios.grading import evaluate
from scenarios.orchestrator import Episode
from scenarios.runner import fingerprint, make_record
from scenarios.scenario import Scenario
from scenarios.trajectory import Trajectory


async def regrade(records: Iterable[dict[str, Any]], scenarios: Iterable[Scenario]) -> list[dict[str, Any]]:
    """Each record graded again against its scenario (matched by id); the record's run, start
    time and trajectory are kept, its grade and scenario fingerprint replaced."""
    by_id = {s.id: s for s in scenarios}
    out = []
    for record in records:
        sid = record.get("scenario_id")
        scenario = by_id.get(str(sid))
        if scenario is None:
            raise UserFacingError(f"run {record.get('key', sid)!r}: no scenario {sid!r} in the given scenarios")
        if "trajectory" not in record:
            raise UserFacingError(f"run {record.get('key', sid)!r} saved no trajectory, so it cannot be graded again")
        trajectory = Trajectory.model_validate(record["trajectory"])
        episode = Episode(trajectory, None)
        breakdown = await evaluate(scenario, episode)
        fresh = make_record(scenario, int(record.get("trial", 0)), episode, breakdown, scenario_hash=fingerprint(scenario))
        fresh["started_at"] = record.get("started_at", fresh["started_at"])
        out.append(fresh)
    return out

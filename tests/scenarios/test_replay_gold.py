"""Gold replay through rein's tools reproduces tau2's expected end states for every task."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from scenarios.canonical import canonical_hash
from scenarios.domains import DOMAINS, load_domain
from scenarios.domains.data import bundled_snapshot, tasks_path
from scenarios.domains.store import Snapshot
from scenarios.replay import replay_domain, replay_task
from scenarios.tau2_tasks import load_tasks

pytestmark = pytest.mark.core  # needs no extra: also run on the bare core install (.ci/core_check.sh)

TAU2 = (Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "tau2").resolve()


def _expected(domain: str) -> dict[str, Any]:
    path = TAU2 / domain / "expected_end_states.json"
    if not path.is_file():
        pytest.skip(f"shared tau2 data not found at {path}")
    expected: dict[str, Any] = json.loads(path.read_text())
    return expected


def _db(domain: str) -> Snapshot:
    snapshot = bundled_snapshot(domain)
    assert snapshot is not None, f"{domain} ships no db.json"
    return snapshot


@pytest.mark.parametrize("domain", list(DOMAINS))
def test_bundled_replay_matches_expected_end_states_and_keeps_the_snapshot(domain: str) -> None:
    expected = _expected(domain)
    assert _db(domain).canonical_hash() == expected["base_db_hash"]
    tasks = load_tasks(tasks_path(domain))
    assert {t.id for t in tasks} == set(expected["tasks"])

    for task in tasks:
        want = expected["tasks"][task.id]
        got = replay_task(lambda: load_domain(domain), task)
        assert got.initial_hash == want["initial_hash"], task.id
        assert got.end_hash == want["end_hash"], (task.id, want["changed_paths"])
        assert got.num_actions == want["num_gold_actions"], task.id
        assert got.db_checked == want["official_db_check_performed"], task.id
        assert [f.index for f in got.failing_actions] == [
            f["index"] for f in want["failing_actions"]
        ], task.id
        for mine, theirs in zip(got.failing_actions, want["failing_actions"], strict=True):
            # tau2 records "ValueError: <message>"; rein raises ToolError with the same message.
            assert theirs["error"] == f"ValueError: {mine.error}", task.id
            assert (mine.action_id, mine.name) == (theirs["action_id"], theirs["name"])
        # rein keeps the user DB separate from the agent DB (tau2 aliases them after an
        # agent_data merge), so the unaliased expectation applies where tau2 aliased.
        user_want = want.get("user_end_hash_unaliased", want["user_end_hash"])
        assert got.user_end_hash == user_want, task.id
        if not want["user_db_aliased_to_agent_db"]:
            assert got.user_initial_hash == want["user_initial_hash"], task.id

    # Full re-serialisation, not the cached record text: catches any in-place write to records
    # that the episodes share with the bundled snapshot.
    assert canonical_hash(_db(domain).data) == expected["base_db_hash"]


@pytest.mark.parametrize("domain", list(DOMAINS))
def test_replay_domain_on_the_shared_folder(domain: str) -> None:
    expected = _expected(domain)
    report = replay_domain(TAU2 / domain)
    assert report.domain == domain
    assert report.end_hashes() == {k: v["end_hash"] for k, v in expected["tasks"].items()}


def test_env_assertions_on_the_gold_end_state_match_tau2() -> None:
    expected = _expected("mock")
    for task in load_tasks(tasks_path("mock")):
        env = load_domain("mock")
        env.apply_initial_state(task.initial_state)
        criteria = task.evaluation_criteria
        assert criteria is not None
        for action in criteria.actions or []:
            env.call(action.name, action.requestor, **action.arguments)
        got = [env.run_env_assertion(a) for a in criteria.env_assertions or []]
        assert got == expected["tasks"][task.id]["env_assertions_on_gold_end_state"], task.id

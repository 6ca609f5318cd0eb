"""One error class for scenario and tasks files: a tasks.json problem is also a ScenarioFileError."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import scenarios
from agent.errors import UserFacingError
from scenarios.errors import ScenarioFileError, TaskFileError
from scenarios.loading import collect_scenarios, load_scenarios
from scenarios.tau2_tasks import load_split


def test_public_names_are_the_one_class() -> None:
    assert scenarios.ScenarioFileError is ScenarioFileError
    assert issubclass(TaskFileError, ScenarioFileError) and issubclass(ScenarioFileError, UserFacingError)


def test_messages_name_scenarios_and_tasks_by_their_own_word(tmp_path: Path) -> None:
    path = tmp_path / "x.json"
    err = ScenarioFileError(path, "bad", index=2, scenario_id="s3", field="user.persona")
    assert str(err) == f"{path}: scenario #2 (id 's3'): user.persona: bad"
    task = TaskFileError(path, "bad", index=2, scenario_id="t3", field="id")
    assert str(task) == f"{path}: task #2 (id 't3'): id: bad"
    assert (task.task_id, task.scenario_id, task.index, task.reason) == ("t3", "t3", 2, "bad")
    assert str(ScenarioFileError(path, "bad", index=0, document=4)) == f"{path}: document 4: bad"


def test_one_except_clause_catches_scenario_and_tasks_problems(tmp_path: Path) -> None:
    broken_tasks = tmp_path / "tasks.json"
    broken_tasks.write_text(json.dumps([{"id": "t1", "user_scenario": {"instructions": 7}}]))
    broken_yaml = tmp_path / "s.yaml"
    broken_yaml.write_text("id: s1\nnot_a_field: 1\n")
    with pytest.raises(ScenarioFileError, match=r"tasks.json: task #0 \(id 't1'\): user_scenario.instructions") as a:
        collect_scenarios([broken_tasks])
    assert isinstance(a.value, TaskFileError) and a.value.task_id == "t1"
    with pytest.raises(ScenarioFileError) as b:
        load_scenarios(broken_yaml)
    assert not isinstance(b.value, TaskFileError)
    split = tmp_path / "split_tasks.json"
    split.write_text(json.dumps({"test": ["t1"]}))
    with pytest.raises(ScenarioFileError, match="no split named 'dev'"):
        load_split(split, "dev")


def test_a_blank_scripted_user_turn_is_a_file_error(tmp_path: Path) -> None:
    # The recovery suite once shipped a control whose request came out empty; the agent was graded
    # on a dialogue whose user said nothing.
    path = tmp_path / "s.yaml"
    path.write_text(
        "id: s1\ndomain: retail\nuser:\n  turns:\n  - say: Hi, I'm Ana.\n  - say: '  '\n"
    )
    with pytest.raises(ScenarioFileError, match=r"user\.turns\[1\]\.say: String should match"):
        load_scenarios(path)

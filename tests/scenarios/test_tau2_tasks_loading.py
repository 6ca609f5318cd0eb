"""Loading tau2 tasks.json files: every shipped task validates; malformed files name the field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agent.errors import UserFacingError
from scenarios.domains.data import splits_path, tasks_path
from scenarios.tau2_tasks import (
    StructuredInstructions,
    TaskFileError,
    field_path,
    load_split,
    load_tasks,
)

pytestmark = pytest.mark.core  # needs no extra: also run on the bare core install (.ci/core_check.sh)


def _write(tmp_path: Path, data: Any, name: str = "tasks.json") -> Path:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data, indent=2))
    return path


def _minimal(task_id: str = "t1") -> dict[str, Any]:
    return {
        "id": task_id,
        "user_scenario": {"instructions": "Ask for help."},
        "evaluation_criteria": {
            "actions": [{"action_id": "a", "name": "get_users", "arguments": {}}],
            "reward_basis": ["DB"],
        },
    }


@pytest.mark.parametrize(
    ("domain", "count", "gold_actions"),
    [("mock", 10, 8), ("retail", 114, 550), ("airline", 50, 142)],
)
def test_every_shipped_task_loads(domain: str, count: int, gold_actions: int) -> None:
    tasks = load_tasks(tasks_path(domain))
    assert len(tasks) == count
    assert (
        sum(len((t.evaluation_criteria and t.evaluation_criteria.actions) or []) for t in tasks)
        == gold_actions
    )
    if domain != "mock":
        assert all(isinstance(t.user_scenario.instructions, StructuredInstructions) for t in tasks)
    assert sorted(load_split(splits_path(domain), "base")) == sorted(t.id for t in tasks)


def test_defaults_and_extra_fields_are_kept(tmp_path: Path) -> None:
    data = [_minimal()]
    data[0]["annotations"] = {"by": "me"}
    del data[0]["evaluation_criteria"]["reward_basis"]
    (task,) = load_tasks(_write(tmp_path, data))
    assert task.model_extra == {"annotations": {"by": "me"}}
    assert task.evaluation_criteria is not None
    assert task.evaluation_criteria.reward_basis == ["DB", "COMMUNICATE"]
    assert task.evaluation_criteria.actions is not None
    assert task.evaluation_criteria.actions[0].requestor == "assistant"


def test_invalid_json_names_file_line_and_column(tmp_path: Path) -> None:
    path = _write(tmp_path, '[\n  {"id": "x",\n   "user_scenario": }\n]')
    with pytest.raises(TaskFileError) as info:
        load_tasks(path)
    assert str(info.value) == f"{path}: invalid JSON at line 3, column 21: Expecting value"
    assert isinstance(info.value, UserFacingError)


def test_missing_required_field_names_task_and_field(tmp_path: Path) -> None:
    data = [_minimal("a"), _minimal("b")]
    del data[1]["user_scenario"]
    with pytest.raises(TaskFileError) as info:
        load_tasks(_write(tmp_path, data))
    err = info.value
    assert (err.index, err.task_id, err.field) == (1, "b", "user_scenario")
    assert str(err).endswith("tasks.json: task #1 (id 'b'): user_scenario: Field required")


def test_wrong_type_deep_inside_gives_the_full_path(tmp_path: Path) -> None:
    data = [_minimal("a")]
    data[0]["evaluation_criteria"]["actions"].append(
        {"action_id": "b", "name": "x", "arguments": ["oops"]}
    )
    with pytest.raises(TaskFileError) as info:
        load_tasks(_write(tmp_path, data))
    assert info.value.field == "evaluation_criteria.actions[1].arguments"
    assert "Input should be a valid dictionary" in info.value.reason
    assert '(got ["oops"])' in info.value.reason


def test_structured_instructions_errors_skip_union_tags(tmp_path: Path) -> None:
    data = [_minimal()]
    data[0]["user_scenario"]["instructions"] = {"domain": "retail", "task_instructions": "x"}
    with pytest.raises(TaskFileError) as info:
        load_tasks(_write(tmp_path, data))
    assert info.value.field == "user_scenario.instructions.reason_for_call"


@pytest.mark.parametrize(
    ("mutate", "field", "reason"),
    [
        (
            lambda t: t["evaluation_criteria"].update(reward_basis=["DB", "VIBES"]),
            "evaluation_criteria.reward_basis[1]",
            "Input should be",
        ),
        (
            lambda t: t["evaluation_criteria"]["actions"][0].update(requestor="system"),
            "evaluation_criteria.actions[0].requestor",
            "Input should be",
        ),
        (lambda t: t.update(id=7), "id", "valid string"),
        (
            lambda t: t.update(
                initial_state={"initialization_actions": [{"env_type": "user", "arguments": {}}]}
            ),
            "initial_state.initialization_actions[0].func_name",
            "Field required",
        ),
    ],
)
def test_bad_values_name_their_field(tmp_path: Path, mutate: Any, field: str, reason: str) -> None:
    data = [_minimal()]
    mutate(data[0])
    with pytest.raises(TaskFileError) as info:
        load_tasks(_write(tmp_path, data))
    assert info.value.field == field
    assert reason in info.value.reason


def test_file_level_problems(tmp_path: Path) -> None:
    with pytest.raises(TaskFileError, match="expected a JSON array of tasks, got object"):
        load_tasks(_write(tmp_path, {"tasks": []}))
    with pytest.raises(TaskFileError, match=r"task #0: expected a JSON object, got string"):
        load_tasks(_write(tmp_path, ["x"]))
    with pytest.raises(TaskFileError, match="duplicate task id 't1' \\(also task #0\\)"):
        load_tasks(_write(tmp_path, [_minimal(), _minimal()]))
    with pytest.raises(TaskFileError, match="file not found"):
        load_tasks(tmp_path / "missing.json")
    with pytest.raises(TaskFileError, match="is a directory"):
        load_tasks(tmp_path)
    bad_utf8 = tmp_path / "latin.json"
    bad_utf8.write_bytes(b'[{"id": "\xe9"}]')
    with pytest.raises(TaskFileError, match="not UTF-8"):
        load_tasks(bad_utf8)


def test_load_split_errors(tmp_path: Path) -> None:
    assert load_split(splits_path("retail"), "test")[:3] == ["5", "9", "12"]
    with pytest.raises(TaskFileError, match="no split named 'dev'; splits: base, test, train"):
        load_split(splits_path("retail"), "dev")
    with pytest.raises(TaskFileError, match="expected an object mapping split names"):
        load_split(_write(tmp_path, {"base": "1,2"}, "split.json"), "base")


def test_field_path_formatting() -> None:
    assert (
        field_path(("evaluation_criteria", "actions", 2, "name"))
        == "evaluation_criteria.actions[2].name"
    )
    assert (
        field_path(("user_scenario", "instructions", "structured", "domain"))
        == "user_scenario.instructions.domain"
    )
    assert field_path(()) == ""

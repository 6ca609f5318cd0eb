"""Scenario format: schema freshness, loading YAML/JSON/tau2 tasks, and clear errors for bad files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scenarios.loading import ScenarioFileError, collect_scenarios, load_scenarios
from scenarios.scenario import SCHEMA_PATH, Condition, Scenario, schema_text
from scenarios.tau2_tasks import TaskFileError

pytestmark = pytest.mark.core  # needs no extra: also run on the bare core install (.ci/core_check.sh)

EXAMPLES = Path(__file__).resolve().parents[2] / "scenarios" / "examples"
BUNDLED = Path(__file__).resolve().parents[2] / "scenarios" / "domains" / "data"

GOOD = """
id: s1
domain: mock
user:
  turns:
    - Please create a task called "Buy milk" for user_1.
    - say: Thanks
      when: {contains: task_2}
evaluation:
  actions:
    - {action_id: a, name: create_task, arguments: {user_id: user_1, title: Buy milk}}
  reward_basis: [DB, ACTION]
"""


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_schema_file_is_up_to_date() -> None:
    assert SCHEMA_PATH.read_text(encoding="utf-8") == schema_text(), "run: python -m scenarios.scenario"


def test_schema_documents_fields_and_accepts_bare_string_turns() -> None:
    schema = json.loads(schema_text())
    props = schema["properties"]
    assert props["domain"]["description"].startswith("mock, retail or airline")
    assert schema["$defs"]["ScenarioAction"]["properties"]["compare_args"]["description"]
    items = schema["$defs"]["ScriptedUserConfig"]["properties"]["turns"]["items"]
    assert {"type": "string"} in items["anyOf"]


def test_examples_load_and_validate_against_schema() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    import yaml

    schema = json.loads(schema_text())
    scenarios = collect_scenarios([EXAMPLES])
    assert len(scenarios) >= 5
    assert {s.domain for s in scenarios} >= {"mock", "retail"}
    for path in sorted(EXAMPLES.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            jsonschema.validate(doc, schema)


def test_yaml_string_turns_and_defaults(tmp_path: Path) -> None:
    [s] = load_scenarios(write(tmp_path, "s.yaml", GOOD))
    assert s.user.type == "scripted"
    assert s.user.turns[0].say.startswith("Please create")
    assert s.user.turns[1].when is not None and s.user.turns[1].when.holds("made task_2", [])
    assert s.agent.system_prompt is None and s.agent.greeting
    assert s.evaluation is not None and s.evaluation.basis() == ["DB", "ACTION"]
    assert s.source == str(tmp_path / "s.yaml")
    assert not s.wants_recovery_tools()


def test_multi_document_yaml_and_json_object(tmp_path: Path) -> None:
    two = GOOD + "---\n" + GOOD.replace("id: s1", "id: s2")
    assert [s.id for s in load_scenarios(write(tmp_path, "two.yaml", two))] == ["s1", "s2"]
    import yaml

    data = yaml.safe_load(GOOD)
    [s] = load_scenarios(write(tmp_path, "one.json", json.dumps(data)))
    assert s.id == "s1"


def test_simulated_user_inferred_from_instructions_and_errors_imply_recovery(tmp_path: Path) -> None:
    text = """
id: sim
domain: retail
user: {persona: terse, instructions: You want to cancel order 1.}
errors: [{type: unsupported_domain, turn: 1}]
"""
    [s] = load_scenarios(write(tmp_path, "sim.yaml", text))
    assert s.user.type == "simulated"
    assert s.wants_recovery_tools()
    [rc] = s.required_recovery()
    assert (rc.name, rc.after_turn) == ("transfer_to_human_agents", 1)


def test_condition_semantics() -> None:
    c = Condition(regex=r"task_\d+", tool_called="create_task")
    assert c.holds("created task_7", ["create_task"])
    assert not c.holds("created task_7", [])
    assert Condition(contains=["yes", "sure"], negate=True).holds("no way", [])
    with pytest.raises(ValueError, match="at least one"):
        Condition()


@pytest.mark.parametrize(
    ("text", "field", "reason"),
    [
        (GOOD.replace("reward_basis: [DB, ACTION]", "reward_basis: [DB, ACTON]"), "evaluation.reward_basis[1]", "Input should be"),
        (GOOD.replace("when: {contains: task_2}", "when: {regex: '(unclosed'}"), "user.turns[1].when", "invalid regex"),
        (GOOD.replace("domain: mock", "domain: mock\nmax_step: 3"), "max_step", "unknown field"),
        (GOOD.replace("id: s1\n", ""), "id", "Field required"),
        (GOOD.replace("- Please create", "- Note: please create"), "user.turns[0]", "quote the turn"),
        (GOOD + "errors: [{type: vague, turn: 0}]\n", "errors[0].type", "Input should be"),
        (GOOD + "max_steps: 0\n", "max_steps", "greater than or equal to 1"),
    ],
)
def test_malformed_scenario_names_file_field_and_reason(tmp_path: Path, text: str, field: str, reason: str) -> None:
    path = write(tmp_path, "bad.yaml", text)
    with pytest.raises(ScenarioFileError) as info:
        load_scenarios(path)
    err = info.value
    assert err.field == field
    assert reason in err.reason
    assert str(path) in str(err) and field in str(err)


def test_yaml_syntax_error_gives_line(tmp_path: Path) -> None:
    path = write(tmp_path, "broken.yaml", "id: x\nuser: [unclosed\n")
    with pytest.raises(ScenarioFileError, match=r"broken.yaml: invalid YAML at line \d+, column \d+"):
        load_scenarios(path)


def test_duplicate_ids_across_files_are_refused(tmp_path: Path) -> None:
    a = write(tmp_path, "a.yaml", GOOD)
    b = write(tmp_path, "b.yaml", GOOD)
    with pytest.raises(ScenarioFileError, match=r"duplicate scenario id 's1' \(also in .*a.yaml\)"):
        collect_scenarios([a, b])


def test_missing_path_and_wrong_suffix(tmp_path: Path) -> None:
    with pytest.raises(ScenarioFileError, match="no such file"):
        collect_scenarios([tmp_path / "nope.yaml"])
    with pytest.raises(ScenarioFileError, match="unsupported file type '.txt'"):
        load_scenarios(write(tmp_path, "s.txt", GOOD))


def test_tau2_tasks_files_become_simulated_user_scenarios() -> None:
    retail = load_scenarios(BUNDLED / "retail" / "tasks.json")
    airline = load_scenarios(BUNDLED / "airline" / "tasks.json")
    mock = load_scenarios(BUNDLED / "mock" / "tasks.json")  # text instructions: domain from the folder
    assert (len(retail), len(airline), len(mock)) == (114, 50, 10)
    s = retail[5]
    assert s.domain == "retail" and s.user.type == "simulated"
    assert s.evaluation is not None and s.evaluation.basis() == ["DB", "NL_ASSERTION"]
    assert s.evaluation.actions is not None and s.evaluation.actions[-1].name == "return_delivered_order_items"
    assert {m.domain for m in mock} == {"mock"}
    assert any(m.initial_state is not None for m in mock)
    assert isinstance(Scenario.model_validate(s.model_dump()), Scenario)


def test_tau2_task_without_domain_outside_a_domain_folder(tmp_path: Path) -> None:
    tasks = json.loads((BUNDLED / "mock" / "tasks.json").read_text())[:2]
    path = write(tmp_path, "tasks.json", json.dumps(tasks))
    with pytest.raises(ScenarioFileError) as info:
        load_scenarios(path)
    assert info.value.field == "user_scenario.instructions.domain"
    assert load_scenarios(path, domain="mock")[0].domain == "mock"


def test_malformed_tasks_json_names_the_field(tmp_path: Path) -> None:
    tasks = json.loads((BUNDLED / "airline" / "tasks.json").read_text())[:3]
    tasks[2]["evaluation_criteria"]["actions"][0]["name"] = 42
    path = write(tmp_path, "tasks.json", json.dumps(tasks))
    with pytest.raises(TaskFileError) as info:
        collect_scenarios([path])
    err = info.value
    assert err.field == "evaluation_criteria.actions[0].name"
    assert err.index == 2 and str(path) in str(err) and "valid string" in str(err)


@pytest.mark.parametrize(
    ("text", "where"),
    [
        # An unclosed quote or bracket is only noticed at the end of the file; the error points
        # at where it was opened.
        ('id: x\ndomain: mock\ndescription: "never closed\nuser: {turns: [hi]}\nmax_steps: 3\n', "line 3, column 14"),
        ("id: x\ndomain: mock\nuser: [unclosed\n", "line 3, column 7"),
        ("id: x\ndomain: mock\nuser: {turns: [hi}\nmax_steps: 3\n", "line 3, column 18"),
        ("id: a\ndomain: mock\nuser: {turns: [hi]}\n---\nid: b\n\tdomain: mock\n", "line 6, column 1"),
    ],
    ids=["unclosed-quote", "unclosed-bracket", "wrong-bracket", "tab-in-second-document"],
)
def test_yaml_syntax_errors_point_at_the_offending_line(tmp_path: Path, text: str, where: str) -> None:
    path = write(tmp_path, "broken.yaml", text)
    with pytest.raises(ScenarioFileError) as info:
        load_scenarios(path)
    assert f"invalid YAML at {where}:" in str(info.value)


def test_multi_document_errors_count_documents_from_one(tmp_path: Path) -> None:
    second = GOOD.replace("id: s1", "id: s2") + "max_step: 3\n"
    path = write(tmp_path, "two.yaml", GOOD + "---\n" + second)
    with pytest.raises(ScenarioFileError) as info:
        load_scenarios(path)
    assert "two.yaml: document 2 (id 's2'): max_step: unknown field" in str(info.value)
    assert info.value.document == 2
    # An empty document still counts: the number is the one found by counting `---`.
    path = write(tmp_path, "gap.yaml", GOOD + "---\n---\n" + second)
    with pytest.raises(ScenarioFileError, match=r"gap.yaml: document 3 \(id 's2'\)"):
        load_scenarios(path)
    path = write(tmp_path, "list.yaml", GOOD + "---\n- not a scenario\n")
    with pytest.raises(ScenarioFileError, match=r"list.yaml: document 2: expected a mapping"):
        load_scenarios(path)

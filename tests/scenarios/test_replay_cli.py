"""`rein replay`: JSON and table output, expected-hash comparison, and clear errors on bad input."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest

from agent.cli import main

pytestmark = pytest.mark.core  # needs no extra: also run on the bare core install (.ci/core_check.sh)

TAU2 = (Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "tau2").resolve()
BUNDLED = Path(__file__).resolve().parents[2] / "scenarios" / "domains" / "data"


def _shared(domain: str) -> Path:
    folder = TAU2 / domain
    if not (folder / "expected_end_states.json").is_file():
        pytest.skip(f"shared tau2 data not found at {folder}")
    return folder


def _expected_end_hashes(folder: Path) -> dict[str, str]:
    data = json.loads((folder / "expected_end_states.json").read_text())
    return {task_id: entry["end_hash"] for task_id, entry in data["tasks"].items()}


@pytest.mark.parametrize("domain", ["mock", "retail"])
def test_json_output_is_exactly_the_expected_end_hashes(
    domain: str, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _shared(domain)
    assert main(["replay", str(folder), "--json"]) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1  # one JSON object and nothing else
    assert json.loads(out) == _expected_end_hashes(folder)


def test_table_output_reports_matches_and_failing_calls(capsys: pytest.CaptureFixture[str]) -> None:
    folder = _shared("retail")
    assert main(["replay", str(folder)]) == 0
    out = capsys.readouterr().out
    assert "114/114 end hashes match" in out
    assert "15 had failing gold calls (18 calls)" in out
    assert "#0 find_user_id_by_email" in out


def test_bundled_gzip_folder_and_tasks_override(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _shared("mock")
    tasks = json.loads((folder / "tasks.json").read_text())
    subset = tmp_path / "two.json"
    subset.write_text(json.dumps(tasks[:2]))
    assert main(["replay", str(BUNDLED / "mock"), "--tasks", str(subset), "--json"]) == 0
    want = _expected_end_hashes(folder)
    assert json.loads(capsys.readouterr().out) == {t["id"]: want[t["id"]] for t in tasks[:2]}

    # A folder holding only db.json.gz (the bundled retail layout) replays too.
    assert (BUNDLED / "retail" / "db.json.gz").is_file()
    retail_tasks = json.loads((BUNDLED / "retail" / "tasks.json").read_text())
    one = tmp_path / "one.json"
    one.write_text(json.dumps(retail_tasks[:1]))
    assert main(["replay", str(BUNDLED / "retail"), "--tasks", str(one), "--json"]) == 0
    assert set(json.loads(capsys.readouterr().out)) == {retail_tasks[0]["id"]}


def test_mismatch_against_expected_exits_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _shared("mock")
    wrong = _expected_end_hashes(folder)
    wrong["update_task_1"] = "0" * 64
    expected = tmp_path / "expected.json"
    expected.write_text(json.dumps(wrong))
    assert main(["replay", str(folder), "--expected", str(expected)]) == 1
    out = capsys.readouterr().out
    assert "9/10 end hashes match" in out
    assert "MISMATCH" in out


def test_missing_directory_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["replay", str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err
    assert "nope: no such directory" in err
    assert "Traceback" not in err


def test_folder_without_db_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["replay", str(tmp_path)]) == 2
    assert "no db.json" in capsys.readouterr().err


def test_malformed_db_json_names_file_and_position(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "db.json").write_text('{"tasks": {},\n  "users": {,}}')
    assert main(["replay", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "db.json: invalid JSON at line 2, column 13" in err


def test_db_with_a_bad_field_names_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _shared("mock")
    db = json.loads((folder / "db.json").read_text())
    db["tasks"]["task_1"]["status"] = "done"
    (tmp_path / "db.json").write_text(json.dumps(db))
    shutil.copy(folder / "tasks.json", tmp_path / "tasks.json")
    assert main(["replay", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "not a valid mock db" in err and "tasks.task_1.status" in err


def test_unknown_db_layout_and_corrupt_gzip(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "db.json").write_text('{"accounts": {}}')
    assert main(["replay", str(tmp_path)]) == 2
    assert "cannot tell the domain from the DB's tables (accounts)" in capsys.readouterr().err

    other = tmp_path / "gz"
    other.mkdir()
    (other / "db.json.gz").write_bytes(gzip.compress(b'{"tasks": {}, "users": {}}')[:-6])
    assert main(["replay", str(other)]) == 2
    assert "db.json.gz: cannot read" in capsys.readouterr().err


def test_malformed_tasks_file_is_reported_with_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _shared("mock")
    shutil.copy(folder / "db.json", tmp_path / "db.json")
    tasks = json.loads((folder / "tasks.json").read_text())
    del tasks[3]["user_scenario"]["instructions"]
    (tmp_path / "tasks.json").write_text(json.dumps(tasks))
    assert main(["replay", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert (
        "tasks.json: task #3 (id 'update_task_1'): user_scenario.instructions: Field required"
        in err
    )


def test_domain_option_that_does_not_fit_the_db(capsys: pytest.CaptureFixture[str]) -> None:
    folder = _shared("mock")
    assert main(["replay", str(folder), "--domain", "retail"]) == 2
    assert "db.json: not a valid retail db: db.products: Field required" in capsys.readouterr().err

"""`rein run` end to end with the scripted model, and its errors for user mistakes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from agent.cli import main

pytestmark = pytest.mark.core  # needs no extra: also run on the bare core install (.ci/core_check.sh)

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "scenarios" / "examples"


def test_examples_run_and_pass_with_the_scripted_model(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    rc = main(["run", str(EXAMPLES), "--model", "scripted", "--out", str(out), "--json", "--no-progress"])
    assert rc == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["complete"] and summary["success_rate"] == 1.0 and summary["runs"] >= 5
    assert summary["terminations"].get("transfer") == 1
    assert (out / "results.json").is_file() and (out / "report.html").is_file()
    rc = main(["run", str(EXAMPLES), "--model", "scripted", "--out", str(out), "--resume", "--trials", "2", "--no-progress"])
    text = capsys.readouterr().out
    assert rc == 0 and "success rate: 100%" in text and "pass^k: k=1: 1.000, k=2: 1.000" in text
    assert len((out / "runs.jsonl").read_text().splitlines()) == 2 * summary["runs"]


def test_ids_and_limit_select_scenarios(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["run", str(EXAMPLES), "--model", "scripted", "--ids", "mock-create-task", "--out", str(tmp_path / "a"), "--json", "--no-progress"])
    assert rc == 0 and json.loads(capsys.readouterr().out)["runs"] == 1
    rc = main(["run", str(EXAMPLES), "--model", "scripted", "--limit", "2", "--out", str(tmp_path / "b"), "--json", "--no-progress"])
    assert rc == 0 and json.loads(capsys.readouterr().out)["runs"] == 2


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--resume"], "--resume needs --out"),
        (["--inject", "typo"], "unknown error type 'typo'"),
        (["--intervention", "nope"], "unknown intervention 'nope'"),
        (["--ids", "missing-id"], "no scenario with id missing-id"),
        (["--trials", "0"], "at least 1"),
        (["--mode", "turbo"], "unknown mode policy 'turbo'"),
    ],
)
def test_user_mistakes_exit_2_with_a_message(tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], message: str) -> None:
    rc = main(["run", str(EXAMPLES), "--model", "scripted", "--no-progress", *extra])
    assert rc == 2
    assert message in capsys.readouterr().err


def test_malformed_scenario_file_names_the_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("id: x\ndomain: mock\nuser: {turns: [hi]}\nevaluation: {reward_basis: [DBB]}\n")
    rc = main(["run", str(bad), "--model", "scripted", "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert rc == 2 and f"rein run: error: {bad}: evaluation.reward_basis[0]: Input should be" in err
    assert "Traceback" not in err


def test_malformed_tasks_json_names_the_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tasks = json.loads((ROOT / "scenarios" / "domains" / "data" / "retail" / "tasks.json").read_text())[:2]
    del tasks[1]["user_scenario"]["instructions"]
    path = tmp_path / "tasks.json"
    path.write_text(json.dumps(tasks))
    rc = main(["run", str(path), "--model", "scripted"])
    err = capsys.readouterr().err
    assert rc == 2 and "task #1" in err and "user_scenario.instructions: Field required" in err


def test_scripted_model_needs_scripts_and_simulated_users_need_a_user_model(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tasks = ROOT / "scenarios" / "domains" / "data" / "airline" / "tasks.json"
    assert main(["run", str(tasks), "--model", "scripted"]) == 2
    assert "needs agent.script" in capsys.readouterr().err
    sim = tmp_path / "sim.yaml"
    sim.write_text("id: s\ndomain: mock\nuser: {instructions: Create a task.}\nagent: {script: [{say: hi}]}\n")
    assert main(["run", str(sim), "--model", "scripted"]) == 2
    assert "simulated users need --user-model" in capsys.readouterr().err


def test_simulated_user_with_the_echo_model(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sim = tmp_path / "sim.yaml"
    sim.write_text("id: s\ndomain: mock\nuser: {instructions: Create a task.}\nmax_steps: 4\n")
    rc = main(["run", str(sim), "--model", "echo", "--out", str(tmp_path / "o"), "--json", "--no-progress"])
    summary = json.loads(capsys.readouterr().out)
    assert rc == 0 and summary["terminations"] == {"max_steps": 1}


def test_command_module_imports_light() -> None:
    code = "import sys, scenarios.run_cli; print(any(m in sys.modules for m in ('torch', 'llama_cpp', 'chromadb', 'langgraph')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "False"


def test_unknown_domain_is_refused_before_running(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "typo.yaml"
    bad.write_text("id: t\ndomain: retial\nuser: {turns: [hi]}\nagent: {script: [{say: hi}]}\n")
    out = tmp_path / "o"
    rc = main(["run", str(EXAMPLES), str(bad), "--model", "scripted", "--out", str(out), "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 2
    assert f"{bad}: scenario 't': unknown domain 'retial'; known: mock, retail, airline" in err
    assert not out.exists()  # nothing ran
    # A registered toolkit name is a domain too (tools only, no DB).
    tools_only = tmp_path / "calc.yaml"
    tools_only.write_text("id: c\ndomain: builtin\nuser: {turns: [hi]}\nagent: {script: [{say: hi}]}\n")
    rc = main(["run", str(tools_only), "--model", "scripted", "--out", str(out), "--json", "--no-progress"])
    assert rc == 0 and json.loads(capsys.readouterr().out)["terminations"] == {"user_stop": 1}

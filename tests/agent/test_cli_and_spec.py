"""The rein CLI's dispatch, `rein chat`, and agent specs."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from agent.cli import COMMANDS, main
from agent.errors import UserFacingError
from agent.runtime import build_agent
from agent.spec import AgentSpec, load_spec

pytestmark = pytest.mark.core  # needs no extra: also run on the bare core install (.ci/core_check.sh)

ROOT = Path(__file__).resolve().parents[2]


def test_help_lists_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for name in COMMANDS:
        assert name in out


def test_unknown_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["frobnicate"]) == 2
    assert "unknown command 'frobnicate'" in capsys.readouterr().err


def test_import_agent_and_help_stay_light() -> None:
    code = (
        "import sys, agent, agent.cli, tools\n"
        "agent.cli.main(['--help'])\n"
        "heavy = [m for m in ('torch', 'chromadb', 'llama_cpp', 'sentence_transformers', 'langgraph') if m in sys.modules]\n"
        "print('HEAVY', heavy)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT).stdout
    assert "HEAVY []" in out


def test_chat_with_messages(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["chat", "--model", "echo", "--db", "memory", "-m", "hello", "-m", "again"]) == 0
    out = capsys.readouterr().out
    assert "You said: hello" in out and "You said: again" in out


async def test_chat_loop_reads_stdin_and_keeps_the_thread(tmp_path: Path) -> None:
    from agent.cli.chat import chat

    db = tmp_path / "t.sqlite"
    agent = build_agent(AgentSpec(model="echo", checkpointer=f"sqlite:{db}"))
    out = io.StringIO()
    await chat(agent, "th", None, io.StringIO("first\n/history\n/exit\nnever\n"), out)
    text = out.getvalue()
    assert "You said: first" in text and "[user] first" in text and "never" not in text
    again = build_agent(AgentSpec(model="echo", checkpointer=f"sqlite:{db}"))
    assert [m.text for m in await again.ahistory("th")] == ["first", "You said: first"]
    await again.aclose()


def test_spec_from_yaml(tmp_path: Path) -> None:
    (tmp_path / "prompt.md").write_text("Be brief.")
    spec = tmp_path / "agent.yaml"
    spec.write_text(
        "name: helper\nmodel: echo\nsystem_prompt_file: prompt.md\ntools: [builtin, recovery]\n"
        "mode: instant\nstep_limits: {agentic: 4}\ncheckpointer: memory\n"
    )
    agent = build_agent(spec)
    assert agent.name == "helper"
    assert agent.system_prompt == "Be brief."
    assert [t.name for t in agent.tools] == ["think", "calculate", "report_internal_error", "transfer_to_human_agents"]
    assert agent.deps.step_limits.agentic == 4
    result = agent.invoke("hi")
    agent.close()
    assert result.mode == "instant" and result.output == "You said: hi"


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        ("model: [unclosed", "not valid yaml"),
        ("modle: echo\n", "modle: Extra inputs are not permitted"),
        ("step_limits: {agentic: many}\n", "step_limits.agentic: Input should be a valid integer"),
        ("interventions: [{name: rein, options: 3}]\n", "interventions.0"),
    ],
)
def test_malformed_spec_names_the_field(tmp_path: Path, content: str, fragment: str) -> None:
    spec = tmp_path / "bad.yaml"
    spec.write_text(content)
    with pytest.raises(UserFacingError) as info:
        load_spec(spec)
    assert str(spec) in str(info.value) and fragment in str(info.value)


def test_spec_errors_for_unknown_plugins(tmp_path: Path) -> None:
    with pytest.raises(UserFacingError, match="unknown intervention 'nope'"):
        build_agent({"model": "echo", "interventions": ["nope"], "checkpointer": "memory"})
    with pytest.raises(UserFacingError, match="unknown mode policy 'sideways'"):
        build_agent({"model": "echo", "mode": "sideways", "checkpointer": "memory"})
    with pytest.raises(UserFacingError, match="cannot load 'no_such_toolkit'"):
        build_agent({"model": "echo", "tools": ["no_such_toolkit"], "checkpointer": "memory"})


def test_spec_json_and_cli_error_exit(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "a.json"
    spec.write_text(json.dumps({"model": "echo", "checkpointer": "memory"}))
    assert main(["chat", "--spec", str(spec), "-m", "x"]) == 0
    assert "You said: x" in capsys.readouterr().out
    assert main(["chat", "--spec", str(tmp_path / "missing.yaml"), "-m", "x"]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_spec_selects_a2fm_mode_paths() -> None:
    from agent.modes import A2FM_MODES, PLAIN_AGENTIC

    plain = build_agent({"model": "echo", "checkpointer": "memory"})
    a2fm = build_agent({"model": "echo", "checkpointer": "memory", "mode_paths": "a2fm"})
    assert plain.deps.mode_config is PLAIN_AGENTIC and a2fm.deps.mode_config is A2FM_MODES

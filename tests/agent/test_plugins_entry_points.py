"""Plug-ins through entry points: a tiny external distribution, built and installed in a temp
dir, adds a toolkit, an intervention, a mode policy and a command without editing rein."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from agent.cli import main
from agent.errors import UserFacingError
from agent.models import ScriptedModel, call, reply
from agent.plugins import intervention_names, load_intervention, load_mode_policy, mode_policy_names
from agent.runtime import Agent, build_agent
from tools import entry_points, load_toolkit, toolkit_names
from tools.registry import is_toolkit_factory

ROOT = Path(__file__).resolve().parents[2]

PYPROJECT = """\
[build-system]
requires = ["setuptools"]
build-backend = "setuptools.build_meta"

[project]
name = "rein-shout"
version = "0.1.0"

[project.entry-points."rein.toolkits"]
shout = "rein_shout:shout_toolkit"
# Also declared by rein itself, with another target: a conflict neither side wins.
recovery = "rein_shout:shout_toolkit"

[project.entry-points."rein.interventions"]
whisper = "rein_shout:Whisper"

[project.entry-points."rein.mode_policies"]
hasty = "rein_shout:Hasty"

[project.entry-points."rein.commands"]
hello = "rein_shout.cli"
"""

PACKAGE = '''\
"""A third-party rein plug-in."""

from agent.plugin_api import ModeDecision, Plant
from tools import Toolkit, tool


def shout_toolkit(suffix: str = "!") -> Toolkit:
    # Deliberately not marked @toolkit_factory: an entry point is trusted as declared.
    @tool
    def shout(text: str) -> str:
        """Say text loudly.

        Args:
            text: what to say
        """
        return text.upper() + suffix

    return Toolkit([shout], name="shout")


class Whisper:
    name = "whisper"

    async def before_turn(self, ctx):
        return Plant(text="speak softly", record={"heard": ctx.turn})


class Hasty:
    async def decide(self, ctx):
        return ModeDecision("agentic", reason="hasty")
'''

CLI = '''\
"""`rein hello`: greet someone from a plug-in."""


def add_arguments(parser):
    parser.add_argument("--name", default="world")


def run(args):
    print(f"hello {args.name}")
    return 0
'''


@pytest.fixture(scope="module")
def plugin_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """rein-shout, built from source and installed with pip into its own folder."""
    src = tmp_path_factory.mktemp("rein-shout-src")
    (src / "pyproject.toml").write_text(PYPROJECT)
    (src / "rein_shout").mkdir()
    (src / "rein_shout" / "__init__.py").write_text(PACKAGE)
    (src / "rein_shout" / "cli.py").write_text(CLI)
    target = tmp_path_factory.mktemp("rein-shout-site")
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
         "--no-index", "--target", str(target), str(src)],
        check=True, capture_output=True, timeout=120,
    )
    assert list(target.glob("rein_shout-0.1.0.dist-info/entry_points.txt"))
    return target


@pytest.fixture
def installed(plugin_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The plug-in on sys.path for this test only."""
    monkeypatch.syspath_prepend(str(plugin_dir))
    return plugin_dir


def test_rein_declares_its_own_plugins_and_they_load() -> None:
    assert {"builtin", "recovery", "python", "mock", "retail", "airline", "retrieval"} <= set(toolkit_names())
    assert intervention_names()[:1] == ["none"]
    assert {"rein", "npi", "self-refine", "retrieve"} <= set(intervention_names())
    assert {"self", "offline", "cost"} <= set(mode_policy_names())
    commands = entry_points.names(entry_points.COMMANDS)
    assert {"chat", "demo", "run", "replay", "route", "jigsaw", "graph", "serve", "models"} <= set(commands)
    for name in commands:
        found = entry_points.find(entry_points.COMMANDS, name)
        assert found is not None, name
        module = found.load()
        assert callable(module.add_arguments) and callable(module.run), name


def test_rein_marks_its_own_toolkit_factories() -> None:
    # Not needed to load them by name, but it keeps them usable as "module:attribute" spec entries.
    for name in ("builtin", "recovery", "python", "mock", "retail", "airline"):
        plugin = entry_points.find(entry_points.TOOLKITS, name)
        assert plugin is not None and is_toolkit_factory(plugin.load()), name


def test_without_the_plugin_its_names_are_unknown() -> None:
    with pytest.raises(KeyError, match="unknown toolkit 'shout'; known: .*builtin"):
        load_toolkit("shout")
    with pytest.raises(UserFacingError, match="unknown intervention 'whisper'"):
        load_intervention("whisper")


async def test_a_spec_uses_the_plugins_toolkit_intervention_and_mode_policy(installed: Path) -> None:
    assert {"shout", "whisper", "hasty"} <= {*toolkit_names(), *intervention_names(), *mode_policy_names()}
    spec = {"model": "echo", "tools": ["shout", "builtin"], "interventions": ["whisper"], "mode": "hasty", "checkpointer": "memory"}
    agent = build_agent(spec)
    assert [t.name for t in agent.tools][:1] == ["shout"]
    assert [i.name for i in agent.interventions] == ["whisper"]
    await agent.aclose()

    model = ScriptedModel([call("shout", {"text": "hi"}), reply("done")])
    whisper = load_intervention("whisper")
    assert whisper is not None
    agent = Agent(model=model, tools=load_toolkit("shout", suffix="?"), interventions=[whisper],
                  mode_policy=load_mode_policy("hasty"), checkpointer="memory")
    result = await agent.ainvoke("say hi", thread_id="t")
    await agent.aclose()
    assert result.output == "done"
    assert result.mode == "agentic" and any(getattr(e, "reason", None) == "hasty" for e in result.events)
    assert [r["heard"] for r in result.interventions if r["name"] == "whisper"] == [0]
    assert any(m.role == "tool" and m.text == "HI?" for m in result.messages)


def test_one_name_declared_twice_is_refused(installed: Path) -> None:
    with pytest.raises(KeyError, match="'recovery' is declared by more than one distribution: rein-runtime.*rein-shout"):
        load_toolkit("recovery")


def test_the_cli_runs_the_plugins_command_and_uses_its_toolkit(installed: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["hello", "--name", "rein"]) == 0
    assert capsys.readouterr().out == "hello rein\n"
    env = {**os.environ, "PYTHONPATH": str(installed)}
    rein = [sys.executable, "-m", "agent.cli"]
    helped = subprocess.run([*rein, "--help"], capture_output=True, text=True, env=env, cwd=ROOT, timeout=60)
    assert "  hello    greet someone from a plug-in\n" in helped.stdout
    chat = subprocess.run(
        [*rein, "chat", "--model", "echo", "--db", "memory", "--tools", "shout", "--intervention", "whisper",
         "--mode", "hasty", "-m", "hi"],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=60,
    )
    assert chat.returncode == 0, chat.stderr
    assert "You said: hi" in chat.stdout
    alone = subprocess.run([*rein, "hello"], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert alone.returncode == 2 and "unknown command 'hello'" in alone.stderr


def _bare_tree(tmp_path: Path, with_pyproject: bool) -> Path:
    """tools/entry_points.py alone in a folder, as in a source tree nobody installed."""
    (tmp_path / "tools").mkdir()
    (tmp_path / "tools" / "__init__.py").write_text("")
    shutil.copy(ROOT / "tools" / "entry_points.py", tmp_path / "tools" / "entry_points.py")
    if with_pyproject:
        shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


@pytest.mark.parametrize("with_pyproject", [True, False])
def test_without_installed_metadata(tmp_path: Path, with_pyproject: bool) -> None:
    # -S: no site-packages, so no distribution's metadata is found, rein's included.
    tree = _bare_tree(tmp_path, with_pyproject)
    code = (
        "import tools.entry_points as e\n"
        "print(e.names(e.TOOLKITS))\n"
        "print(e.find(e.COMMANDS, 'chat'))\n"
        "print(e.missing_hint(e.TOOLKITS))\n"
    )
    out = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, cwd=tree, check=True, timeout=60).stdout
    names, chat, hint = out.splitlines()
    if with_pyproject:
        assert names == str(["airline", "builtin", "mock", "python", "recovery", "retail", "retrieval"])
        assert "value='agent.cli.chat'" in chat and "rein-runtime (pyproject.toml)" in chat
        assert hint == ""
    else:
        assert (names, chat) == ("[]", "None")
        assert "no rein.toolkits entry points are declared: install rein" in hint

"""`rein jigsaw solve` reports the sandbox layers its code actions ran under, and refuses to run
untrusted code with no OS layer unless told `--sandbox none`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from agent.cli import main
from tools.sandbox_bwrap import bwrap_status
from tools.sandbox_kernel import kernel_status


def test_solve_reports_the_sandbox_layers(capsys):
    assert main(["jigsaw", "solve", "--grid", "2", "--seed", "1", "--sandbox", "none", "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["solved"] is True
    assert payload["sandbox_layers"][:3] == ["ast-check", "builtins-allow-list", "rlimits"]
    assert "bwrap" not in payload["sandbox_layers"] and "os_layer='none'" in payload["sandbox_note"]
    assert main(["jigsaw", "solve", "--grid", "2", "--seed", "1"]) == 0
    text = capsys.readouterr().out
    line = next(line for line in text.splitlines() if line.startswith("sandbox layers: "))
    assert ("bwrap active" in line) == bwrap_status().usable, line


def test_a_required_but_unusable_os_layer_is_a_clear_error(capsys):
    code = main(["jigsaw", "solve", "--grid", "2", "--sandbox", "bwrap", "--json"])
    if bwrap_status().usable:
        assert code == 0 and "bwrap" in json.loads(capsys.readouterr().out)["sandbox_layers"]
    else:
        assert code == 2 and "os_layer='bwrap'" in capsys.readouterr().err


def test_landlock_can_be_asked_for_and_is_reported(capsys):
    code = main(["jigsaw", "solve", "--grid", "2", "--sandbox", "landlock", "--json"])
    if kernel_status().usable:
        payload = json.loads(capsys.readouterr().out)
        assert code == 0 and payload["solved"] is True
        assert "landlock" in payload["sandbox_layers"] and "bwrap" not in payload["sandbox_layers"]
        assert "Landlock ABI" in payload["sandbox_note"]
    else:
        assert code == 2 and "os_layer='landlock'" in capsys.readouterr().err


_CLI = '''
import sys
if sys.argv[1] == "hide-landlock":  # as a container whose seccomp profile refuses the syscalls would
    from tools.sandbox_kernel import deny_syscalls
    deny_syscalls(["landlock_create_ruleset"])
from agent.cli import main
sys.exit(main(sys.argv[2:]))
'''


def _solve_without_bwrap(*args: str, hide_landlock: bool = False) -> subprocess.CompletedProcess[str]:
    project = Path(__file__).resolve().parents[2]
    command = [sys.executable, "-c", _CLI, "hide-landlock" if hide_landlock else "-",
               "jigsaw", "solve", "--grid", "2", "--seed", "1", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=project, check=False,
                          env={"PATH": "/nonexistent", "PYTHONPATH": str(project), "HOME": str(Path.home())})


def test_without_bwrap_solve_uses_and_reports_the_kernel_layer_or_refuses():
    done = _solve_without_bwrap()
    if kernel_status().usable:
        assert done.returncode == 0, done.stderr
        line = next(line for line in done.stdout.splitlines() if line.startswith("sandbox layers: "))
        assert "landlock" in line and "bwrap, " not in line and "bwrap is not installed" in line, line
    else:
        assert done.returncode == 2 and "no OS sandbox layer" in done.stderr
    refused = _solve_without_bwrap("--json", hide_landlock=True)
    assert refused.returncode == 2, refused.stdout
    assert "no OS sandbox layer is available here" in refused.stderr and "--sandbox none" in refused.stderr
    opted_in = _solve_without_bwrap("--json", "--sandbox", "none", hide_landlock=True)
    assert opted_in.returncode == 0, opted_in.stderr
    payload = json.loads(opted_in.stdout)
    assert payload["solved"] is True and not {"bwrap", "landlock"} & set(payload["sandbox_layers"])

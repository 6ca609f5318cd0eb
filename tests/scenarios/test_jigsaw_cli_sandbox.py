"""`rein jigsaw solve` reports the sandbox layers its code actions ran under."""

from __future__ import annotations

import json

from agent.cli import main
from tools.sandbox_bwrap import bwrap_status


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

"""`rein jigsaw solve` and `rein jigsaw bench` through the CLI entry point."""

from __future__ import annotations

import json

from agent.cli import main


def test_solve_json_reports_solved_score_steps_and_reward(capsys):
    code = main(["jigsaw", "solve", "--image", "coffee", "--grid", "3", "--level", "2", "--seed", "4", "--json"])
    assert code == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["solved"] is True and payload["score"] == 1.0 and payload["steps"] == 1
    assert payload["reward"] == 0.95
    assert (payload["image"], payload["grid"], payload["level"], payload["seed"]) == ("coffee", 3, 2, 4)


def test_solve_text_output(capsys):
    assert main(["jigsaw", "solve", "--grid", "2", "--seed", "1"]) == 0
    assert "solved: yes" in capsys.readouterr().out


def test_bench_json_has_acc_and_score_per_cell(capsys):
    code = main(["jigsaw", "bench", "--grids", "2", "3", "--levels", "random", "1", "--seeds", "1",
                 "--images", "chelsea", "--json"])
    assert code == 0
    cells = json.loads(capsys.readouterr().out)
    assert [(c["grid"], c["level"]) for c in cells] == [(2, None), (2, 1), (3, None), (3, 1)]
    assert all(c["acc"] == 1.0 and c["score"] == 1.0 and c["episodes"] == 1 for c in cells)


def test_user_mistakes_are_clear_errors(capsys, tmp_path):
    assert main(["jigsaw", "solve", "--image", str(tmp_path / "nope.jpg")]) == 2
    assert "neither a file nor a bundled photo" in capsys.readouterr().err
    assert main(["jigsaw", "solve", "--grid", "2", "--level", "3"]) == 2
    assert "level for a 2x2 grid must be from 0 to 2" in capsys.readouterr().err
    assert main(["jigsaw", "bench", "--grids", "9"]) == 2
    assert "grid must be an integer from 2 to 8" in capsys.readouterr().err

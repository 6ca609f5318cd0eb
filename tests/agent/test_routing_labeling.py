"""Resumable labelling: a killed run resumes where it stopped, bad --out files, stratified order, the graph."""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from routing_label_worker import scripted_answer  # noqa: E402
from sigkill_util import kill_at_marker  # noqa: E402

from agent.errors import UserFacingError
from agent.messages import ModelRequest
from agent.models import FunctionModel
from scenarios.routing_tasks import load_tasks
from scenarios.routing_tasks.graph import ensure_graph
from scenarios.routing_tasks.labeling import label_to_file
from scenarios.routing_tasks.labeling import main as label_main
from scenarios.routing_tasks.labels_file import resume, stratified_order

ALL = load_tasks()
FAMILIES = ("trivia", "gsm8k", "bignum", "convert")
PICK = [t for f in FAMILIES for t in [x for x in ALL if x.family == f and x.split == "test"][:2]]
WORKER = Path(__file__).parent / "routing_label_worker.py"


def _tasks_file(tmp_path: Path) -> Path:
    path = tmp_path / "tasks.jsonl"
    path.write_text("".join(json.dumps(t.as_json()) + "\n" for t in PICK))
    return path


def _model(asked: list[str]) -> FunctionModel:
    def answer(request: ModelRequest) -> str:
        asked.append(next(m.text for m in reversed(request.messages) if m.role == "user"))
        return scripted_answer(request, PICK)

    return FunctionModel(answer, name="scripted")


def _labels(path: Path) -> list[dict]:
    """The rows without their wall times (the only field that differs between two runs)."""
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    for row in rows:
        for run in row["runs"].values():
            run.pop("latency_s")
    return rows


def test_a_killed_run_resumes_without_rerunning_finished_tasks(tmp_path: Path) -> None:
    tasks = _tasks_file(tmp_path)
    order = stratified_order(PICK)
    out, marker = tmp_path / "killed.jsonl", tmp_path / "marker"
    kill_at_marker([str(WORKER), str(tasks), str(out), str(marker), "3"], marker, "task 3's reasoning call")
    assert [json.loads(x)["id"] for x in out.read_text().splitlines()] == [t.id for t in order[:3]]

    asked: list[str] = []
    added, skipped = label_to_file(_model(asked), order, out, model_name="scripted")
    assert (added, skipped) == (len(PICK) - 3, [])
    assert not {t.query for t in order[:3]} & set(asked)  # finished tasks were not run again
    assert {t.query for t in order[3:]} == set(asked)  # the task in flight was run again, from its start

    whole = tmp_path / "whole.jsonl"
    label_to_file(_model([]), order, whole, model_name="scripted")
    assert _labels(out) == _labels(whole)
    assert [r["oracle"] for r in _labels(whole)] == [
        "instant" if t.family == "convert" else "reasoning" for t in order]

    again: list[str] = []
    assert label_to_file(_model(again), order, out, model_name="scripted") == (0, [])
    assert again == []


def test_a_truncated_last_line_is_moved_aside_and_its_task_rerun(tmp_path: Path, capsys) -> None:
    order = stratified_order(PICK)
    whole = tmp_path / "whole.jsonl"
    label_to_file(_model([]), order, whole, model_name="scripted")
    lines = whole.read_text().splitlines(keepends=True)
    out = tmp_path / "cut.jsonl"
    out.write_text("".join(lines[:2]) + lines[2][:57])  # killed while writing row 3
    asked: list[str] = []
    label_to_file(_model(asked), order, out, model_name="scripted")
    assert "cut off mid-write" in capsys.readouterr().err
    assert (tmp_path / "cut.jsonl.rejected").read_text() == lines[2][:57] + "\n"
    assert not {t.query for t in order[:2]} & set(asked)
    assert _labels(out) == _labels(whole)

    # a complete last row without its newline is kept, and the next row goes on a line of its own
    out2 = tmp_path / "nonewline.jsonl"
    out2.write_text("".join(lines[:2]).rstrip("\n"))
    assert resume(out2, "scripted").done == {order[0].id, order[1].id}
    label_to_file(_model([]), order, out2, model_name="scripted")
    assert _labels(out2) == _labels(whole)


def test_a_bad_line_inside_the_file_is_an_error_and_the_file_is_left_alone(tmp_path: Path, capsys) -> None:
    out = tmp_path / "labels.jsonl"
    label_to_file(_model([]), stratified_order(PICK)[:2], out, model_name="scripted")
    lines = out.read_text().splitlines(keepends=True)
    bad = lines[0] + "{not json\n" + lines[1]
    out.write_text(bad)
    with pytest.raises(UserFacingError, match=r"labels.jsonl:2: not a labels row"):
        label_to_file(_model([]), PICK, out, model_name="scripted")
    assert out.read_text() == bad
    assert label_main(["--model", "scripted", "--tasks", str(_tasks_file(tmp_path)), "--out", str(out),
                       "--cassettes", str(tmp_path / "c"), "--replay"]) == 2
    assert "not a labels row" in capsys.readouterr().err
    assert out.read_text() == bad


def test_rows_of_another_model_are_kept_and_not_counted_as_done(tmp_path: Path) -> None:
    out = tmp_path / "labels.jsonl"
    label_to_file(_model([]), PICK[:2], out, model_name="other")
    asked: list[str] = []
    added, _ = label_to_file(_model(asked), PICK[:2], out, model_name="scripted")
    assert added == 2 and set(asked) == {t.query for t in PICK[:2]}
    assert Counter(json.loads(x)["model"] for x in out.read_text().splitlines()) == {"other": 2, "scripted": 2}


def test_progress_lines_count_tasks_and_give_an_eta(tmp_path: Path) -> None:
    out, lines = tmp_path / "labels.jsonl", []
    label_to_file(_model([]), PICK[:2], out, model_name="scripted", log=lines.append)
    assert lines[0].startswith(f"[1/2] {PICK[0].id} (test, ") and "ETA" in lines[0] and "elapsed" in lines[0]
    lines.clear()
    label_to_file(_model([]), PICK[:3], out, model_name="scripted", log=lines.append)
    assert "2 of these 3 tasks already labelled" in lines[0]
    assert lines[1].startswith(f"[3/3] {PICK[2].id}")


def test_every_prefix_of_the_stratified_order_samples_every_split_and_kind() -> None:
    order = stratified_order(ALL)
    assert sorted(t.id for t in order) == sorted(t.id for t in ALL)
    assert stratified_order(list(reversed(ALL))) == order  # input order does not matter
    splits, kinds = Counter(t.split for t in ALL), Counter((t.split, t.kind) for t in ALL)
    for n in (30, 60, 120, 300):
        prefix = order[:n]
        got = Counter(t.split for t in prefix)
        for split, total in splits.items():
            assert abs(got[split] - n * total / len(ALL)) <= 3, (n, split, got)
        got_kinds = Counter((t.split, t.kind) for t in prefix)
        for key, total in kinds.items():
            # each (split, kind) is spread over its families; its share is off by at most one per family
            families = len({t.family for t in ALL if (t.split, t.kind) == key})
            assert abs(got_kinds[key] - n * total / len(ALL)) <= families + 1, (n, key, got_kinds)
    assert order[:20] != [t for t in ALL[:20]]


def test_graph_folder_errors_are_clear(tmp_path: Path) -> None:
    with pytest.raises(UserFacingError, match="musique_100_corpus.json, musique_100_openie.json not found"):
        ensure_graph(tmp_path / "graph", musique_dir=tmp_path / "nowhere")
    junk = tmp_path / "junk"
    junk.mkdir()
    (junk / "half-written").write_text("x")
    with pytest.raises(UserFacingError, match="neither empty nor a graph folder"):
        ensure_graph(junk, musique_dir=tmp_path)


def test_label_command_says_clearly_when_the_graph_cannot_be_built(tmp_path: Path, capsys) -> None:
    musique = next(t for t in ALL if "retrieval" in t.tools)
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps(musique.as_json()) + "\n")
    out = tmp_path / "labels.jsonl"
    assert label_main(["--model", "scripted", "--tasks", str(tasks), "--out", str(out), "--cassettes",
                       str(tmp_path / "c"), "--graph", str(tmp_path / "graph"), "--musique-dir",
                       str(tmp_path / "absent")]) == 2
    assert "cannot build the retrieval graph" in capsys.readouterr().err
    assert not out.exists()


def test_retrieval_tasks_are_labelled_over_a_graph_built_on_first_use(tmp_path: Path, monkeypatch) -> None:
    sys.path.insert(0, str(Path(__file__).parents[1] / "graphs"))
    from graphs_testdata import write_files

    from agent.models import call
    from scenarios.routing_tasks import Grader, RoutingTask
    from scenarios.routing_tasks.labeling import LabelSettings

    monkeypatch.setenv("REIN_EMBED_CACHE", str(tmp_path / "embeddings.sqlite"))
    files = write_files(tmp_path / "src")
    musique = tmp_path / "musique"
    musique.mkdir()
    files["corpus"].rename(musique / "musique_100_corpus.json")
    files["triples"].rename(musique / "musique_100_openie.json")
    graph = tmp_path / "graph"
    assert ensure_graph(graph, musique) == graph and (graph / "manifest.json").is_file()
    built = (graph / "manifest.json").stat().st_mtime_ns
    assert ensure_graph(graph, tmp_path / "absent") == graph  # a built graph is used as it is
    assert (graph / "manifest.json").stat().st_mtime_ns == built

    task = RoutingTask(id="musique-9999", query="Who founded the Zorvath Institute?", kind="tool", family="musique",
                       style="plain", grader=Grader("text", "Ilsa Varn"), tools=("retrieval",), split="test")
    seen: list[str] = []

    def searcher(request: ModelRequest):  # noqa: ANN202 - a str or a tool call
        results = [m.text for m in request.messages if m.role == "tool"]
        if results:
            seen.extend(results)
            return "Ilsa Varn" if "Ilsa Varn" in results[-1] else "unknown"
        if any(t["function"]["name"] == "retrieve" for t in request.tools):
            return call("retrieve", {"query": "Zorvath Institute founded by", "k": 2})
        return "I am not sure."

    out = tmp_path / "labels.jsonl"
    assert label_to_file(FunctionModel(searcher), [task], out, LabelSettings(graph_dir=str(graph)),
                         model_name="scripted") == (1, [])
    row = json.loads(out.read_text())
    assert {m: r["success"] for m, r in row["runs"].items()} == {"instant": False, "reasoning": False, "agentic": True}
    assert row["oracle"] == "agentic" and row["runs"]["agentic"]["tool_calls"] == 1
    assert "Zorvath Institute" in seen[0]
    # without a graph the task is skipped, not failed
    assert label_to_file(FunctionModel(searcher), [task], tmp_path / "none.jsonl", model_name="scripted") == \
        (0, ["musique-9999"])


def test_a_sampled_pass_joins_the_greedy_one_in_the_same_file(tmp_path: Path, capsys) -> None:
    from agent.routing.oracle import load_oracle
    from scenarios.routing_tasks.labeling import LabelSettings

    out, tasks = tmp_path / "labels.jsonl", PICK[:3]
    label_to_file(_model([]), tasks, out, model_name="scripted")
    settings_seen: list[tuple[float | None, int | None]] = []

    def sampled(request: ModelRequest) -> str:
        settings_seen.append((request.settings.temperature, request.settings.seed))
        user = next(m.text for m in reversed(request.messages) if m.role == "user")
        task = next(t for t in tasks if t.query == user)
        return task.grader.answer  # the sampled pass gets everything right, even instantly

    sampled_pass = LabelSettings(temperature=0.7, seed=1)
    assert label_to_file(FunctionModel(sampled, name="scripted"), tasks, out, sampled_pass, model_name="scripted") \
        == (3, [])
    # the self-routing call keeps its own greedy settings; every mode's call is sampled with the seed
    assert set(settings_seen) - {(0.0, None)} == {(0.7, 1)}
    assert [json.loads(x).get("pass") for x in out.read_text().splitlines()] == ["greedy"] * 3 + ["t0.7-seed1"] * 3
    # resuming the sampled pass finds it done; the greedy pass too
    asked: list[str] = []
    assert label_to_file(_model(asked), tasks, out, sampled_pass, model_name="scripted") == (0, [])
    assert label_to_file(_model(asked), tasks, out, model_name="scripted") == (0, [])
    assert asked == []
    merged = load_oracle(out, model="scripted")
    assert len(merged) == 3 and all(r.extra["pass"] == "greedy+t0.7-seed1" for r in merged)
    trivia = next(r for r in merged if r.extra["family"] == "trivia")
    assert trivia.runs["instant"].success == 0.5 and trivia.runs["reasoning"].success == 1.0
    assert trivia.oracle == "reasoning"

    for argv, message in ((["--temperature", "0.7"], "needs --seed"), (["--seed", "3"], "only applies to a sampled pass")):
        with pytest.raises(SystemExit):
            label_main(["--model", "x", "--out", str(out), *argv])
        assert message in capsys.readouterr().err


def test_regrade_recomputes_verdicts_from_the_recorded_answers(tmp_path: Path, capsys) -> None:
    from dataclasses import replace

    from scenarios.routing_tasks.task import write_tasks

    out, tasks = tmp_path / "labels.jsonl", PICK[::2]  # one task of each family
    label_to_file(_model([]), tasks, out, model_name="scripted")
    before = [json.loads(x) for x in out.read_text().splitlines()]
    # A grader fix: the convert task's gold value changes, so its instant answer is now wrong.
    convert = next(t for t in tasks if t.family == "convert")
    fixed = [replace(t, grader=replace(t.grader, answer="-1")) if t is convert else t for t in tasks]
    write_tasks(fixed, tmp_path / "tasks.jsonl")
    assert label_main(["--regrade", "--out", str(out), "--tasks", str(tmp_path / "tasks.jsonl")]) == 0
    assert "regraded 4 rows" in capsys.readouterr().out
    after = [json.loads(x) for x in out.read_text().splitlines()]
    for old, new in zip(before, after, strict=True):
        if old["id"] != convert.id:
            assert new == old
            continue
        assert {m: r["success"] for m, r in new["runs"].items()} == dict.fromkeys(new["runs"], False)
        assert new["oracle"] == "none" and old["oracle"] == "instant"
        # everything but the verdicts is kept, latencies included
        assert [{k: v for k, v in r.items() if k != "success"} for r in new["runs"].values()] == \
            [{k: v for k, v in r.items() if k != "success"} for r in old["runs"].values()]
    assert not list(tmp_path.glob("*.regrading"))
    # a task missing from the set is an error, and the file is left alone
    write_tasks(fixed[1:], tmp_path / "fewer.jsonl")
    text = out.read_text()
    assert label_main(["--regrade", "--out", str(out), "--tasks", str(tmp_path / "fewer.jsonl")]) == 2
    assert "is not in the task set" in capsys.readouterr().err and out.read_text() == text


def _recorded(tmp_path: Path, tasks: list, settings=None) -> tuple[Path, Path]:
    """Label `tasks` with the scripted model through a recording cassette, as the real runs do."""
    from agent.models import CassetteModel
    from scenarios.routing_tasks.labeling import LabelSettings, cassette_path

    out, cassettes = tmp_path / "labels.jsonl", tmp_path / "cassettes"
    model = CassetteModel(cassette_path(cassettes, "scripted"), _model([]), mode="auto")
    label_to_file(model, tasks, out, settings or LabelSettings(), model_name="scripted")
    return out, cassette_path(cassettes, "scripted")


def _verify(tmp_path: Path, out: Path, *extra: str) -> int:
    return label_main(["--verify", "--model", "scripted", "--out", str(out), "--tasks", str(_tasks_file(tmp_path)),
                       "--cassettes", str(tmp_path / "cassettes"), *extra])


def test_verify_recomputes_every_row_from_the_cassette_and_prune_keeps_only_used_calls(tmp_path: Path, capsys) -> None:
    from scenarios.routing_tasks.labeling import LabelSettings

    out, cassette = _recorded(tmp_path, PICK[:3])
    # the sampled pass replays with its own temperature and seed (they are part of each call's key)
    _recorded(tmp_path, PICK[:3], LabelSettings(temperature=0.7, seed=1))
    used = cassette.read_text().splitlines()
    # calls of a run that was cut off and redone: in the cassette, used by no row
    stale = [json.dumps({"key": f"{i:064x}", "response": json.loads(used[0])["response"]}) for i in range(3)]
    cassette.write_text("\n".join([*stale[:2], *used, stale[2]]) + "\n")

    assert _verify(tmp_path, out) == 0
    report = capsys.readouterr().out
    assert f"6/6 rows recomputed identical from the cassette ({len(used)} of its {len(used) + 3} calls used)" in report
    assert cassette.read_text().splitlines()[:2] == stale[:2]  # without --prune nothing is rewritten

    assert _verify(tmp_path, out, "--prune") == 0
    assert "pruned the cassette" in capsys.readouterr().out
    assert cassette.read_text().splitlines() == used
    assert _verify(tmp_path, out) == 0
    assert f"({len(used)} of its {len(used)} calls used)" in capsys.readouterr().out


def test_verify_names_rows_that_differ_and_then_refuses_to_prune(tmp_path: Path, capsys) -> None:
    out, cassette = _recorded(tmp_path, PICK[:3])
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    rows[1]["runs"]["reasoning"]["answer"] = "edited by hand"
    rows[1]["runs"]["reasoning"]["latency_s"] = 99.0  # wall times alone never count as a difference
    rows[2]["runs"]["instant"]["latency_s"] = 99.0
    out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    entries = cassette.read_text().splitlines()
    cassette.write_text("".join(line + "\n" for line in entries[1:]))  # the first task's first call is lost

    text = cassette.read_text()
    assert _verify(tmp_path, out, "--prune") == 1
    captured = capsys.readouterr()
    assert "1/3 rows recomputed identical" in captured.out
    assert f"{rows[0]['id']} (greedy): differs in instant.answer" in captured.out
    assert "(1 of its calls are not in the cassette)" in captured.out
    assert f"{rows[1]['id']} (greedy): differs in reasoning.answer" in captured.out
    assert "not pruned" in captured.err and cassette.read_text() == text


def test_verify_errors_are_clear(tmp_path: Path, capsys) -> None:
    out, _ = _recorded(tmp_path, PICK[:1])
    assert label_main(["--verify", "--model", "other", "--out", str(out), "--tasks", str(_tasks_file(tmp_path)),
                       "--cassettes", str(tmp_path / "cassettes")]) == 2
    assert "no cassette at" in capsys.readouterr().err
    assert _verify(tmp_path, tmp_path / "missing.jsonl") == 2
    assert "no such labels file" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        label_main(["--prune", "--model", "scripted", "--out", str(out)])
    assert "--prune, --drop and --recover go with --verify" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        label_main(["--recover", "--model", "scripted", "--out", str(out)])
    assert "go with --verify" in capsys.readouterr().err
    # --recover records what it finds in the tool cassette, which needs the graph's tools
    assert label_main(["--verify", "--recover", "--model", "scripted", "--out", str(out), "--tasks",
                       str(_tasks_file(tmp_path)), "--cassettes", str(tmp_path / "cassettes")]) == 2
    assert "--recover needs --graph" in capsys.readouterr().err


def test_shards_run_at_once_share_one_labels_file_and_one_cassette(tmp_path: Path) -> None:
    import subprocess

    tasks, out, cassettes = _tasks_file(tmp_path), tmp_path / "labels.jsonl", tmp_path / "cassettes"
    argv = [sys.executable, "-m", "scenarios.routing_tasks.labeling", "--model", "echo", "--tasks", str(tasks),
            "--out", str(out), "--cassettes", str(cassettes)]
    shards = [subprocess.Popen([*argv, "--shard", f"{k}/3"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
              for k in (1, 2, 3)]
    for proc in shards:
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err.decode()
    ids = [json.loads(x)["id"] for x in out.read_text().splitlines()]
    assert sorted(ids) == sorted(t.id for t in PICK)  # each task once, every line whole
    assert label_main([*argv[3:], "--verify"]) == 0  # the shared cassette answers every row's calls
    with pytest.raises(SystemExit):
        label_main([*argv[3:], "--shard", "3/2"])


def test_resume_waits_for_a_row_being_appended_instead_of_cutting_it_off(tmp_path: Path) -> None:
    import threading

    from agent.file_lock import exclusive

    out = tmp_path / "labels.jsonl"
    label_to_file(_model([]), PICK[:1], out, model_name="scripted")
    row = out.read_text().splitlines()[0].replace(PICK[0].id, PICK[1].id)
    seen: list = []
    with out.open("a", encoding="utf-8") as f, exclusive(f):  # another shard, mid-append
        f.write(row[:40])
        f.flush()
        reader = threading.Thread(target=lambda: seen.append(resume(out, "scripted")))
        reader.start()
        reader.join(0.5)
        assert reader.is_alive()  # it waits for the lock rather than reading half a row
        f.write(row[40:] + "\n")
        f.flush()  # before the lock goes, as append_row does (the file closes only after the unlock)
    reader.join(10)
    assert seen[0].done == {PICK[0].id, PICK[1].id} and seen[0].rejected is None
    assert not (tmp_path / "labels.jsonl.rejected").exists()


def test_verify_drop_moves_rows_a_changed_tool_made_stale_and_the_next_run_relabels_them(tmp_path: Path, capsys) -> None:
    from agent.models import CassetteModel
    from scenarios.routing_tasks.labeling import cassette_path

    out, cassette = _recorded(tmp_path, PICK[:4])
    rows = out.read_text().splitlines()
    # as after a prompt change: the cassette no longer answers the second task's reasoning call
    stale_id = json.loads(rows[1])["id"]
    answered = f"<reasoning>working it out</reasoning>{PICK[1].grader.answer}"
    entries = [json.loads(x) for x in cassette.read_text().splitlines()]
    cassette.write_text("".join(json.dumps(e) + "\n" for e in entries if e["response"]["text"] != answered))

    assert _verify(tmp_path, out, "--drop", "--prune") == 0
    report = capsys.readouterr().out
    assert f"{stale_id} (greedy): differs" in report and "moved the 1 rows that differ" in report
    assert "pruned the cassette" in report
    assert [json.loads(x)["id"] for x in out.read_text().splitlines()] == [json.loads(x)["id"] for i, x in
                                                                           enumerate(rows) if i != 1]
    assert Path(f"{out}.dropped").read_text().splitlines() == [rows[1]]  # nothing is thrown away
    # the next run labels the dropped task again, and only it; then the file verifies whole
    asked: list[str] = []
    model = CassetteModel(cassette_path(tmp_path / "cassettes", "scripted"), _model(asked), mode="auto")
    assert label_to_file(model, PICK[:4], out, model_name="scripted") == (1, [])
    assert set(asked) == {PICK[1].query}
    assert _verify(tmp_path, out) == 0
    assert "4/4 rows recomputed identical" in capsys.readouterr().out


def test_status_counts_each_split_per_model_and_pass(tmp_path: Path, capsys) -> None:
    from scenarios.routing_tasks.labeling import LabelSettings

    out = tmp_path / "labels.jsonl"
    label_to_file(_model([]), PICK[:3], out, model_name="scripted")
    label_to_file(_model([]), PICK[:1], out, LabelSettings(temperature=0.7, seed=1), model_name="scripted")
    assert label_main(["--status", "--out", str(out), "--tasks", str(_tasks_file(tmp_path))]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(f"scripted (greedy): test 3/{len(PICK)}; oracle labels: ")
    assert lines[1].startswith(f"scripted (t0.7-seed1): test 1/{len(PICK)}; oracle labels: ")
    assert label_main(["--status", "--out", str(tmp_path / "none.jsonl")]) == 2
    assert "no such labels file" in capsys.readouterr().err

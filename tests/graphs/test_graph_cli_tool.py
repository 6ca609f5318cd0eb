"""`rein graph` commands and the retrieval toolkit, on the invented corpus."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from graphs_testdata import QUESTIONS, write_files

from agent.cli import main
from tools.registry import load_toolkit
from tools.tool import ToolKind


@pytest.mark.slow
def test_eval_json_reports_recall_per_retriever(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    files = write_files(tmp_path)
    rc = main(["graph", "eval", "--questions", str(files["questions"]), "--corpus", str(files["corpus"]), "--json"])
    assert rc == 0
    report = json.loads(capsys.readouterr().out)
    assert set(report["retrievers"]) == {"bm25", "dense", "ppr", "gfm"}
    for scores in report["retrievers"].values():
        assert set(scores) >= {"recall@2", "recall@5", "questions", "median_latency_ms"}
        assert 0.0 <= scores["recall@2"] <= scores["recall@5"] <= 100.0
    assert report["questions"] == len(QUESTIONS) == report["evaluated"]
    assert report["graph"]["extractor"] == "offline"


def test_eval_with_triples_and_a_reused_graph(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    files = write_files(tmp_path)
    args = ["graph", "eval", "--questions", str(files["questions"]), "--corpus", str(files["corpus"]),
            "--triples", str(files["triples"]), "--retriever", "bm25", "--retriever", "ppr",
            "--graph", str(tmp_path / "g"), "--json"]
    assert main(args) == 0
    first = json.loads(capsys.readouterr().out)
    assert set(first["retrievers"]) == {"bm25", "ppr"} and first["graph"]["extractor"] == "openie-file"
    assert main(args) == 0  # the second run loads the saved folder instead of building
    second = json.loads(capsys.readouterr().out)
    for name in ("bm25", "ppr"):
        for key in ("recall@2", "recall@5"):
            assert second["retrievers"][name][key] == first["retrievers"][name][key]


def test_cli_user_errors_are_reported_without_traceback(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    files = write_files(tmp_path)
    assert main(["graph", "query", "who?", "--graph", str(tmp_path / "missing")]) == 2
    assert "graph folder not found" in capsys.readouterr().err
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    assert main(["graph", "eval", "--questions", str(files["questions"]), "--corpus", str(bad), "--json"]) == 2
    assert "not valid JSON" in capsys.readouterr().err


def test_build_query_and_toolkit_provenance(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    files = write_files(tmp_path)
    out = tmp_path / "graph"
    assert main(["graph", "build", "--corpus", str(files["corpus"]), "--triples", str(files["triples"]),
                 "--out", str(out), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["nodes"]["document"] == 12
    assert main(["graph", "build", "--corpus", str(files["corpus"]), "--out", str(out)]) == 2
    assert "already holds a graph" in capsys.readouterr().err

    assert main(["graph", "query", QUESTIONS[1][1], "--graph", str(out), "--retriever", "gfm", "-k", "3", "--json"]) == 0
    hits = json.loads(capsys.readouterr().out)
    assert len(hits) == 3 and hits[0]["provenance"]["retriever"] == "gfm"

    kit = load_toolkit("retrieval", graph_dir=str(out), retriever="gfm")
    tool = kit["retrieve"]
    assert tool.kind == ToolKind.READ
    assert set(tool.parameters["properties"]) == {"query", "k"}
    import asyncio

    result = asyncio.run(tool.run(tool.parse_arguments({"query": QUESTIONS[1][1], "k": 2})))
    assert len(result) == 2
    prov = result[0]["provenance"]
    assert prov["seeds"] and prov["path"]
    assert {"source", "relation", "target"} == set(prov["path"][0])
    from tools.errors import ToolError

    # The bound is in the schema (so the embedded model's grammar keeps k in range) and checked
    # with the arguments; the function checks it again for direct Python calls.
    assert tool.parameters["properties"]["k"] | {"description": ""} == \
        {"type": "integer", "minimum": 1, "maximum": 20, "default": 5, "description": ""}
    with pytest.raises(ToolError, match="k: Input should be less than or equal to 20"):
        tool.parse_arguments({"query": "x", "k": 50})
    with pytest.raises(ToolError, match="between 1 and 20"):
        asyncio.run(tool.run({"query": "x", "k": 50}))


def test_toolkit_by_name_needs_a_graph_folder(monkeypatch: pytest.MonkeyPatch) -> None:
    from graphs.errors import GraphInputError

    monkeypatch.delenv("REIN_GRAPH_DIR", raising=False)
    with pytest.raises(GraphInputError, match="REIN_GRAPH_DIR"):
        load_toolkit("retrieval")

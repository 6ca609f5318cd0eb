"""Recorded tool results: replayed without running the tool, and labels that verify on a graph whose
vectors differ in their last bits (another machine's), where the model cassette alone cannot."""

from __future__ import annotations

import asyncio
import hashlib
import json
import sqlite3
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from agent.errors import UserFacingError
from agent.messages import ModelRequest
from agent.models import CassetteModel, FunctionModel, call
from scenarios.routing_tasks.tool_cassette import ToolCassette, call_key
from tools import ToolError, tool


def _counting_tools() -> tuple[Any, Any, list[str]]:
    ran: list[str] = []

    @tool
    def lookup(query: str, k: int = 2) -> list[dict[str, Any]]:
        """Look something up.

        Args:
            query: What to look for.
            k: How many.
        """
        ran.append(query)
        if query == "boom":
            raise ToolError("nothing to find")
        return [{"title": query, "score": 0.123456, "pair": (1, 2)}][:k]

    @tool
    async def alookup(query: str) -> str:
        """Look something up, asynchronously.

        Args:
            query: What to look for.
        """
        ran.append("async " + query)
        return query.upper()

    return lookup, alookup, ran


def test_a_recorded_call_is_replayed_without_running_the_tool(tmp_path: Path) -> None:
    lookup, alookup, ran = _counting_tools()
    path = tmp_path / "tools.jsonl"
    first = ToolCassette(path)
    live = asyncio.run(first.wrap(lookup).run({"query": "zorvath", "k": 2}))
    assert live == [{"title": "zorvath", "score": 0.123456, "pair": [1, 2]}]  # the JSON form, as replayed
    assert asyncio.run(first.wrap(alookup).run({"query": "x"})) == "X"
    assert ran == ["zorvath", "async x"] and len(path.read_text().splitlines()) == 2

    again = ToolCassette(path)
    assert asyncio.run(again.wrap(lookup).run({"query": "zorvath", "k": 2})) == live
    assert asyncio.run(again.wrap(alookup).run({"query": "x"})) == "X"
    assert ran == ["zorvath", "async x"] and again.replayed == 2
    asyncio.run(again.wrap(lookup).run({"query": "zorvath", "k": 1}))  # other arguments: a new call
    assert ran[-1] == "zorvath" and len(path.read_text().splitlines()) == 3
    assert call_key("lookup", {"query": "zorvath", "k": 2}) in again


def test_a_failing_call_is_not_recorded(tmp_path: Path) -> None:
    lookup, _, ran = _counting_tools()
    cassette = ToolCassette(tmp_path / "tools.jsonl")
    with pytest.raises(ToolError, match="nothing to find"):
        asyncio.run(cassette.wrap(lookup).run({"query": "boom"}))
    assert not (tmp_path / "tools.jsonl").exists() and not cassette.keys()


def test_without_keep_new_results_wait_until_kept_or_forgotten(tmp_path: Path) -> None:
    lookup, _, ran = _counting_tools()
    path = tmp_path / "tools.jsonl"
    cassette = ToolCassette(path, keep_new=False)
    wrapped = cassette.wrap(lookup)
    asyncio.run(wrapped.run({"query": "a"}))
    assert not path.exists() and len(cassette.fresh) == 1
    cassette.forget_fresh()
    asyncio.run(wrapped.run({"query": "a"}))  # forgotten: runs again
    assert ran == ["a", "a"]
    assert cassette.keep_fresh() == 1 and not cassette.fresh
    assert [json.loads(line)["arguments"] for line in path.read_text().splitlines()] == [{"query": "a"}]


def test_a_corrupt_entry_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "tools.jsonl"
    path.write_text('{"key": "k", "tool": "t", "arguments": {}, "result": 1}\n{"key": \n')
    with pytest.raises(UserFacingError, match=r"tools.jsonl:2: not valid JSON"):
        ToolCassette(path)
    path.write_text('{"key": "k", "tool": "t"}\n')
    with pytest.raises(UserFacingError, match=r"tools.jsonl:1: corrupt tool cassette entry"):
        ToolCassette(path)


def _shake_vectors(cache: Path, scale: float) -> None:
    """Move every cached vector by a tiny relative amount: what another CPU's MiniLM gives. The move
    depends on the vector alone, since one CPU computes equal inputs equally."""
    con = sqlite3.connect(cache)
    rows = list(con.execute("SELECT key, data FROM vec"))
    for key, blob in rows:
        rng = np.random.default_rng(int.from_bytes(hashlib.sha256(blob).digest()[:8], "little"))
        vec = np.frombuffer(blob, dtype=np.float32)
        moved = (vec * (1 + scale * rng.standard_normal(vec.shape))).astype(np.float32)
        con.execute("UPDATE vec SET data = ? WHERE key = ?", (moved.tobytes(), key))
    con.commit()
    con.close()


def _musique_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """A small corpus laid out as the MuSiQue-100 files, and the embedding cache the graphs use."""
    sys.path.insert(0, str(Path(__file__).parents[1] / "graphs"))
    from graphs_testdata import write_files

    cache = tmp_path / "embeddings.sqlite"
    monkeypatch.setenv("REIN_EMBED_CACHE", str(cache))
    files = write_files(tmp_path / "src")
    musique = tmp_path / "musique"
    musique.mkdir()
    files["corpus"].rename(musique / "musique_100_corpus.json")
    files["triples"].rename(musique / "musique_100_openie.json")
    return musique, cache


def test_labels_verify_on_another_machines_graph_through_the_tool_cassette(tmp_path: Path, monkeypatch) -> None:
    from scenarios.routing_tasks import Grader, RoutingTask
    from scenarios.routing_tasks.graph import ensure_graph
    from scenarios.routing_tasks.labeling import LabelSettings, label_to_file
    from scenarios.routing_tasks.verify import verify_labels

    musique, cache = _musique_files(tmp_path, monkeypatch)
    here = ensure_graph(tmp_path / "here", musique)

    task = RoutingTask(id="musique-9999", query="Who founded the Zorvath Institute?", kind="tool", family="musique",
                       style="plain", grader=Grader("text", "Ilsa Varn"), tools=("retrieval",), split="test")

    def searcher(request: ModelRequest):  # noqa: ANN202 - a str or a tool call
        results = [m.text for m in request.messages if m.role == "tool"]
        if results:
            return "Ilsa Varn" if "Ilsa Varn" in results[-1] else "unknown"
        if any(t["function"]["name"] == "retrieve" for t in request.tools):
            return call("retrieve", {"query": "Zorvath Institute founded by", "k": 2})
        return "I am not sure."

    out, tapes = tmp_path / "labels.jsonl", tmp_path / "tapes"
    model_tape, tool_tape = tapes / "scripted.jsonl", tapes / "scripted.tools.jsonl"
    recorded = LabelSettings(graph_dir=str(here), tool_cassette=str(tool_tape))
    model = CassetteModel(model_tape, FunctionModel(searcher), mode="auto")
    assert label_to_file(model, [task], out, recorded, model_name="scripted") == (1, [])
    assert json.loads(out.read_text())["runs"]["agentic"]["success"]
    assert len(tool_tape.read_text().splitlines()) == 1

    _shake_vectors(cache, 1e-4)
    there = ensure_graph(tmp_path / "there", musique)
    # The model cassette alone: the retrieve result prints other score digits, the next call misses.
    alone = verify_labels(out, model_tape, "scripted", [task], LabelSettings(graph_dir=str(there)))
    assert alone.same == 0 and "not in the cassette" in alone.differ[0]
    # With the tool cassette the row comes back identical, the graph is not asked.
    both = verify_labels(out, model_tape, "scripted", [task],
                         LabelSettings(graph_dir=str(there), tool_cassette=str(tool_tape)), prune=True)
    assert (both.same, both.differ, both.tool_replayed, both.tool_added, both.pruned) == (1, [], 1, 0, True)


def test_verify_adds_only_the_results_of_rows_that_match(tmp_path: Path, monkeypatch) -> None:
    from scenarios.routing_tasks import Grader, RoutingTask
    from scenarios.routing_tasks.graph import ensure_graph
    from scenarios.routing_tasks.labeling import LabelSettings, label_to_file
    from scenarios.routing_tasks.verify import verify_labels

    musique, cache = _musique_files(tmp_path, monkeypatch)
    graph = ensure_graph(tmp_path / "graph", musique)
    tasks = [RoutingTask(id=f"musique-999{i}", query=q, kind="tool", family="musique", style="plain",
                         grader=Grader("text", "Ilsa Varn"), tools=("retrieval",), split="test")
             for i, q in enumerate(["Who founded the Zorvath Institute?", "Where is the Zorvath Institute?"])]

    def searcher(request: ModelRequest):  # noqa: ANN202 - a str or a tool call
        if any(m.role == "tool" for m in request.messages):
            return "Ilsa Varn"
        user = next(m.text for m in request.messages if m.role == "user")
        if any(t["function"]["name"] == "retrieve" for t in request.tools):
            return call("retrieve", {"query": user, "k": 1})
        return "I am not sure."

    out, tapes = tmp_path / "labels.jsonl", tmp_path / "tapes"
    model_tape, tool_tape = tapes / "scripted.jsonl", tapes / "scripted.tools.jsonl"
    # Labelled before tool results were recorded: the tool cassette starts empty.
    label_to_file(CassetteModel(model_tape, FunctionModel(searcher)), tasks, out,
                  LabelSettings(graph_dir=str(graph)), model_name="scripted")
    rows = out.read_text().splitlines()
    edited = json.loads(rows[1])
    edited["runs"]["agentic"]["answer"] = "someone else"
    out.write_text(rows[0] + "\n" + json.dumps(edited) + "\n")

    report = verify_labels(out, model_tape, "scripted", tasks,
                           LabelSettings(graph_dir=str(graph), tool_cassette=str(tool_tape)))
    assert (report.same, report.tool_added) == (1, 1) and len(report.differ) == 1
    kept = [json.loads(line)["arguments"]["query"] for line in tool_tape.read_text().splitlines()]
    assert kept == ["Who founded the Zorvath Institute?"]


def _request(tool_text: str, then: str = "") -> ModelRequest:
    from agent.messages import Message, ToolCall

    messages = [Message.user("Who founded the Zorvath Institute?"),
                Message.assistant(tool_calls=[ToolCall(id="c1", name="retrieve", arguments='{"query": "Zorvath"}')]),
                Message(role="tool", content=tool_text, tool_call_id="c1", name="retrieve")]
    if then:
        messages += [Message.assistant(then), Message.user("and then?")]
    return ModelRequest(messages=messages)


def _hits(*scores: float) -> list[dict[str, Any]]:
    return [{"doc_index": i, "title": f"t{i}", "text": "x", "score": s,
             "provenance": {"retriever": "dense", "seeds": [], "path": [], "evidence": {"cosine": round(s, 4)}}}
            for i, s in enumerate(scores)]


def test_the_digits_a_run_saw_are_found_by_the_cassette_key() -> None:
    from agent.messages import ModelResponse
    from agent.models.cassette import request_key
    from scenarios.routing_tasks.recover_digits import DigitRecovery

    seen = json.dumps(_hits(0.337966, 0.280824, 0.250001), ensure_ascii=False)   # what the recorded run saw
    here = json.dumps(_hits(0.337966, 0.280823, 0.250002), ensure_ascii=False)   # this machine's graph
    entries = {request_key(_request(seen)): ModelResponse(text="Ilsa Varn"),
               request_key(_request(seen, then="Ilsa Varn")): ModelResponse(text="done")}
    recovery = DigitRecovery()
    assert request_key(_request(here)) not in entries
    found = recovery.search(_request(here), entries)
    assert found is not None and found[1:] == (here, seen) and recovery.found == 1
    # later requests of the run carry this machine's text in their history: rewritten, they hit
    assert request_key(recovery.rewrite(_request(here, then="Ilsa Varn"))) in entries
    # a result no nearby version of which was recorded is not "found"
    far = json.dumps(_hits(0.337966, 0.280823, 0.250099), ensure_ascii=False)
    assert DigitRecovery().search(_request(far), entries) is None


def test_every_hit_may_have_moved_by_two_in_its_last_digit(monkeypatch) -> None:
    """The search is exhaustive within 2 of every printed score: here all 8 hits moved, by 1 or 2
    either way (5^8 = 390,625 versions), and the one the run saw is found; under a smaller budget the
    search gives up rather than guess."""
    from agent.messages import ModelResponse
    from agent.models.cassette import request_key
    from scenarios.routing_tasks import recover_digits

    base = [0.611111, 0.522222, 0.433333, 0.344444, 0.255555, 0.166666, 0.077777, 0.048888]
    moves = [2, -2, 1, -1, 2, 1, -2, -1]
    seen = json.dumps(_hits(*(round(b + m * 1e-6, 6) for b, m in zip(base, moves, strict=True))), ensure_ascii=False)
    here = json.dumps(_hits(*base), ensure_ascii=False)
    entries = {request_key(_request(seen)): ModelResponse(text="Ilsa Varn")}
    assert recover_digits.versions_found(_request(here), 2, entries) == seen
    monkeypatch.setattr(recover_digits, "MAX_TRIES", 10_000)
    assert recover_digits.versions_found(_request(here), 2, entries) is None


def test_a_recovered_result_replaces_the_graphs_in_the_tool_cassette(tmp_path: Path) -> None:
    lookup, _, _ = _counting_tools()
    path = tmp_path / "tools.jsonl"
    cassette = ToolCassette(path, keep_new=False)
    live = asyncio.run(cassette.wrap(lookup).run({"query": "a"}))
    seen = [{**live[0], "score": 0.123457}]
    from tools import format_result

    assert cassette.correct(format_result(live), seen)
    assert not cassette.correct("text no call returned", seen)
    cassette.keep_fresh()
    assert json.loads(path.read_text())["result"] == seen
    assert asyncio.run(ToolCassette(path).wrap(lookup).run({"query": "a"})) == seen


def test_recovered_digits_are_recorded_for_every_call_that_returned_them(tmp_path: Path, monkeypatch) -> None:
    """A run that asked the same question twice (in other letter case the second time: MiniLM is
    uncased) saw one version of the result text: after `--recover`, both calls hold it, so the row
    verifies without it."""
    from scenarios.routing_tasks import Grader, RoutingTask
    from scenarios.routing_tasks.graph import ensure_graph
    from scenarios.routing_tasks.labeling import LabelSettings, label_to_file
    from scenarios.routing_tasks.verify import verify_labels

    musique, cache = _musique_files(tmp_path, monkeypatch)
    here = ensure_graph(tmp_path / "here", musique)
    task = RoutingTask(id="musique-9999", query="Who founded the Zorvath Institute?", kind="tool", family="musique",
                       style="plain", grader=Grader("text", "Ilsa Varn"), tools=("retrieval",), split="test")

    texts: set[str] = set()

    def asks_twice(request: ModelRequest):  # noqa: ANN202 - a str or a tool call
        results = [m.text for m in request.messages if m.role == "tool"]
        texts.update(results)
        if not any(t["function"]["name"] == "retrieve" for t in request.tools):
            return "I am not sure."
        if len(results) < 2:
            query = "Zorvath Institute founded by"
            return call("retrieve", {"query": query.lower() if results else query, "k": 3})
        return "Ilsa Varn" if "Ilsa Varn" in results[-1] else "unknown"

    out, tapes = tmp_path / "labels.jsonl", tmp_path / "tapes"
    model_tape, tool_tape = tapes / "scripted.jsonl", tapes / "scripted.tools.jsonl"
    # Labelled before tool results were recorded, on this machine's graph.
    label_to_file(CassetteModel(model_tape, FunctionModel(asks_twice)), [task], out,
                  LabelSettings(graph_dir=str(here)), model_name="scripted")
    assert len(texts) == 1  # both calls gave the run the same text

    _shake_vectors(cache, 2e-5)  # another CPU: scores move in their last printed digit
    there = ensure_graph(tmp_path / "there", musique)
    settings = LabelSettings(graph_dir=str(there), tool_cassette=str(tool_tape))
    assert verify_labels(out, model_tape, "scripted", [task], LabelSettings(graph_dir=str(there))).same == 0
    recovered = verify_labels(out, model_tape, "scripted", [task], settings, recover=True)
    assert (recovered.same, recovered.tool_added, recovered.recovered) == (1, 2, 2)
    kept = [json.dumps(json.loads(line)["result"]) for line in tool_tape.read_text().splitlines()]
    assert len(kept) == 2 and kept[0] == kept[1]
    again = verify_labels(out, model_tape, "scripted", [task], settings)
    assert (again.same, again.differ, again.tool_replayed, again.tool_added) == (1, [], 2, 0)

"""A graph whose embeddings live on a real Chroma server (`chroma run` on loopback)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import free_port
from graphs_testdata import QUESTIONS, write_files

from agent.cli import main
from graphs.embedding import Embedder, resolve_embedder
from graphs.errors import GraphStoreError
from graphs.quadgraph import QuadGraph
from graphs.retriever_registry import make_retriever
from graphs.store import CHROMA_DIR, MANIFEST, StoreLocation, load_graph, parse_store, save_graph

REPO = Path(__file__).resolve().parents[2]
QUERIES = [q for _, q, _ in QUESTIONS] + ["Tessaly Opera", "wool market on a river"]

# Loads a graph from the shared server and prints the rankings; run as separate processes.
WORKER = """
import json, sys
from graphs.retriever_registry import make_retriever
from graphs.store import load_graph
qg = load_graph(sys.argv[1])
queries = json.loads(sys.argv[2])
out = {}
for name in ("dense", "ppr"):
    r = make_retriever(name, qg)
    out[name] = [[[h.doc_index, round(h.score, 5)] for h in r.retrieve(q, 5)] for q in queries]
print(json.dumps(out))
"""


def _rankings(qg: QuadGraph, embedder: Embedder, names: tuple[str, ...]) -> dict[str, list[list[list[float]]]]:
    """Per retriever, per query: [doc_index, score] of the top 5 (lists, to compare with JSON)."""
    out: dict[str, list[list[list[float]]]] = {}
    for name in names:
        r = make_retriever(name, qg, embedder)
        out[name] = [[[h.doc_index, round(h.score, 5)] for h in r.retrieve(q, 5)] for q in QUERIES]
    return out


@pytest.fixture(scope="module")
def server_graph(small_graph: QuadGraph, chroma_server: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """small_graph saved with its embeddings on the Chroma server."""
    return save_graph(small_graph, tmp_path_factory.mktemp("srv") / "small", store=chroma_server)


def test_parse_store_tells_paths_from_urls(tmp_path: Path) -> None:
    assert parse_store(tmp_path).path == tmp_path.resolve() and not parse_store(tmp_path).is_server
    loc = parse_store("http://127.0.0.1:8001/")
    assert loc.is_server and loc.endpoint() == ("127.0.0.1", 8001, False) and loc.describe() == "http://127.0.0.1:8001"
    assert parse_store("https://chroma.example").endpoint() == ("chroma.example", 443, True)
    with pytest.raises(GraphStoreError, match="credentials"):
        parse_store("http://me:secret@127.0.0.1:8001")
    with pytest.raises(GraphStoreError, match="http"):
        parse_store("ftp://127.0.0.1")


def test_server_store_gives_the_embedded_rankings(
    small_graph: QuadGraph, saved_graph: Path, server_graph: Path, chroma_server: str, embedder: Embedder
) -> None:
    manifest = json.loads((server_graph / MANIFEST).read_text())
    assert manifest["store"] == {"location": chroma_server, "collections": "quadgraph_small"}
    assert not (server_graph / CHROMA_DIR).exists()
    served = load_graph(server_graph)
    assert served.meta["store"].is_server
    remote, local = served.embeddings, load_graph(saved_graph).embeddings
    assert remote is not None and local is not None
    np.testing.assert_allclose(remote, local, atol=1e-6)
    names = ("dense", "ppr", "gfm")
    embedded = _rankings(load_graph(saved_graph), embedder, names)
    assert _rankings(served, embedder, names) == embedded
    assert all(len(ranks) == 5 for ranks in embedded["dense"])


def test_two_processes_retrieve_the_same_from_the_server(
    saved_graph: Path, server_graph: Path, embedder: Embedder
) -> None:
    # The parent ranks first with the shared on-disk embedding cache the workers inherit, so the
    # workers read query vectors from it instead of each loading MiniLM.
    cached = resolve_embedder()
    expected = _rankings(load_graph(saved_graph), cached, ("dense", "ppr"))
    assert expected["dense"] == _rankings(load_graph(saved_graph), embedder, ("dense",))["dense"]
    args = [sys.executable, "-c", WORKER, str(server_graph), json.dumps(QUERIES)]
    procs = [subprocess.Popen(args, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=180)
        assert p.returncode == 0, err[-2000:]
        outs.append(json.loads(out))
    assert outs[0] == outs[1] == expected


def test_graphs_share_a_server_by_name(small_graph: QuadGraph, chroma_server: str, server_graph: Path, tmp_path: Path) -> None:
    # Another folder of the same name may not take over the first graph's collections silently.
    with pytest.raises(GraphStoreError, match="already holds a graph named 'small'"):
        save_graph(small_graph, tmp_path / "small", store=chroma_server)
    other = save_graph(small_graph, tmp_path / "other", store=chroma_server, name="second")
    assert load_graph(other).meta["collections"] == "quadgraph_second"
    assert load_graph(server_graph).stats() == small_graph.stats()

    # A newer build under a name makes the older folder's load fail instead of mixing embeddings.
    rebuilt = QuadGraph(small_graph.g, meta={**small_graph.meta, "note": "rebuilt"})
    rebuilt.embeddings, rebuilt.relation_embeddings = small_graph.embeddings, small_graph.relation_embeddings
    save_graph(rebuilt, tmp_path / "newer", store=chroma_server, name="second", overwrite=True)
    with pytest.raises(GraphStoreError, match="another build"):
        load_graph(other)
    assert load_graph(tmp_path / "newer").meta["note"] == "rebuilt"


def test_missing_collections_are_a_clear_error(saved_graph: Path, chroma_server: str) -> None:
    # saved_graph keeps its embeddings in its folder; the server never saw it.
    with pytest.raises(GraphStoreError, match="has no collection quadgraph_attribute"):
        load_graph(saved_graph, store=chroma_server)


def _listen(sock: socket.socket) -> tuple[str, int]:
    sock.bind(("127.0.0.1", 0))
    sock.listen(0)
    return sock.getsockname()

@pytest.mark.allow_network  # dials a blackholed private address (10.255.255.1) on purpose
def test_unreachable_server_fails_fast(saved_graph: Path, small_graph: QuadGraph, tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    t = time.monotonic()
    with pytest.raises(GraphStoreError, match="cannot reach the Chroma server"):
        load_graph(saved_graph, store=dead)
    with pytest.raises(GraphStoreError, match="cannot reach"):
        save_graph(small_graph, tmp_path / "g", store=dead)
    # A listener whose backlog is full never completes a handshake: only the connect timeout ends the wait.
    with socket.socket() as busy, socket.create_connection(_listen(busy)) as _held:
        t1 = time.monotonic()
        with pytest.raises(GraphStoreError, match="timed out"):
            load_graph(saved_graph, store=StoreLocation(url=f"http://127.0.0.1:{busy.getsockname()[1]}", connect_timeout_s=0.5))
        assert 0.4 < time.monotonic() - t1 < 3
    assert time.monotonic() - t < 5
    assert main(["graph", "query", "who?", "--graph", str(saved_graph), "--store", dead]) == 2
    assert "cannot reach the Chroma server" in capsys.readouterr().err


def test_cli_and_toolkit_use_the_server(chroma_server: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    files = write_files(tmp_path)
    local, remote = tmp_path / "local", tmp_path / "remote"
    for out, extra in ((local, []), (remote, ["--store", chroma_server, "--store-name", "cli-graph"])):
        assert main(["graph", "build", "--corpus", str(files["corpus"]), "--triples", str(files["triples"]),
                     "--out", str(out), "--json", *extra]) == 0
        summary = json.loads(capsys.readouterr().out)
    assert summary["store"] == chroma_server and summary["nodes"]["document"] == 12
    hits = {}
    for out in (local, remote):
        assert main(["graph", "query", QUESTIONS[0][1], "--graph", str(out), "--retriever", "dense", "--json"]) == 0
        hits[out] = json.loads(capsys.readouterr().out)
    assert hits[local] == hits[remote] and len(hits[remote]) == 5

    import asyncio

    from tools.registry import load_toolkit

    tool = load_toolkit("retrieval", graph_dir=str(remote), retriever="dense", store=chroma_server)["retrieve"]
    got = asyncio.run(tool.run(tool.parse_arguments({"query": QUESTIONS[0][1], "k": 5})))
    assert [h["doc_index"] for h in got] == [h["doc_index"] for h in hits[local]]

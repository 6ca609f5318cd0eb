"""QuadGraph layers and relations, save/load round trip, damaged folders, and the PyG view."""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from graphs_testdata import PASSAGES

from graphs.errors import GraphStoreError
from graphs.quadgraph import Layer, QuadGraph, RelationKind
from graphs.store import CHROMA_DIR, GRAPH_FILE, MANIFEST, load_graph, save_graph


def test_import_graphs_does_not_load_torch() -> None:
    code = "import graphs, graphs.quadgraph, graphs.cli, sys; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_four_layers_and_all_relation_kinds(small_graph: QuadGraph) -> None:
    stats = small_graph.stats()
    assert stats["nodes"]["document"] == len(PASSAGES)
    assert all(stats["nodes"][str(layer)] > 0 for layer in Layer)
    assert all(stats["relations"][str(kind)] > 0 for kind in RelationKind), stats["relations"]
    for n, d in small_graph.g.nodes(data=True):
        assert d["text"], n
    for u, v, d in small_graph.g.edges(data=True):
        assert d["text"] and d["kind"] in set(RelationKind), (u, v)
    # A fact keeps its predicate text and the passage that states it.
    facts = {(small_graph.text(u), d["text"], small_graph.text(v)): d["docs"] for u, v, d in small_graph.relations(RelationKind.FACT)}
    assert facts[("Zorvath Institute", "founded by", "Ilsa Varn")] == [0]
    # Entities point to the documents that mention them; documents have their title attribute.
    assert small_graph.g.has_edge("ent:ilsa varn", "doc:1")
    assert small_graph.g.has_edge("doc:4", "attr:title=Harlow College")
    assert small_graph.embeddings is not None and small_graph.embeddings.shape == (small_graph.g.number_of_nodes(), 384)


def test_passages_round_trip_through_document_nodes(small_graph: QuadGraph) -> None:
    assert [(p.title, p.text) for p in small_graph.passages()] == PASSAGES


def test_save_load_round_trip(small_graph: QuadGraph, saved_graph: Path) -> None:
    loaded = load_graph(saved_graph)
    assert loaded.stats() == small_graph.stats()
    assert sorted(loaded.g.edges(keys=True)) == sorted(small_graph.g.edges(keys=True))
    for n in small_graph.node_ids:
        np.testing.assert_allclose(loaded.embedding(n), small_graph.embedding(n), atol=1e-6)
    assert set(loaded.relation_embeddings) == set(small_graph.relation_texts())
    assert loaded.meta["extractor"] == "given"


def test_existing_graph_is_not_overwritten_silently(small_graph: QuadGraph, saved_graph: Path, tmp_path: Path) -> None:
    with pytest.raises(GraphStoreError, match="already holds a graph"):
        save_graph(small_graph, saved_graph)
    other = tmp_path / "notes"
    other.mkdir()
    (other / "keep.txt").write_text("mine")
    with pytest.raises(GraphStoreError, match="not a graph folder"):
        save_graph(small_graph, other)
    assert (other / "keep.txt").read_text() == "mine"


def test_overwrite_replaces_a_graph(small_graph: QuadGraph, tmp_path: Path) -> None:
    folder = save_graph(small_graph, tmp_path / "g")
    save_graph(small_graph, folder, overwrite=True)
    assert load_graph(folder).stats() == small_graph.stats()


def test_missing_folder_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(GraphStoreError, match="graph folder not found"):
        load_graph(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(GraphStoreError, match="manifest.json is missing"):
        load_graph(tmp_path / "empty")


@pytest.mark.parametrize("damage", ["truncate_graph", "bad_manifest", "no_chroma", "no_graph_file", "bad_gzip"])
def test_corrupted_folder_is_a_clear_error(saved_graph: Path, tmp_path: Path, damage: str) -> None:
    folder = tmp_path / "copy"
    shutil.copytree(saved_graph, folder)
    if damage == "truncate_graph":
        data = (folder / GRAPH_FILE).read_bytes()
        (folder / GRAPH_FILE).write_bytes(data[: len(data) // 2])
        match = "corrupted"
    elif damage == "bad_manifest":
        (folder / MANIFEST).write_text("{not json")
        match = "corrupted"
    elif damage == "no_chroma":
        shutil.rmtree(folder / CHROMA_DIR)
        match = "embedding store"
    elif damage == "no_graph_file":
        (folder / GRAPH_FILE).unlink()
        match = "missing"
    else:
        # Valid checksum over an invalid payload: the manifest is rewritten to match.
        raw = gzip.compress(b"[1, 2")
        (folder / GRAPH_FILE).write_bytes(raw)
        manifest = json.loads((folder / MANIFEST).read_text())
        import hashlib

        manifest["graph_sha256"] = hashlib.sha256(raw).hexdigest()
        (folder / MANIFEST).write_text(json.dumps(manifest))
        match = "corrupted"
    with pytest.raises(GraphStoreError, match=match):
        load_graph(folder)


def test_pyg_view_has_inverse_relations_and_node_types(small_graph: QuadGraph) -> None:
    import torch

    from graphs.pyg import to_pyg

    pg = to_pyg(small_graph)
    e = small_graph.g.number_of_edges()
    r = len(pg.relation_texts)
    assert pg.data.edge_index.shape == (2, 2 * e)
    assert pg.data.num_relations == 2 * r == pg.num_relations
    fwd, inv = pg.data.edge_index[:, :e], pg.data.edge_index[:, e:]
    assert torch.equal(fwd.flip(0), inv)
    assert torch.equal(pg.data.edge_type[e:], pg.data.edge_type[:e] + r)
    assert int(pg.data.edge_type.max()) < 2 * r
    assert pg.data.node_type.shape == (small_graph.g.number_of_nodes(),)
    assert set(pg.data.node_type.tolist()) == {0, 1, 2, 3}
    assert pg.relation_text.shape == (r, 384)
    i = pg.relation_texts.index("founded by")
    src = pg.node_ids.index("ent:zorvath institute")
    dst = pg.node_ids.index("ent:ilsa varn")
    mask = (pg.data.edge_index[0] == dst) & (pg.data.edge_index[1] == src)
    assert (pg.data.edge_type[mask] == i + r).any()
    assert [pg.node_ids[int(j)] for j in pg.doc_rows] == small_graph.documents()

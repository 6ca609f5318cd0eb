"""Every retriever returns ranked hits with provenance; BM25 reproduces the published MuSiQue-100 floor."""

from __future__ import annotations

from pathlib import Path

import pytest
from graphs_testdata import PASSAGES, QUESTIONS, SHARED_MUSIQUE

from graphs.bm25 import BM25Retriever
from graphs.corpus import Question, load_corpus, load_questions
from graphs.gfm.gfm_retriever import GFMRetriever
from graphs.retrieval_eval import evaluate, recall_at_k, split_questions
from graphs.retriever_registry import RETRIEVERS, make_retriever
from graphs.store import load_graph


@pytest.fixture(scope="module")
def loaded(saved_graph: Path):  # noqa: ANN201
    return load_graph(saved_graph)


@pytest.mark.parametrize("name", RETRIEVERS)
def test_retriever_returns_ranked_hits(name: str, loaded, embedder) -> None:  # noqa: ANN001
    r = make_retriever(name, loaded, embedder)
    hits = r.retrieve(QUESTIONS[1][1], k=4)
    assert len(hits) == 4
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    assert len({h.doc_index for h in hits}) == 4
    for h in hits:
        assert (h.title, h.text) == PASSAGES[h.doc_index]
        assert h.provenance.retriever == name
    # "Zorvath Institute" is named in the question: every retriever finds its passage.
    assert 0 in [h.doc_index for h in hits]
    if name in ("ppr", "gfm"):
        top = hits[0].provenance
        assert "Zorvath Institute" in top.seeds
        assert top.path and all(s.relation for s in top.path)
        assert top.path[-1].target.startswith(hits[0].title)
    with pytest.raises(ValueError):
        r.retrieve("   ", 3)


def test_gfm_ranks_nodes_of_any_layer(loaded, embedder) -> None:  # noqa: ANN001
    r = make_retriever("gfm", loaded, embedder)
    assert isinstance(r, GFMRetriever)
    ents = r.top_nodes(QUESTIONS[1][1], k=3, layer="entity")
    assert len(ents) == 3 and all(n.startswith("ent:") for n, _, _ in ents)
    assert [s for _, _, s in ents] == sorted((s for _, _, s in ents), reverse=True)
    docs = r.top_nodes(QUESTIONS[1][1], k=2, layer="document")
    assert [int(n.split(":")[1]) for n, _, _ in docs] == [h.doc_index for h in r.retrieve(QUESTIONS[1][1], 2)]


def test_unknown_retriever_is_a_clear_error(loaded) -> None:  # noqa: ANN001
    from graphs.errors import GraphInputError

    with pytest.raises(GraphInputError, match="unknown retriever"):
        make_retriever("colbert", loaded)


def test_evaluate_leaves_out_trained_questions(loaded, embedder, tmp_path: Path) -> None:  # noqa: ANN001
    from graphs_testdata import write_files

    files = write_files(tmp_path)
    qs = load_questions(files["questions"], load_corpus(files["corpus"]))
    bm25 = BM25Retriever(loaded.passages())
    report = evaluate({"bm25": bm25, "gfm": bm25}, qs, trained=[qs[0].fingerprint])
    assert report["evaluated"] == 2 and report["excluded_as_trained"] == 1
    assert set(report["all_questions"]) == {"bm25"}
    assert report["all_questions"]["bm25"]["questions"] == 3
    assert report["retrievers"]["gfm"]["questions"] == 2


def test_recall_and_split_helpers() -> None:
    assert recall_at_k([3, 1, 2], {1, 9}, 2) == 0.5
    qs = [Question(str(i), f"question {i}", (i,)) for i in range(10)]
    a, b = split_questions(qs, seed=0)
    assert len(a) == len(b) == 5 and sorted(q.gold for q in a + b) == [q.gold for q in qs]
    assert a != qs[:5]  # shuffled, not cut in file order
    assert split_questions(qs, seed=0) == (a, b)


def test_bm25_matches_the_musique_floor() -> None:
    if not (SHARED_MUSIQUE / "musique_100.json").is_file():
        pytest.skip(f"MuSiQue data not found at {SHARED_MUSIQUE}")
    corpus = load_corpus(SHARED_MUSIQUE / "musique_100_corpus.json")
    qs = load_questions(SHARED_MUSIQUE / "musique_100.json", corpus)
    report = evaluate({"bm25": BM25Retriever(corpus)}, qs)
    assert report["retrievers"]["bm25"]["recall@2"] == pytest.approx(40.83, abs=0.01)
    assert report["retrievers"]["bm25"]["recall@5"] == pytest.approx(50.67, abs=0.01)

"""Builders: given OpenIE files, LLM OpenIE through a rein model, and the offline extractor."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from graphs_testdata import PASSAGES, SHARED_MUSIQUE, corpus, doc_triples, write_files

from agent.messages import ModelRequest
from agent.models import FunctionModel
from graphs.build import BuildOptions, build_quadgraph
from graphs.corpus import Passage, load_corpus, load_openie, load_questions
from graphs.errors import GraphInputError
from graphs.extract import CO_OCCURS, entity_agreement, extract_offline, extract_passage
from graphs.llm_extract import RESPONSE_FORMAT, extract_with_model
from graphs.quadgraph import Layer, RelationKind


def test_openie_file_loads_and_skips_malformed_triples(tmp_path: Path) -> None:
    files = write_files(tmp_path)
    c = load_corpus(files["corpus"])
    docs = load_openie(files["triples"], c)
    assert len(docs) == len(PASSAGES)
    # The two-element triple added to passage 0 is dropped.
    assert [(t.subject, t.predicate, t.object) for t in docs[0].triples] == [
        ("Zorvath Institute", "located in", "Melport"),
        ("Zorvath Institute", "founded by", "Ilsa Varn"),
        ("Zorvath Institute", "founded in", "1931"),
    ]


def test_misaligned_or_malformed_inputs_are_clear_errors(tmp_path: Path) -> None:
    files = write_files(tmp_path)
    c = load_corpus(files["corpus"])
    with pytest.raises(GraphInputError, match="12 documents but the corpus has 11"):
        load_openie(files["triples"], c[:-1])
    bad = tmp_path / "bad.json"
    bad.write_text("[{\"title\": 1, \"text\": \"x\"}]")
    with pytest.raises(GraphInputError, match="non-string 'title'"):
        load_corpus(bad)
    bad.write_text("{oops")
    with pytest.raises(GraphInputError, match="not valid JSON"):
        load_corpus(bad)
    with pytest.raises(GraphInputError, match="not found"):
        load_corpus(tmp_path / "absent.json")
    with pytest.raises(GraphInputError, match="not in the corpus"):
        load_questions(files["questions"], [Passage("x", "y")])


def test_questions_map_gold_paragraphs_to_corpus_indices(tmp_path: Path) -> None:
    files = write_files(tmp_path)
    qs = load_questions(files["questions"], load_corpus(files["corpus"]))
    assert [q.gold for q in qs] == [(0, 1, 4), (0, 2), (1, 3)]


def test_build_from_given_triples_has_synonyms_kinds_and_communities(small_graph) -> None:  # noqa: ANN001
    eq = {(small_graph.text(u), small_graph.text(v)) for u, v, _ in small_graph.relations(RelationKind.EQUIVALENT)}
    assert ("Republic of Tessaly", "Tessaly Republic") in eq or ("Tessaly Republic", "Republic of Tessaly") in eq
    kinds = {small_graph.text(a) for _, a, d in small_graph.relations(RelationKind.HAS_ATTRIBUTE) if d["text"] == "has kind"}
    assert "kind: year" in kinds
    # An entity named like a passage title points to that title attribute.
    assert small_graph.g.has_edge("ent:melport", "attr:title=Melport")
    communities = list(small_graph.nodes(Layer.COMMUNITY))
    assert communities and all(small_graph.text(c).startswith("community of") for c in communities)
    members = [u for u, _, _ in small_graph.relations(RelationKind.BELONGS_TO)]
    assert {small_graph.layer(m) for m in members} <= {Layer.ENTITY, Layer.DOCUMENT}


def test_synonym_threshold_one_disables_equivalent_edges(embedder) -> None:  # noqa: ANN001
    qg = build_quadgraph(corpus(), doc_triples(), embedder, BuildOptions(synonym_threshold=1.0, communities=False))
    assert qg.stats()["relations"]["equivalent"] == 0
    assert qg.stats()["nodes"]["community"] == 0


def test_llm_openie_through_a_function_model(embedder) -> None:  # noqa: ANN001
    answers = {p[0]: {"entities": list(d.entities), "triples": [[t.subject, t.predicate, t.object] for t in d.triples]}
               for p, d in zip(PASSAGES, doc_triples(), strict=True)}
    seen: list[ModelRequest] = []

    def fake(request: ModelRequest) -> str:
        seen.append(request)
        title = request.messages[-1].text.split("\n", 1)[0].removeprefix("Title: ")
        if title == "Quenby" and sum(1 for r in seen if "Title: Quenby" in r.messages[-1].text) == 1:
            return "Sure! Here are the triples: ..."  # invalid first answer, retried
        if title == "Lake Morrow":
            return "not json at all"
        return json.dumps(answers[title])

    result = extract_with_model(FunctionModel(fake), corpus(), concurrency=3)
    assert all(r.response_format == RESPONSE_FORMAT for r in seen)
    assert set(result.failures) == {10} and "not JSON" in result.failures[10]
    assert result.requests == len(PASSAGES) + 2  # one retry for Quenby, one for Lake Morrow
    assert [len(d.triples) for d in result.docs] == [len(t.triples) if i != 10 else 0 for i, t in enumerate(doc_triples())]
    assert result.docs[3].triples == doc_triples()[3].triples
    qg = build_quadgraph(corpus(), result.docs, embedder, BuildOptions(communities=False), extractor="llm:function")
    assert qg.meta["extractor"] == "llm:function"
    assert qg.g.has_edge("ent:ilsa varn", "ent:quenby")


def test_offline_extractor_finds_names_dates_and_patterns() -> None:
    d = extract_passage(Passage("Ilsa Varn", "Ilsa Varn was a chemist born in Quenby. She studied at Harlow College in 1921."))
    assert {"Ilsa Varn", "Quenby", "Harlow College", "1921"} <= set(d.entities)
    assert "She" not in d.entities
    preds = {(t.subject, t.predicate, t.object) for t in d.triples}
    assert ("Ilsa Varn", "was a chemist born in", "Quenby") in preds
    # The anaphoric second sentence is attached to the passage topic.
    assert ("Ilsa Varn", "studied at", "Harlow College") in preds
    d2 = extract_passage(Passage("", "Battle of the Somme, Verdun."))
    assert any(t.predicate == CO_OCCURS for t in d2.triples) or len(d2.entities) >= 2


def test_offline_extractor_agreement_on_invented_corpus() -> None:
    scores = entity_agreement(extract_offline(corpus()), doc_triples())
    assert scores["recall"] > 0.6 and scores["precision"] > 0.5, scores


def test_offline_extractor_quality_on_musique() -> None:
    if not (SHARED_MUSIQUE / "musique_100_openie.json").is_file():
        pytest.skip(f"MuSiQue data not found at {SHARED_MUSIQUE}")
    c = load_corpus(SHARED_MUSIQUE / "musique_100_corpus.json")
    ref = load_openie(SHARED_MUSIQUE / "musique_100_openie.json", c)
    scores = entity_agreement(extract_offline(c), ref)
    # Measured: precision 0.603, recall 0.551 (docs/retrieval.md); guard against regressions.
    assert scores["precision"] > 0.58 and scores["recall"] > 0.53, scores

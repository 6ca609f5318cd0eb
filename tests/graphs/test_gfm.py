"""The GFM: forward shapes, a tiny training run that lowers the loss, checkpoints, configs, the shipped weights."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from graphs_testdata import QUESTIONS

from graphs.corpus import Question
from graphs.errors import CheckpointError
from graphs.gfm.checkpoint import SHIPPED, config_path, load_checkpoint, save_checkpoint
from graphs.gfm.config import GFMConfig, paper_config, small_config
from graphs.gfm.model import GFM, count_parameters
from graphs.gfm.scorer import GFMScorer
from graphs.gfm.subgraph import SubgraphOptions
from graphs.gfm.synth import QuestionSynthesizer
from graphs.gfm.train import TrainOptions, _loss, fit, prepare_examples

TINY = GFMConfig(hidden_dim=16, num_layers=2, relation_hidden=16, score_hidden=16, name="tiny")


def test_forward_gives_one_score_per_node(small_graph, embedder) -> None:  # noqa: ANN001
    torch.manual_seed(0)
    scorer = GFMScorer(small_graph, embedder, GFM(TINY), subgraph=SubgraphOptions(full_graph=True))
    prepared = scorer.prepare([q for _, q, _ in QUESTIONS])
    batch = scorer.sampler.collate(np.stack([p.vec for p in prepared]), [p.graph for p in prepared])
    out = scorer.model(batch)
    n = small_graph.g.number_of_nodes()
    assert out.shape == (3 * n,) and torch.isfinite(out).all()
    scored = scorer.score(prepared)
    assert [s.doc_scores.shape for s in scored] == [(len(small_graph.documents()),)] * 3
    # The untrained model is a dense retriever: its passage ranking follows the text cosine.
    cos = scorer.pg.node_text[scorer.pg.doc_rows].numpy() @ prepared[0].vec
    assert np.argmax(scored[0].doc_scores) == np.argmax(cos)


def test_seeds_come_from_exact_names_in_the_query(small_graph, embedder) -> None:  # noqa: ANN001
    scorer = GFMScorer(small_graph, embedder)
    seeds = scorer.linker.link(QUESTIONS[1][1])
    assert seeds[0].node == "ent:zorvath institute" and seeds[0].how == "exact" and seeds[0].weight == 1.0


def test_query_subgraph_reaches_multi_hop_passages(small_graph, embedder) -> None:  # noqa: ANN001
    scorer = GFMScorer(small_graph, embedder, subgraph=SubgraphOptions(dense_docs=0, hops=3))
    p = scorer.prepare([QUESTIONS[0][1]])[0]
    rows = set(p.graph.rows.tolist())
    assert {int(scorer.doc_rows[i]) for i in (0, 1, 4)} <= rows
    assert len(rows) < small_graph.g.number_of_nodes()


def test_synthesized_questions_cover_one_and_multi_hop(small_graph) -> None:  # noqa: ANN001
    qs = QuestionSynthesizer(small_graph, seed=1).sample(10, 10, 5, 5)
    sources = {q.source for q in qs}
    assert {"one_hop", "two_hop", "passage"} <= sources
    two = [q for q in qs if q.source == "two_hop"]
    assert all(len(q.docs) == 2 and q.entity for q in two)


@pytest.fixture
def one_thread():  # noqa: ANN201
    # Several torch threads on shared cores wait on each other; one is faster here.
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.mark.slow
@pytest.mark.usefixtures("one_thread")
def test_tiny_training_run_lowers_the_loss(small_graph, embedder) -> None:  # noqa: ANN001
    torch.manual_seed(0)
    model = GFM(TINY)
    opts = TrainOptions(steps=40, batch_size=4, lr=1e-2, one_hop=30, two_hop=20, three_hop=0, passage=10,
                        eval_every=0, distill_weight=0.1)
    scorer = GFMScorer(small_graph, embedder, model, subgraph=opts.subgraph)
    labeled = [Question(qid, text, tuple(gold)) for qid, text, gold in QUESTIONS]
    examples = prepare_examples(small_graph, scorer, embedder, opts, labeled[:2])
    assert {e.source for e in examples} >= {"one_hop", "labeled"}
    model.eval()
    with torch.no_grad():
        before = float(_loss(model, scorer, examples, opts)[0])
    report = fit(model, scorer, examples, opts)
    model.eval()
    with torch.no_grad():
        after = float(_loss(model, scorer, examples, opts)[0])
    assert report["steps"] == 40
    assert after < 0.8 * before, (before, after)


def test_checkpoint_round_trip(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = GFM(TINY)
    model.config.trained_questions = ["abc"]
    path = save_checkpoint(model, tmp_path / "m.pt")
    loaded = load_checkpoint(path)
    assert loaded.config == model.config
    for (k, a), (_, b) in zip(model.state_dict().items(), loaded.state_dict().items(), strict=True):
        assert torch.equal(a, b), k


def test_bad_checkpoints_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="not found"):
        load_checkpoint(tmp_path / "none.pt")
    path = save_checkpoint(GFM(TINY), tmp_path / "m.pt")
    path.write_bytes(path.read_bytes()[:100])
    with pytest.raises(CheckpointError, match="unreadable"):
        load_checkpoint(path)
    path = save_checkpoint(GFM(TINY), tmp_path / "m2.pt")
    config_path(path).write_text(GFMConfig(hidden_dim=8, num_layers=2).to_json())
    with pytest.raises(CheckpointError, match="does not match"):
        load_checkpoint(path)
    config_path(path).write_text('{"hidden_dim": 8, "colour": "red"}')
    with pytest.raises(CheckpointError, match="unknown GFM config keys"):
        load_checkpoint(path)


def test_paper_config_has_about_34m_parameters() -> None:
    n = count_parameters(GFM(paper_config()))
    assert 33_000_000 <= n <= 36_000_000, n
    assert count_parameters(GFM(small_config())) < 500_000


def test_shipped_checkpoint_is_small_and_loads() -> None:
    assert SHIPPED.is_file() and SHIPPED.stat().st_size < 5 * 1024 * 1024
    model = load_checkpoint()
    assert model.config.trained_questions, "the shipped model records which labeled questions it saw"
    assert model.config.training.get("subgraph")

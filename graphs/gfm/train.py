"""Train the GFM on CPU: passage-level BCE plus a listwise loss, distillation from the text
encoder's query–passage similarity, and entity prediction (knowledge-graph completion), on
questions synthesized from the graph plus any labeled training questions."""

from __future__ import annotations

import math
import random
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from agent.extras import needs_extra

with needs_extra("graphs", "QuadGraph retrieval"):
    import numpy as np
    import torch
    import torch.nn.functional as F

from graphs.corpus import Question
from graphs.embedding import Embedder
from graphs.gfm.config import GFMConfig
from graphs.gfm.model import GFM
from graphs.gfm.scorer import DOC_TYPE, ENTITY_TYPE, GFMScorer, PreparedQuery
from graphs.gfm.subgraph import SubgraphOptions
from graphs.gfm.synth import QuestionSynthesizer, TrainQuery
from graphs.quadgraph import QuadGraph


@dataclass
class TrainOptions:
    """Training knobs; the defaults train the small model in a few minutes on one CPU thread."""

    steps: int = 400
    """Optimizer steps."""
    batch_size: int = 4
    """Queries per step."""
    lr: float = 2e-3
    """Adam learning rate."""
    bce_weight: float = 1.0
    """Weight of passage-level binary cross-entropy (positives and negatives averaged separately)."""
    listwise_weight: float = 1.0
    """Weight of the listwise loss (-log softmax of the target passages)."""
    distill_weight: float = 0.5
    """Weight of KL(text-encoder ranking || GFM ranking) over passages."""
    entity_weight: float = 0.3
    """Weight of answer-entity prediction (KG completion) when the answer entity is known."""
    distill_temperature: float = 0.05
    """Temperature of the teacher's softmax over query–passage cosines."""
    one_hop: int = 600
    """Synthetic one-fact questions."""
    two_hop: int = 600
    """Synthetic two-fact path questions."""
    three_hop: int = 200
    """Synthetic three-fact path questions (fewer are made when the graph lacks such paths)."""
    passage: int = 200
    """Synthetic blanked-sentence questions."""
    labeled_repeat: int = 4
    """Each labeled training question appears this many times in the sampling pool."""
    eval_every: int = 50
    """Log (and validate, when validation questions are given) every this many steps; 0: never."""
    select_best: bool = False
    """Keep the weights with the best validation Recall@5 instead of the last ones (noisy with few questions)."""
    time_limit_s: float | None = None
    """Stop early after this many seconds of training."""
    seed: int = 0
    """Seed of sampling and initialisation."""
    subgraph: SubgraphOptions = field(default_factory=SubgraphOptions)
    """Query-graph construction (shared with inference)."""


@dataclass
class _Example:
    prepared: PreparedQuery
    doc_local: np.ndarray
    entity_local: int
    source: str


def _examples(scorer: GFMScorer, queries: Sequence[TrainQuery], vecs: np.ndarray) -> list[_Example]:
    out = []
    prepared = scorer.prepare([q.text for q in queries], vecs)
    for q, p in zip(queries, prepared, strict=True):
        local = {int(r): i for i, r in enumerate(p.graph.rows)}
        docs = np.array([local[int(scorer.doc_rows[d])] for d in q.docs if int(scorer.doc_rows[d]) in local], dtype=np.int64)
        ent = local.get(scorer.row[q.entity], -1) if q.entity and q.entity in scorer.row else -1
        if len(docs):
            out.append(_Example(p, docs, ent, q.source))
    return out


def recall_at(scorer: GFMScorer, questions: Sequence[Question], k: int = 5, batch: int = 8) -> float:
    """Mean Recall@k of the scorer's model over labeled questions."""
    if not questions:
        return 0.0
    vals = []
    for start in range(0, len(questions), batch):
        chunk = questions[start : start + batch]
        for q, s in zip(chunk, scorer.score(scorer.prepare([q.text for q in chunk])), strict=True):
            top = np.lexsort((np.arange(len(s.doc_scores)), -s.doc_scores))[:k]
            vals.append(len(set(top.tolist()) & set(q.gold)) / len(q.gold))
    return float(np.mean(vals))


def _loss(model: GFM, scorer: GFMScorer, batch: list[_Example], opts: TrainOptions) -> tuple[torch.Tensor, dict[str, float]]:
    qb = scorer.sampler.collate(np.stack([e.prepared.vec for e in batch]), [e.prepared.graph for e in batch])
    scores = model(qb)
    cos = (qb.node_text * qb.query.index_select(0, qb.batch)).sum(-1)
    parts: defaultdict[str, float] = defaultdict(float)
    total = scores.new_zeros(())
    offset = 0
    for e in batch:
        n = len(e.prepared.graph.rows)
        s, c = scores[offset : offset + n], cos[offset : offset + n]
        types = qb.node_type[offset : offset + n]
        offset += n
        doc_idx = torch.nonzero(types == DOC_TYPE).squeeze(-1)
        pos_of = {int(r): i for i, r in enumerate(doc_idx.tolist())}
        target = torch.zeros(len(doc_idx))
        target[[pos_of[int(d)] for d in e.doc_local]] = 1.0
        ds = s.index_select(0, doc_idx)
        bce_all = F.binary_cross_entropy_with_logits(ds, target, reduction="none")
        neg = bce_all[target == 0]
        bce = bce_all[target == 1].mean() + (neg.mean() if len(neg) else 0.0)
        listwise = -(F.log_softmax(ds, 0) * target).sum() / target.sum()
        teacher = F.softmax(c.index_select(0, doc_idx) / opts.distill_temperature, 0)
        distill = F.kl_div(F.log_softmax(ds, 0), teacher, reduction="sum")
        loss = opts.bce_weight * bce + opts.listwise_weight * listwise + opts.distill_weight * distill
        parts["bce"] += float(bce.detach())
        parts["listwise"] += float(listwise.detach())
        parts["distill"] += float(distill.detach())
        if e.entity_local >= 0 and opts.entity_weight:
            ent_idx = torch.nonzero(types == ENTITY_TYPE).squeeze(-1)
            where = torch.nonzero(ent_idx == e.entity_local).squeeze(-1)
            if len(where):
                ent = -F.log_softmax(s.index_select(0, ent_idx), 0)[where[0]]
                loss = loss + opts.entity_weight * ent
                parts["entity"] += float(ent.detach())
        total = total + loss
    n = len(batch)
    return total / n, {k: v / n for k, v in parts.items()}


def prepare_examples(
    qg: QuadGraph,
    scorer: GFMScorer,
    embedder: Embedder,
    options: TrainOptions,
    train_questions: Sequence[Question] = (),
) -> list[_Example]:
    """Synthesize questions from the graph, add the labeled ones, embed, link and build query graphs."""
    synth = QuestionSynthesizer(qg, seed=options.seed).sample(
        options.one_hop, options.two_hop, options.three_hop, options.passage
    )
    pool = synth + [TrainQuery(q.text, q.gold, None, "labeled") for q in train_questions]
    if not pool:
        return []
    examples = _examples(scorer, pool, embedder([q.text for q in pool]))
    return examples + [e for e in examples if e.source == "labeled"] * max(0, options.labeled_repeat - 1)


def fit(
    model: GFM,
    scorer: GFMScorer,
    examples: Sequence[_Example],
    options: TrainOptions,
    val_questions: Sequence[Question] = (),
    log: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Optimise the model in place; with validation questions, the best weights are kept."""
    opts = options
    say = log or (lambda _msg: None)
    if not examples:
        raise ValueError("no training examples: the graph has no usable facts and no labeled questions were given")
    torch.manual_seed(opts.seed)
    rng = random.Random(opts.seed)
    scorer.model = model
    optimizer = torch.optim.Adam(model.parameters(), lr=opts.lr)
    # Cosine decay to a tenth of the rate: the last weights are then a sound choice without selection.
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda i: 0.1 + 0.45 * (1 + math.cos(math.pi * min(i, opts.steps) / max(1, opts.steps)))
    )
    validate = bool(val_questions) and opts.eval_every > 0
    best_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    best_val = recall_at(scorer, val_questions) if validate else -1.0
    history: list[dict[str, float]] = [{"step": 0, "val_recall@5": best_val}] if validate else []
    losses: list[float] = []
    t1 = time.perf_counter()
    step = 0
    for step in range(1, opts.steps + 1):
        model.train()
        batch = rng.sample(list(examples), min(opts.batch_size, len(examples)))
        loss, parts = _loss(model, scorer, batch, opts)
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        losses.append(float(loss.detach()))
        if opts.eval_every and step % opts.eval_every == 0:
            window = float(np.mean(losses[-opts.eval_every :]))
            row: dict[str, float] = {"step": step, "loss": window, **parts}
            if validate:
                val = recall_at(scorer, val_questions)
                row["val_recall@5"] = val
                if opts.select_best and val >= best_val:
                    best_val = val
                    best_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
            history.append(row)
            say(f"step {step}: loss {window:.4f}" + (f", val R@5 {row['val_recall@5']:.3f}" if validate else ""))
        if opts.time_limit_s is not None and time.perf_counter() - t1 > opts.time_limit_s:
            say(f"time limit reached after {step} steps")
            break
    if validate and (not history or history[-1]["step"] != step):
        history.append({"step": step, "val_recall@5": recall_at(scorer, val_questions)})
    if validate and opts.select_best:
        model.load_state_dict(best_state)
    return {
        "steps": step,
        "train_s": round(time.perf_counter() - t1, 1),
        "first_loss": losses[0] if losses else None,
        "last_loss": float(np.mean(losses[-20:])) if losses else None,
        "best_val_recall@5": max((h.get("val_recall@5", -1.0) for h in history), default=None) if validate else None,
        "final_val_recall@5": history[-1].get("val_recall@5") if validate and history else None,
        "history": history,
    }


def train_gfm(
    qg: QuadGraph,
    embedder: Embedder,
    config: GFMConfig | None = None,
    options: TrainOptions | None = None,
    train_questions: Sequence[Question] = (),
    val_questions: Sequence[Question] = (),
    log: Callable[[str], None] | None = None,
) -> tuple[GFM, dict[str, Any]]:
    """Train a GFM on one graph; returns the model (best validation weights) and a report.

    The fingerprints of train_questions and val_questions are recorded in the config, so that
    evaluation leaves them out.
    """
    opts = options or TrainOptions()
    say = log or (lambda _msg: None)
    torch.manual_seed(opts.seed)
    model = GFM(config or GFMConfig())
    scorer = GFMScorer(qg, embedder, model, subgraph=opts.subgraph)
    t0 = time.perf_counter()
    examples = prepare_examples(qg, scorer, embedder, opts, train_questions)
    prep_s = time.perf_counter() - t0
    say(f"prepared {len(examples)} examples ({dict(Counter(e.source for e in examples))}) in {prep_s:.1f}s")
    report = fit(model, scorer, examples, opts, val_questions, log)
    report = {
        **report,
        "examples": dict(Counter(e.source for e in examples)),
        "prepare_s": round(prep_s, 1),
        "options": {k: v for k, v in asdict(opts).items() if k != "subgraph"},
        "subgraph": asdict(opts.subgraph),
    }
    model.config.trained_questions = sorted({q.fingerprint for q in [*train_questions, *val_questions]})
    model.config.training = {k: v for k, v in report.items() if k != "history"}
    return model, report

"""Recall@k evaluation in the MuSiQue convention, and the fixed train/test split of labeled questions."""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from graphs.corpus import Question
from graphs.retrieval import Retriever


def recall_at_k(ranking: Sequence[int], gold: Collection[int], k: int) -> float:
    """|gold ∩ top-k| / |gold| for one query."""
    gold_set = set(gold)
    if not gold_set:
        raise ValueError("a question needs at least one gold passage")
    return len(gold_set & set(ranking[:k])) / len(gold_set)


def split_questions(
    questions: Sequence[Question], seed: int = 0, train_fraction: float = 0.5
) -> tuple[list[Question], list[Question]]:
    """A fixed (train, test) split: positions shuffled by `random.Random(seed)`, the first share trains."""
    if not 0.0 <= train_fraction <= 1.0:
        raise ValueError("train_fraction must be in [0, 1]")
    order = list(range(len(questions)))
    random.Random(seed).shuffle(order)
    cut = round(len(order) * train_fraction)
    return [questions[i] for i in order[:cut]], [questions[i] for i in order[cut:]]


@dataclass
class RetrieverScore:
    """Recall and latency of one retriever over a question set."""

    recall: dict[int, float]
    """k → mean Recall@k, in percent."""
    questions: int
    """How many questions were scored."""
    median_latency_ms: float
    """Median wall time of one ranking call."""
    per_question: list[dict[str, Any]] = field(default_factory=list)
    """Question id, gold, top-k and recalls, per question."""

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready summary (per-question detail left out)."""
        out: dict[str, Any] = {f"recall@{k}": v for k, v in self.recall.items()}
        out["questions"] = self.questions
        out["median_latency_ms"] = round(self.median_latency_ms, 2)
        return out


def _rank_all(retriever: Retriever, questions: Sequence[Question], depth: int) -> list[tuple[list[int], float]]:
    out = []
    for q in questions:
        t = time.perf_counter()
        ranking = retriever.rank(q.text, depth)
        out.append((ranking, (time.perf_counter() - t) * 1000))
    return out


def _summarise(questions: Sequence[Question], runs: Sequence[tuple[list[int], float]], ks: Sequence[int]) -> RetrieverScore:
    rows = []
    sums = dict.fromkeys(ks, 0.0)
    for q, (ranking, _) in zip(questions, runs, strict=True):
        rec = {k: recall_at_k(ranking, q.gold, k) for k in ks}
        for k in ks:
            sums[k] += rec[k]
        rows.append({"id": q.id, "gold": list(q.gold), "top": ranking, **{f"recall@{k}": v for k, v in rec.items()}})
    n = max(1, len(questions))
    return RetrieverScore(
        recall={k: round(100 * sums[k] / n, 2) for k in ks},
        questions=len(questions),
        median_latency_ms=statistics.median(ms for _, ms in runs) if runs else 0.0,
        per_question=rows,
    )


def score_retriever(retriever: Retriever, questions: Sequence[Question], ks: Sequence[int] = (2, 5)) -> RetrieverScore:
    """Mean Recall@k (percent, 2 decimals) and median latency of one retriever."""
    return _summarise(questions, _rank_all(retriever, questions, max(ks)), ks)


def evaluate(
    retrievers: Mapping[str, Retriever],
    questions: Sequence[Question],
    trained: Collection[str] = (),
    ks: Sequence[int] = (2, 5),
    learned: Collection[str] = ("gfm",),
) -> dict[str, Any]:
    """Score every retriever on the questions not in `trained` (fingerprints of training questions).

    When some questions were left out, the retrievers that did not learn from them (all but
    `learned`) are also scored on all questions, under `all_questions`.
    """
    trained_set = set(trained)
    keep = [q.fingerprint not in trained_set for q in questions]
    held_out = [q for q, k in zip(questions, keep, strict=True) if k]
    report: dict[str, Any] = {
        "questions": len(questions),
        "evaluated": len(held_out),
        "excluded_as_trained": len(questions) - len(held_out),
        "retrievers": {},
    }
    everything: dict[str, RetrieverScore] = {}
    for name, r in retrievers.items():
        if name in learned or len(held_out) == len(questions):
            runs = _rank_all(r, held_out, max(ks))
        else:
            all_runs = _rank_all(r, questions, max(ks))
            everything[name] = _summarise(questions, all_runs, ks)
            runs = [run for run, k in zip(all_runs, keep, strict=True) if k]
        report["retrievers"][name] = _summarise(held_out, runs, ks).as_dict()
    if everything:
        report["all_questions"] = {name: s.as_dict() for name, s in everything.items()}
    return report

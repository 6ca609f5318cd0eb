"""Okapi BM25 over `title + "\\n" + text`, lower-cased `\\w+` tokens, in numpy/scipy."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from graphs.corpus import Passage
from graphs.retrieval import Provenance, Retriever
from graphs.text import tokens

if TYPE_CHECKING:
    import numpy as np


class BM25Retriever(Retriever):
    """BM25 with Lucene's non-negative idf, log(1 + (N - df + 0.5) / (df + 0.5))."""

    name = "bm25"

    def __init__(self, passages: Sequence[Passage], k1: float = 1.5, b: float = 0.75) -> None:
        import numpy as np
        from scipy.sparse import csr_matrix

        self.passages = list(passages)
        self.k1, self.b = k1, b
        vocab: dict[str, int] = {}
        rows, cols, vals = [], [], []
        lengths = []
        for i, p in enumerate(self.passages):
            toks = tokens(p.key)
            lengths.append(len(toks))
            for term, tf in Counter(toks).items():
                rows.append(i)
                cols.append(vocab.setdefault(term, len(vocab)))
                vals.append(tf)
        self.vocab = vocab
        n = len(self.passages)
        tf = csr_matrix((np.asarray(vals, dtype=np.float32), (rows, cols)), shape=(n, len(vocab)))
        dl = np.asarray(lengths, dtype=np.float32)
        avgdl = float(dl.mean()) if n else 0.0
        df = np.bincount(np.asarray(cols, dtype=np.int64), minlength=len(vocab)).astype(np.float32)
        self.idf = np.log1p((n - df + 0.5) / (df + 0.5)).astype(np.float32)
        # Precompute the saturated term weights once; a query is then a sum of columns.
        norm = self.k1 * (1 - self.b + self.b * dl / max(avgdl, 1e-9))
        tf = tf.tocoo()
        w = tf.data * (self.k1 + 1) / (tf.data + norm[tf.row])
        self.weights = csr_matrix((w.astype(np.float32), (tf.row, tf.col)), shape=tf.shape).tocsc()

    def scores(self, query: str) -> np.ndarray:
        import numpy as np

        # Each distinct query term counts once (this reproduces the published MuSiQue-100 floor).
        out = np.zeros(len(self.passages), dtype=np.float32)
        for term in dict.fromkeys(t for t in tokens(query) if t in self.vocab):
            j = self.vocab[term]
            col = self.weights.getcol(j)
            out[col.indices] += self.idf[j] * col.data
        return out

    def explain(self, query: str, doc_index: int, context: Any) -> Provenance:
        doc_terms = set(tokens(self.passages[doc_index].key))
        matched = sorted({t for t in tokens(query) if t in doc_terms})
        return Provenance(retriever=self.name, evidence={"matched_terms": matched})

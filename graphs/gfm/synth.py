"""Training signal generated from the graph itself: questions from facts, multi-hop paths and passages.

- one-hop: a fact `s --p--> o` stated in passage d becomes "What is the p of s?" (or asks for s
  given o); targets: d and the answer entity (knowledge-graph completion);
- multi-hop: a path of 2–3 facts from different passages through bridge entities becomes a
  nested question that names only the first entity; targets: every passage on the path and the
  last entity;
- passage: a sentence of a passage with one entity blanked out; targets: the passage and the entity.
Templates are deliberately plain: the model sees the MiniLM embedding of the question and the
entities it links to, not its grammar.
"""

from __future__ import annotations

import random
import re
from collections import defaultdict
from dataclasses import dataclass

from graphs.extract import split_sentences
from graphs.quadgraph import Layer, QuadGraph, RelationKind

_ONE_HOP = [
    "What is the {p} of {s}?",
    "{s} {p} what?",
    "Which entity does {s} {p}?",
]
_ONE_HOP_REVERSE = [
    "What {p} {o}?",
    "Which entity {p} {o}?",
]
_TWO_HOP = [
    "What is the {p2} of the entity that {s} {p1}?",
    "{s} {p1} something that {p2} what?",
    "What {p2} is linked to the one {s} {p1}?",
]
_THREE_HOP = [
    "What is the {p3} of the entity that {p2} the one that {s} {p1}?",
    "{s} {p1} something, which {p2} something that {p3} what?",
]


@dataclass(frozen=True)
class TrainQuery:
    """A training question with the passages (and optionally the entity) that answer it."""

    text: str
    """The question."""
    docs: tuple[int, ...]
    """Corpus indices of the target passages."""
    entity: str | None = None
    """Node id of the answer entity, when known."""
    source: str = "synthetic"
    """Where it came from: one_hop, two_hop, three_hop, passage, or labeled."""


@dataclass(frozen=True)
class _Fact:
    s: str
    o: str
    p: str
    docs: tuple[int, ...]


class QuestionSynthesizer:
    """Samples synthetic training questions from a QuadGraph's facts and passages."""

    def __init__(self, qg: QuadGraph, seed: int = 0, max_bridge_docs: int = 20) -> None:
        self.qg = qg
        self.rng = random.Random(seed)
        self.facts: list[_Fact] = []
        for u, v, d in qg.relations(RelationKind.FACT):
            if d.get("docs") and d["text"] != "co-occurs with":
                self.facts.append(_Fact(u, v, str(d["text"]), tuple(d["docs"])))
        self.out_facts: dict[str, list[_Fact]] = defaultdict(list)
        for f in self.facts:
            self.out_facts[f.s].append(f)
        self.n_docs = {
            e: sum(1 for n in qg.g.successors(e) if qg.layer(n) == Layer.DOCUMENT) for e in qg.nodes(Layer.ENTITY)
        }
        self.max_bridge_docs = max_bridge_docs

    def _name(self, node: str) -> str:
        return self.qg.text(node)

    def _bridge_ok(self, node: str) -> bool:
        key = self.qg.g.nodes[node].get("key", "")
        return 0 < self.n_docs.get(node, 0) <= self.max_bridge_docs and not re.fullmatch(r"[\d\s.,]+", key)

    def one_hop(self) -> TrainQuery | None:
        """A question about one fact."""
        if not self.facts:
            return None
        f = self.rng.choice(self.facts)
        if self.rng.random() < 0.7:
            text = self.rng.choice(_ONE_HOP).format(p=f.p, s=self._name(f.s))
            return TrainQuery(text, f.docs, f.o, "one_hop")
        text = self.rng.choice(_ONE_HOP_REVERSE).format(p=f.p, o=self._name(f.o))
        return TrainQuery(text, f.docs, f.s, "one_hop")

    def multi_hop(self, hops: int) -> TrainQuery | None:
        """A nested question along a path of `hops` facts stated in different passages."""
        for _ in range(20):
            if not self.facts:
                return None
            path = [self.rng.choice(self.facts)]
            used_docs = set(path[0].docs)
            while len(path) < hops:
                bridge = path[-1].o
                if not self._bridge_ok(bridge):
                    break
                options = [
                    f for f in self.out_facts.get(bridge, [])
                    if f.o not in {p.s for p in path} and not used_docs & set(f.docs)
                ]
                if not options:
                    break
                nxt = self.rng.choice(options)
                path.append(nxt)
                used_docs |= set(nxt.docs)
            if len(path) < hops:
                continue
            s = self._name(path[0].s)
            ps = [f.p for f in path]
            if hops == 2:
                text = self.rng.choice(_TWO_HOP).format(s=s, p1=ps[0], p2=ps[1])
            else:
                text = self.rng.choice(_THREE_HOP).format(s=s, p1=ps[0], p2=ps[1], p3=ps[2])
            docs = tuple(dict.fromkeys(d for f in path for d in f.docs[:1]))
            return TrainQuery(text, docs, path[-1].o, "two_hop" if hops == 2 else "three_hop")
        return None

    def passage(self) -> TrainQuery | None:
        """A passage sentence with one of its entities blanked out."""
        docs = self.qg.documents()
        for _ in range(20):
            d = self.rng.choice(docs)
            ents = [e for e in self.qg.g.predecessors(d) if self.qg.layer(e) == Layer.ENTITY]
            body = self.qg.text(d).split("\n", 1)[-1]
            sentences = split_sentences(body)
            if not ents or not sentences:
                continue
            sentence = self.rng.choice(sentences)
            present = [e for e in ents if len(self._name(e)) > 2 and self._name(e) in sentence]
            if not present:
                continue
            e = self.rng.choice(present)
            text = sentence.replace(self._name(e), "what", 1)
            return TrainQuery(text, (self.qg.g.nodes[d]["doc_index"],), e, "passage")
        return None

    def sample(self, one_hop: int, two_hop: int, three_hop: int, passage: int) -> list[TrainQuery]:
        """A mix of synthetic questions (fewer when the graph cannot supply them)."""
        out: list[TrainQuery] = []
        for count, make in (
            (one_hop, self.one_hop),
            (two_hop, lambda: self.multi_hop(2)),
            (three_hop, lambda: self.multi_hop(3)),
            (passage, self.passage),
        ):
            for _ in range(count):
                q = make()
                if q is not None:
                    out.append(q)
        return out

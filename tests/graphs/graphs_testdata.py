"""A small invented corpus with two- and three-hop chains, its triples, and questions in the MuSiQue layout."""

from __future__ import annotations

import json
from pathlib import Path

from graphs.corpus import DocTriples, Passage, Triple

SHARED_MUSIQUE = (Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "musique").resolve()

PASSAGES = [
    ("Zorvath Institute", "The Zorvath Institute is a research institute in Melport. It was founded by Ilsa Varn in 1931."),
    ("Ilsa Varn", "Ilsa Varn was a chemist born in Quenby. She studied at Harlow College before moving to Melport."),
    ("Melport", "Melport is a coastal city in the Republic of Tessaly. Its mayor is Doran Kell."),
    ("Quenby", "Quenby is a village on the River Ashe. It is known for its wool market."),
    ("Harlow College", "Harlow College is a university in Brenford. Its first principal was Amos Pell."),
    ("Republic of Tessaly", "The Republic of Tessaly is a country whose capital is Varos. Its president is Mira Tann."),
    ("Doran Kell", "Doran Kell is a politician who was elected mayor of Melport in 2019."),
    ("River Ashe", "The River Ashe flows from the Coldridge Hills into Lake Morrow."),
    ("Amos Pell", "Amos Pell was a historian who wrote The Long Tide in 1902."),
    ("Varos", "Varos is the capital of the Republic of Tessaly and home to the Tessaly Opera."),
    ("Lake Morrow", "Lake Morrow is a freshwater lake fed by the River Ashe."),
    ("Brenford", "Brenford is a market town in Wessmoor, known for Harlow College."),
]

TRIPLES = [
    [("Zorvath Institute", "located in", "Melport"), ("Zorvath Institute", "founded by", "Ilsa Varn"), ("Zorvath Institute", "founded in", "1931")],
    [("Ilsa Varn", "born in", "Quenby"), ("Ilsa Varn", "studied at", "Harlow College"), ("Ilsa Varn", "occupation", "chemist")],
    [("Melport", "located in", "Republic of Tessaly"), ("Melport", "mayor", "Doran Kell")],
    [("Quenby", "located on", "River Ashe"), ("Quenby", "known for", "wool market")],
    [("Harlow College", "located in", "Brenford"), ("Harlow College", "first principal", "Amos Pell")],
    [("Republic of Tessaly", "capital", "Varos"), ("Republic of Tessaly", "president", "Mira Tann")],
    [("Doran Kell", "elected mayor of", "Melport"), ("Doran Kell", "elected in", "2019")],
    [("River Ashe", "flows from", "Coldridge Hills"), ("River Ashe", "flows into", "Lake Morrow")],
    [("Amos Pell", "wrote", "The Long Tide"), ("The Long Tide", "published in", "1902")],
    [("Varos", "capital of", "Tessaly Republic"), ("Varos", "home to", "Tessaly Opera")],
    [("Lake Morrow", "fed by", "River Ashe")],
    [("Brenford", "located in", "Wessmoor"), ("Brenford", "known for", "Harlow College")],
]

QUESTIONS = [
    ("q1", "Who was the first principal of the college where the founder of the Zorvath Institute studied?", [0, 1, 4]),
    ("q2", "Who is the mayor of the city where the Zorvath Institute is located?", [0, 2]),
    ("q3", "Which river flows past the birthplace of Ilsa Varn?", [1, 3]),
]


def corpus() -> list[Passage]:
    """The invented corpus."""
    return [Passage(t, x) for t, x in PASSAGES]


def doc_triples() -> list[DocTriples]:
    """Hand-written triples, aligned with corpus()."""
    out = []
    for ts in TRIPLES:
        triples = [Triple(*t) for t in ts]
        ents = list(dict.fromkeys(x for t in ts for x in (t[0], t[2])))
        out.append(DocTriples(entities=ents, triples=triples))
    return out


def write_files(folder: Path) -> dict[str, Path]:
    """Corpus, OpenIE (HippoRAG layout) and questions (MuSiQue layout) files."""
    folder.mkdir(parents=True, exist_ok=True)
    cpath, opath, qpath = folder / "corpus.json", folder / "openie.json", folder / "questions.json"
    cpath.write_text(json.dumps([{"title": t, "text": x} for t, x in PASSAGES]))
    docs = []
    for (t, x), d in zip(PASSAGES, doc_triples(), strict=True):
        docs.append({"title": t, "text": x, "passage": f"{t}\n{x}", "extracted_entities": d.entities,
                     "extracted_triples": [[tr.subject, tr.predicate, tr.object] for tr in d.triples]})
    docs[0]["extracted_triples"].append(["malformed", "pair"])
    opath.write_text(json.dumps({"docs": docs, "ents_by_doc": []}))
    qs = []
    for qid, text, gold in QUESTIONS:
        paragraphs = [
            {"idx": i, "title": t, "paragraph_text": x, "is_supporting": i in gold} for i, (t, x) in enumerate(PASSAGES)
        ]
        qs.append({"id": qid, "question": text, "answer": "", "paragraphs": paragraphs})
    qpath.write_text(json.dumps(qs))
    return {"corpus": cpath, "triples": opath, "questions": qpath}

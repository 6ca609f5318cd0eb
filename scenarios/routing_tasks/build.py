"""Build the routing task set (data/tasks.jsonl) from licensed sources and seeded generators.

    python -m scenarios.routing_tasks.build [--shared ../shared/data] [--out FILE]

Run by a maintainer; the product reads only the shipped file. Sources (see data/README.md):
OpenTriviaQA and GSM8K items of shared/data/routing (instant, reasoning), MuSiQue-100 questions
(retrieval), the tau2 retail and airline DBs bundled in scenarios/domains (lookups graded against
the DB), and generated problems (conversions, formatting, chit-chat, arithmetic, logic, big-number
products). Every task is written in one of several styles, drawn per task, so that style alone
does not reveal what a task needs. The split is decided by a hash of the source item.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

from scenarios.routing_tasks.task import TASKS_PATH, Grader, Kind, RoutingTask, Split, write_tasks

SEED = 20250601
STYLES: dict[str, Callable[[str], str]] = {
    "plain": lambda q: q,
    "polite": lambda q: f"Could you please help me with this? {q} Thank you!",
    "terse": lambda q: f"Q: {q}\nA:",
    "chatty": lambda q: f"Hey, quick one that came up at lunch today and nobody could settle it. {q}",
    "customer": lambda q: f"Hello, I'm writing in with a question and would appreciate a clear answer. {q}",
    "relay": lambda q: f'My colleague asked me this and I promised to get back to them: "{q}"',
}
"""Phrasing styles; every kind is written in all of them."""
SPLIT_SHARES: tuple[tuple[Split, float], ...] = (("train", 0.6), ("validation", 0.2), ("test", 0.2))
CC_BY_SA = "CC BY-SA 4.0"
CC_BY = "CC BY 4.0"


def split_of(source_item: str) -> Split:
    """The split of a source item: a stable hash, so all tasks of one item share a split."""
    x = int(hashlib.sha256(f"{SEED}:{source_item}".encode()).hexdigest()[:8], 16) / 0xFFFFFFFF
    total = 0.0
    for name, share in SPLIT_SHARES:
        total += share
        if x < total:
            return name
    return "test"


class _Builder:
    def __init__(self) -> None:
        self.rng = random.Random(SEED)
        self.tasks: list[RoutingTask] = []
        self.counts: dict[str, int] = {}

    def add(self, family: str, kind: Kind, text: str, grader: Grader, *, tools: tuple[str, ...] = (),
            source: str = "generated", source_item: str, source_id: str = "", licence: str = "MIT",
            extra: dict[str, Any] | None = None) -> None:
        self.counts[family] = self.counts.get(family, 0) + 1
        style = self.rng.choice(sorted(STYLES))
        self.tasks.append(RoutingTask(
            id=f"{family}-{self.counts[family]:04d}", query=STYLES[style](text), kind=kind,
            family=family, style=style, grader=grader, tools=tools, source=source, source_item=source_item,
            source_id=source_id or source_item, split=split_of(source_item), licence=licence,
            extra={"text": text, **(extra or {})},
        ))


def _shared_rows(shared: Path) -> list[dict[str, Any]]:
    rows = []
    for name in ("routing_train.jsonl", "routing_dev.jsonl"):
        rows += [json.loads(x) for x in (shared / "routing" / name).read_text().splitlines() if x.strip()]
    return rows


def _trivia_and_gsm8k(b: _Builder, shared: Path, trivia: int, gsm8k: int) -> None:
    rows = _shared_rows(shared)
    for row in [r for r in rows if r["source"] == "opentriviaqa"][:trivia]:
        b.add("trivia", "instant", row["query"], Grader("text", row["answer"]), source="opentriviaqa",
              source_item=row["source_id"], licence=CC_BY_SA)
    for row in [r for r in rows if r["source"] == "gsm8k-test"][:gsm8k]:
        b.add("gsm8k", "reasoning", row["query"], Grader("number", row["answer"]), source="gsm8k-test",
              source_item=row["source_id"])


def _musique(b: _Builder, shared: Path) -> None:
    items = json.loads((shared / "musique" / "musique_100.json").read_text())
    # questions that share a single-hop sub-question are one source item (one split)
    parent = {it["id"]: it["id"] for it in items}

    def find(x: str) -> str:
        while parent[x] != x:
            x = parent[x]
        return x

    owner: dict[int, str] = {}
    for it in items:
        for sub in it["question_decomposition"]:
            if sub["id"] in owner:
                parent[find(it["id"])] = find(owner[sub["id"]])
            owner[sub["id"]] = it["id"]
    for it in items:
        b.add("musique", "tool", it["question"], Grader("text", it["answer"], tuple(it.get("answer_aliases", ()))),
              tools=("retrieval",), source="musique-100", source_item=f"musique:{find(it['id'])}",
              source_id=it["id"], licence=CC_BY)


def _tau2(b: _Builder, retail: int, airline: int) -> None:
    from scenarios.domains import load_domain

    rng = random.Random(SEED + 1)
    db = load_domain("retail").db
    for oid in rng.sample(sorted(db["orders"]), retail):
        order = db["orders"][oid]
        item = f"tau2-retail:order:{oid}"
        which = rng.randrange(3)
        if which == 0:
            b.add("tau2-retail", "tool", f"What is the current status of order {oid}?",
                  Grader("text", order["status"]), tools=("retail",), source="tau2-retail", source_item=item)
        elif which == 1:
            b.add("tau2-retail", "tool", f"To which city is order {oid} being shipped?",
                  Grader("text", order["address"]["city"]), tools=("retail",), source="tau2-retail", source_item=item)
        else:
            b.add("tau2-retail", "tool", f"How many items are in order {oid}?",
                  Grader("number", str(len(order["items"]))), tools=("retail",), source="tau2-retail",
                  source_item=item)
    db = load_domain("airline").db
    for rid in rng.sample(sorted(db["reservations"]), airline):
        res = db["reservations"][rid]
        item = f"tau2-airline:reservation:{rid}"
        which = rng.randrange(3)
        if which == 0:
            b.add("tau2-airline", "tool", f"What cabin class is booked on reservation {rid}?",
                  Grader("text", res["cabin"], (res["cabin"].replace("_", " "),)), tools=("airline",),
                  source="tau2-airline", source_item=item)
        elif which == 1:
            b.add("tau2-airline", "tool", f"Which airport does reservation {rid} depart from? Give the IATA code.",
                  Grader("text", res["origin"]), tools=("airline",), source="tau2-airline", source_item=item)
        else:
            b.add("tau2-airline", "tool", f"How many passengers are on reservation {rid}?",
                  Grader("number", str(len(res["passengers"]))), tools=("airline",), source="tau2-airline",
                  source_item=item)


_UNITS = [("meters", "centimeters", 100), ("hours", "minutes", 60), ("kilograms", "grams", 1000),
          ("feet", "inches", 12), ("minutes", "seconds", 60), ("days", "hours", 24), ("liters", "milliliters", 1000)]
_WORDS = ["apple", "river", "window", "garden", "pencil", "silver", "rocket", "forest", "candle", "planet",
          "violin", "marble", "harbor", "meadow", "lantern"]
_CHAT = [("Say hello back to me in one word.", "hello", ("hi", "hey")),
         ("Reply with just the word yes if you can read this.", "yes", ()),
         ("I'm saying goodbye now. Reply with one word to say goodbye back.", "goodbye", ("bye",)),
         ("What is the opposite of the word 'up'? One word please.", "down", ()),
         ("Thanks a lot! Reply with the single word 'welcome'.", "welcome", ()),
         ("What colour do you get by mixing blue and yellow? One word.", "green", ()),
         ("What day comes right after Monday?", "Tuesday", ()),
         ("What is the plural of 'mouse'?", "mice", ()),
         ("Which is heavier, a tonne of bricks or a gram of feathers? Answer with the item.", "bricks", ("tonne of bricks",)),
         ("Name the season that comes after summer. One word.", "autumn", ("fall",))]
_NAMES = ["Ana", "Ben", "Cleo", "Dev", "Eli", "Fay", "Gus", "Hana", "Ivo", "Jin"]


def _generated(b: _Builder, n_convert: int, n_format: int, n_arith: int, n_logic: int, n_big: int) -> None:
    rng = random.Random(SEED + 2)
    for i in range(n_convert):
        src, dst, factor = _UNITS[i % len(_UNITS)]
        n = rng.randint(2, 12)
        b.add("convert", "instant", f"How many {dst} are in {n} {src}?", Grader("number", str(n * factor)),
              source_item=f"gen:convert:{i}")
    for i in range(n_format):
        w = rng.choice(_WORDS)
        if i % 2:
            b.add("format", "instant", f"Write the word '{w}' in capital letters, and nothing else.",
                  Grader("exact", w.upper()), source_item=f"gen:format:{i}")
        else:
            b.add("format", "instant", f"Reply with exactly the word {w} followed by an exclamation mark, nothing else.",
                  Grader("exact", f"{w}!", ignore_case=True), source_item=f"gen:format:{i}")
    for i, (q, reply, aliases) in enumerate(_CHAT):
        b.add("chat", "instant", q, Grader("text", reply, aliases), source_item=f"gen:chat:{i}")
    for i in range(n_arith):
        a, c, d = rng.randint(12, 90), rng.randint(3, 9), rng.randint(2, 6)
        price, left = rng.randint(3, 15), rng.randint(1, 9)
        if i % 2:
            a = max(a, d * left + 5)  # never sell more boxes than the shop has
            q = (f"A shop has {a} boxes with {c} pens in each. It sells {d} boxes a day for {left} days, "
                 f"then gets a delivery of {price} more boxes. How many pens does it have now?")
            ans = (a - d * left + price) * c
        else:
            total = c * price + d * left
            q = (f"Mia buys {c} notebooks at ${price} each and {d} pens at ${left} each. She pays with "
                 f"${total * 2}. How much change does she get, in dollars?")
            ans = total
        b.add("arith", "reasoning", q, Grader("number", str(ans)), source_item=f"gen:arith:{i}")
    for i in range(n_logic):
        names = rng.sample(_NAMES, 4)
        # names[0] is oldest … names[3] youngest; clues given out of order
        clues = [f"{names[0]} is older than {names[1]}.", f"{names[1]} is older than {names[2]}.",
                 f"{names[2]} is older than {names[3]}."]
        rng.shuffle(clues)
        ask_young = i % 2 == 0
        q = " ".join(clues) + (" Who is the youngest?" if ask_young else " Who is the oldest?")
        b.add("logic", "reasoning", q, Grader("text", names[3] if ask_young else names[0]),
              source_item=f"gen:logic:{i}")
    for i in range(n_big):
        x, y = rng.randint(10**6, 10**8), rng.randint(10**5, 10**7)
        op = i % 3
        if op == 0:
            q, ans = f"What is {x} multiplied by {y}? Give the exact value.", x * y
        elif op == 1:
            z = rng.randint(10**4, 10**6)
            q, ans = f"Compute exactly: {x} * {y} - {z}.", x * y - z
        else:
            q, ans = f"What is {x} raised to the power of 3? Give the exact integer.", x**3
        b.add("bignum", "tool", q, Grader("number", str(ans)), tools=("calculate",), source_item=f"gen:bignum:{i}")


def build(shared: Path) -> list[RoutingTask]:
    """The full task set, deterministic for a given shared data folder."""
    b = _Builder()
    _trivia_and_gsm8k(b, shared, trivia=130, gsm8k=150)
    _generated(b, n_convert=42, n_format=30, n_arith=40, n_logic=30, n_big=50)
    _musique(b, shared)
    _tau2(b, retail=50, airline=40)
    return b.tasks


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Build the routing task set.")
    parser.add_argument("--shared", type=Path, default=Path(__file__).resolve().parents[3] / "shared" / "data")
    parser.add_argument("--out", type=Path, default=TASKS_PATH)
    args = parser.parse_args(argv)
    tasks = build(args.shared)
    write_tasks(tasks, args.out)
    by: dict[tuple[str, str], int] = {}
    for t in tasks:
        by[(t.kind, t.split)] = by.get((t.kind, t.split), 0) + 1
    print(f"{len(tasks)} tasks -> {args.out}")
    for key in sorted(by):
        print(f"  {key[0]:>9} {key[1]:<10} {by[key]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

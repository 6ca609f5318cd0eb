"""The offline detector's labeled user turns, built from the tau2 retail and airline domains.

Two sources:
- normal turns derived from each task: its user's identity (known_info) and request
  (reason_for_call), turned from the task's second person into the user's first person;
- templated turns (interventions/data/turn_templates.yaml) for normal requests and the six error
  types, with slots filled from the DB records of the task's user (orders, items, reservations).

The held-out split is disjoint from training in two ways: its rows come from tau2's test tasks
only, and its templates (about a third per domain and label, picked by hash) are never used for
training. Rows mixing a train task with a held-out template, or the reverse, are not built.
"""

from __future__ import annotations

import functools
import hashlib
import json
import random
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from interventions.jsonl_rows import read_rows, write_rows

DATA_DIR = Path(__file__).resolve().parent / "data"
TEMPLATES_PATH = DATA_DIR / "turn_templates.yaml"
DATASET_PATH = DATA_DIR / "turns.jsonl"
DOMAINS = ("retail", "airline")
HELD_OUT_TEMPLATE_SHARE = 0.34
_SLOT = re.compile(r"\{([a-z_0-9]+)\}")


@dataclass
class Turn:
    """One labeled user turn."""

    id: str
    """Stable row id."""
    text: str
    """The user turn."""
    context: str
    """The agent turn before it ("" when it opens the conversation)."""
    label: str
    """"none" or an error type."""
    domain: str
    """retail or airline."""
    source_task: str
    """The tau2 task whose user grounds the slots."""
    template: str
    """Template id, or "task:reason" / "task:identity" for task-derived turns."""
    split: str
    """train or test (held out)."""


# ----- second person (task instructions) → first person (what the user says) -------------------

_PERSON = [
    (r"\byou are\b", "I am"), (r"\byou're\b", "I'm"), (r"\byou were\b", "I was"), (r"\byou've\b", "I've"),
    (r"\byou'd\b", "I'd"), (r"\byou'll\b", "I'll"), (r"\byourself\b", "myself"), (r"\byours\b", "mine"),
    (r"\byour\b", "my"), (r"\byou name\b", "my name"),
]
_OBJECT_BEFORE = re.compile(r"\b(to|for|with|at|from|give|gives|tell|tells|told|ask|asks|asked|let|lets|help|helps|send|sends|offer|offers|call|calls|by|than|about|of)\s+you\b", re.I)
_SKIP = re.compile(r"\bagent\b|^if\b|\bmake sure\b|\bdo not want to (reveal|mention)|\bdon't want to (reveal|mention)|\(|\bsay\b", re.I)


def _keep_replacement(replacement: str, match: re.Match[str]) -> str:
    return _keep_case(match.group(0), replacement)


def to_first_person(text: str) -> str:
    """Rewrite a task sentence from "you" (instructions to the simulated user) to "I"."""
    out = _OBJECT_BEFORE.sub(lambda m: f"{m.group(1)} me", text)
    for pattern, repl in _PERSON:
        out = re.sub(pattern, functools.partial(_keep_replacement, repl), out, flags=re.I)
    out = re.sub(r"\byou\b", lambda m: _keep_case(m.group(0), "I"), out, flags=re.I)
    out = re.sub(r"\bI am name is\b", "my name is", out)
    return " ".join(out.split())


def _keep_case(found: str, repl: str) -> str:
    return repl[0].upper() + repl[1:] if found[:1].isupper() else repl if repl.startswith("I") else repl.lower()


def _sentences(text: str) -> list[str]:
    parts = re.split(r"(?<=[.!?])\s+|\n+", text.strip())
    return [p.strip() for p in parts if len(p.strip()) > 3]


def request_sentences(reason_for_call: str) -> list[str]:
    """The first-person sentences of a reason_for_call that a user would say (no meta-instructions)."""
    return [to_first_person(s) for s in _sentences(reason_for_call) if not _SKIP.search(s)]


# ----- grounding a task in its user's records -------------------------------------------------


def task_user(task: dict[str, Any], db: dict[str, Any]) -> str | None:
    """The id of the DB user a task is about (from its actions, its instructions' user id, or name and zip)."""
    users = db["users"]
    for action in (task.get("evaluation_criteria") or {}).get("actions") or []:
        uid = (action.get("arguments") or {}).get("user_id")
        if uid in users:
            return str(uid)
    instr = task["user_scenario"]["instructions"]
    text = " ".join(str(instr.get(k) or "") for k in ("known_info", "reason_for_call")) if isinstance(instr, dict) else str(instr)
    for uid in re.findall(r"\b[a-z]+_[a-z]+_\d{4}\b", text):
        if uid in users:
            return uid
    zips = set(re.findall(r"\b\d{5}\b", text))
    named = [
        uid for uid, u in users.items()
        if f"{u['name']['first_name']} {u['name']['last_name']}" in text
    ]
    exact = [uid for uid in named if users[uid].get("address", {}).get("zip") in zips]
    return (exact or named or [None])[0]


def _payment_phrase(method: dict[str, Any]) -> str:
    source = method.get("source")
    if source == "credit_card":
        return f"my {method.get('brand', '')} credit card ending in {method.get('last_four', '')}".replace("  ", " ")
    return {"gift_card": "my gift card", "paypal": "PayPal", "certificate": "travel certificate"}.get(str(source), str(source))


def retail_slots(uid: str, db: dict[str, Any], rng: random.Random) -> dict[str, str]:
    """Template slots of a retail user, filled from their records (orders, items, payment methods)."""
    user = db["users"][uid]
    orders = [o for o in user.get("orders", []) if o in db["orders"]] or rng.sample(sorted(db["orders"]), 2)
    order_id = rng.choice(orders)
    others = [o for o in orders if o != order_id] or [rng.choice(sorted(db["orders"]))]
    items = db["orders"][order_id]["items"] or [rng.choice(db["orders"][others[0]]["items"])]
    item = rng.choice(items)
    other_items = [i for i in items if i["name"] != item["name"]] or db["orders"][others[0]]["items"] or items
    product = db["products"].get(item["product_id"], {})
    values = sorted({str(v) for var in product.get("variants", {}).values() for v in var.get("options", {}).values()})
    elsewhere = db["users"][rng.choice(sorted(db["users"]))]["address"]
    return {
        "name": f"{user['name']['first_name']} {user['name']['last_name']}",
        "first_name": user["name"]["first_name"],
        "zip": user["address"]["zip"],
        "email": user["email"],
        "user_id": uid,
        "order_id": order_id,
        "order_id2": rng.choice(others),
        "product": item["name"].lower(),
        "product2": rng.choice(other_items)["name"].lower(),
        "option_value": rng.choice(values) if values else "black",
        "street": elsewhere["address1"],
        "city": elsewhere["city"],
        "payment": _payment_phrase(rng.choice(list(user["payment_methods"].values()))),
    }


def airline_slots(uid: str, db: dict[str, Any], rng: random.Random) -> dict[str, str]:
    """Template slots of an airline user, filled from their records (reservations, flights, passengers)."""
    user = db["users"][uid]
    reservations = [r for r in user.get("reservations", []) if r in db["reservations"]] or rng.sample(sorted(db["reservations"]), 2)
    rid = rng.choice(reservations)
    others = [r for r in reservations if r != rid] or [rng.choice(sorted(db["reservations"]))]
    res = db["reservations"][rid]
    flight = rng.choice(res["flights"])
    month_day = _month_day(flight["date"])
    passengers = [f"{p['first_name']} {p['last_name']}" for p in user.get("saved_passengers", []) + res.get("passengers", [])]
    return {
        "name": f"{user['name']['first_name']} {user['name']['last_name']}",
        "first_name": user["name"]["first_name"],
        "user_id": uid,
        "reservation_id": rid,
        "reservation_id2": rng.choice(others),
        "origin": flight["origin"],
        "destination": flight["destination"],
        "date": rng.choice([month_day, flight["date"]]),
        "flight_number": flight["flight_number"],
        "passenger": rng.choice(passengers) if passengers else "Mia Chen",
        "payment": _payment_phrase(rng.choice(list(user["payment_methods"].values()))).removeprefix("my "),
        "city": user["address"]["city"],
    }


def _month_day(iso: str) -> str:
    months = ["January", "February", "March", "April", "May", "June", "July", "August", "September", "October", "November", "December"]
    y, m, d = iso.split("-")
    return f"{months[int(m) - 1]} {int(d)}"


# ----- building ----------------------------------------------------------------------------------

_PREFIXES = ["", "", "", "Hi. ", "Hello, ", "Hey there. ", "Good morning. ", "Hi there! "]
# An opening user turn usually answers the agent's greeting (tau2 conversations start with one), so
# half of the turns without a written context get one as their previous agent turn.
_GREETINGS = [
    "Hi! How can I help you today?",
    "Hello, how may I assist you?",
    "Welcome! What can I do for you today?",
    "Hi there, thanks for reaching out. How can I help?",
]
SUFFIXES = ["", "", "", " Thanks.", " Can you help?", " Thank you!", " Please."]
"""Endings appended to an opening request turn (blank most often)."""
_IDENTITY = {
    "retail": ["I'm {name}, zip code {zip}. ", "This is {name}. ", "My email is {email}. "],
    "airline": ["I'm {name}. ", "My user id is {user_id}. ", "This is {name}, user id {user_id}. "],
}


def load_templates(path: Path = TEMPLATES_PATH) -> dict[str, dict[str, list[dict[str, str]]]]:
    """domain ("any", retail, airline) → label → [{id, text, context}] with stable ids."""
    raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    out: dict[str, dict[str, list[dict[str, str]]]] = {}
    for domain, labels in raw.items():
        for label, entries in labels.items():
            rows = []
            for entry in entries:
                text, context = (entry, "") if isinstance(entry, str) else (entry["text"], entry.get("context", ""))
                digest = hashlib.sha1(f"{context}|{text}".encode()).hexdigest()[:10]
                rows.append({"id": f"{domain}.{label}.{digest}", "text": text, "context": context})
            out.setdefault(domain, {})[label] = rows
    return out


def held_out_templates(templates: dict[str, dict[str, list[dict[str, str]]]]) -> set[str]:
    """Template ids kept for the held-out split: about a third of each (domain, label) list, by hash."""
    held: set[str] = set()
    for labels in templates.values():
        for rows in labels.values():
            ranked = sorted(rows, key=lambda r: hashlib.sha1(r["id"].encode()).hexdigest())
            held.update(r["id"] for r in ranked[: max(2, round(len(rows) * HELD_OUT_TEMPLATE_SHARE))])
    return held


def _greeting(rng: random.Random) -> str:
    return rng.choice(_GREETINGS) if rng.random() < 0.5 else ""


def fill_slots(template: str, slots: dict[str, str]) -> str | None:
    """The template with its slots filled, or None when it needs a slot that slots lacks."""
    needed = set(_SLOT.findall(template))
    if not needed <= slots.keys():
        return None
    return template.format(**{k: slots[k] for k in needed})


def build_turns(data_root: Path, seed: int = 13, per_template: tuple[int, int] = (6, 4)) -> list[Turn]:
    """Every labeled turn: task-derived normal turns, then templated turns; per_template = (train, test) fills."""
    rng = random.Random(seed)
    templates = load_templates()
    held = held_out_templates(templates)
    rows: list[Turn] = []
    seen: set[tuple[str, str, str]] = set()

    def add(text: str, context: str, label: str, domain: str, task: str, template: str, split: str) -> bool:
        key = (domain, context, text)
        if key in seen:
            return False
        seen.add(key)
        rows.append(Turn(f"{domain}-{len(rows):05d}", text, context, label, domain, task, template, split))
        return True

    for domain in DOMAINS:
        folder = data_root / domain
        tasks = json.loads((folder / "tasks.json").read_text(encoding="utf-8"))
        db = json.loads((folder / "db.json").read_text(encoding="utf-8"))
        splits = json.loads((folder / "split_tasks.json").read_text(encoding="utf-8"))
        test_ids = set(splits.get("test", []))
        grounded = [(t, uid) for t in tasks if (uid := task_user(t, db)) is not None]
        slot_fn = retail_slots if domain == "retail" else airline_slots
        by_split = {s: [(t, uid) for t, uid in grounded if (t["id"] in test_ids) == (s == "test")] for s in ("train", "test")}

        for task, _uid in grounded:
            split = "test" if task["id"] in test_ids else "train"
            instr = task["user_scenario"]["instructions"]
            if not isinstance(instr, dict):
                continue
            sentences = request_sentences(str(instr.get("reason_for_call") or ""))
            if sentences:
                add(" ".join(sentences[:2]), _greeting(rng), "none", domain, task["id"], "task:reason", split)
                for sentence in sentences[:4] if len(sentences) > 1 else []:
                    add(sentence, _greeting(rng), "none", domain, task["id"], "task:reason", split)
            identity = request_sentences(str(instr.get("known_info") or ""))
            if identity:
                add(" ".join(identity), "Could you please share your details so I can look up your account?", "none", domain, task["id"], "task:identity", split)

        for source in ("any", domain):
            for label, entries in templates.get(source, {}).items():
                for entry in entries:
                    split = "test" if entry["id"] in held else "train"
                    pool = by_split[split]
                    wanted = per_template[1] if split == "test" else per_template[0]
                    made = 0
                    for task, uid in rng.sample(pool, len(pool)):
                        if made >= wanted:
                            break
                        slots = slot_fn(uid, db, rng)
                        text = fill_slots(entry["text"], slots)
                        context = fill_slots(entry["context"], slots) if entry["context"] else ""
                        if text is None or context is None:
                            raise ValueError(f"template {entry['id']} uses a slot the {domain} domain lacks: {entry}")
                        if not entry["context"]:
                            context = _greeting(rng)
                            prefix = rng.choice(_PREFIXES)
                            if rng.random() < 0.3:
                                prefix += fill_slots(rng.choice(_IDENTITY[domain]), slots) or ""
                            if prefix.endswith(", ") and not text.startswith("I "):
                                text = text[:1].lower() + text[1:]
                            text = prefix + text + rng.choice(SUFFIXES)
                        made += add(text, context, label, domain, task["id"], entry["id"], split)
    return rows


def write_turns(rows: list[Turn], path: Path = DATASET_PATH) -> None:
    """Write rows as JSON lines."""
    write_rows(rows, path)


def read_turns(path: Path = DATASET_PATH) -> Iterator[Turn]:
    """Read rows written by write_turns; a clear error names a bad line."""
    return read_rows(path, Turn, "a labeled turn")

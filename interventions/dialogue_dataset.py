"""The offline detector's labeled multi-turn dialogues, built from the tau2 retail and airline domains.

Each dialogue ends with a target user turn and may lead up to it with other turns; every user turn
is labeled ("none" or an error type), so one dialogue gives one training row per user turn, each
with the turns before it as context. Where the target sits (`position`):
- opening: the user's first message, after the agent's greeting or with nothing before it;
- after_identification: the user identified themselves (an identity-only turn) and the agent
  confirmed the account;
- after_read: the user asked a read-only question and the agent answered from a read tool's result;
- after_clarify: the user opened with a topic only and the agent asked a clarifying question.

Targets are the error and normal templates of interventions/data/turn_templates.yaml, requests
derived from the tasks, and the negatives a detector must leave alone: identity-only openers,
greetings, confirmations and closings (interventions/data/dialogue_templates.yaml).

Splits are disjoint by task and by phrasing: test dialogues use tau2's test tasks only, validation
dialogues a fifth of its train tasks (by hash), and every template list (targets and leads alike)
is cut by hash into test (30%), validation (20%) and train phrasings; a dialogue uses only its own
split's tasks and templates.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from interventions.jsonl_rows import read_rows, write_rows
from interventions.turn_dataset import (
    DATA_DIR,
    DOMAINS,
    SUFFIXES,
    airline_slots,
    fill_slots,
    load_templates,
    request_sentences,
    retail_slots,
    task_user,
)

LEAD_TEMPLATES_PATH = DATA_DIR / "dialogue_templates.yaml"
DIALOGUES_PATH = DATA_DIR / "dialogues.jsonl"
DOMAIN_TOOLS_PATH = DATA_DIR / "domain_tools.json"
"""Each domain's agent tools (OpenAI schemas, descriptions only), for the detector's "tools" block in training."""
SPLITS = ("train", "validation", "test")
SPLIT_SHARES = {"test": 0.3, "validation": 0.2}
"""Share of each template list held out per split (the rest trains)."""
POSITIONS = ("opening", "after_identification", "after_read", "after_clarify")
PER_TEMPLATE = {"train": 6, "validation": 4, "test": 4}
"""Dialogues made from each target template, per split."""


@dataclass
class LabeledDialogue:
    """A dialogue whose user turns are labeled; the last turn is the target."""

    id: str
    """Stable id."""
    domain: str
    """retail or airline."""
    source_task: str
    """The tau2 task whose user grounds the slots."""
    split: str
    """train, validation or test."""
    position: str
    """Where the target sits: opening, after_identification, after_read, after_clarify."""
    turns: list[dict[str, str]]
    """{role, text} per turn; user turns also carry label and kind (identity, greeting, request, …)."""
    templates: list[str] = field(default_factory=list)
    """Ids of every template used, leads included (for the disjointness check)."""

    @property
    def target(self) -> dict[str, str]:
        """The last user turn."""
        return self.turns[-1]

    @property
    def label(self) -> str:
        """The target's label."""
        return self.turns[-1]["label"]

    @property
    def is_control(self) -> bool:
        """No user turn has an error."""
        return all(t.get("label", "none") == "none" for t in self.turns if t["role"] == "user")


@dataclass
class ContextTurn:
    """One user turn of a dialogue, with the turns before it."""

    dialogue: str
    """The dialogue's id."""
    index: int
    """Index of the turn in the dialogue."""
    history: list[tuple[str, str]]
    """(role, text) of the turns before it."""
    text: str
    """The user turn."""
    label: str
    """"none" or an error type."""
    kind: str
    """error, request, identity, greeting, confirmation, read_request, topic_opener."""
    position: str
    """The dialogue's target position (leads share it)."""
    is_target: bool
    """Whether it is the dialogue's last turn."""


def context_turns(dialogues: list[LabeledDialogue]) -> list[ContextTurn]:
    """Every user turn of the dialogues as a row."""
    out = []
    for d in dialogues:
        for i, t in enumerate(d.turns):
            if t["role"] != "user":
                continue
            history = [(p["role"], p["text"]) for p in d.turns[:i]]
            out.append(ContextTurn(d.id, i, history, t["text"], t["label"], t["kind"], d.position, i == len(d.turns) - 1))
    return out


def _hash(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()


def _split_ids(ids: list[str]) -> dict[str, str]:
    """id → split: the first 30% by hash to test, the next 20% to validation, the rest to train."""
    ranked = sorted(ids, key=_hash)
    n_test = max(1, round(len(ranked) * SPLIT_SHARES["test"]))
    n_val = max(1, round(len(ranked) * SPLIT_SHARES["validation"]))
    return {i: "test" if k < n_test else "validation" if k < n_test + n_val else "train" for k, i in enumerate(ranked)}


def load_lead_templates(path: Path = LEAD_TEMPLATES_PATH) -> dict[str, dict[str, list[dict[str, str]]]]:
    """list name → domain (or "any") → [{id, text, context, split}]."""
    raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    out: dict[str, dict[str, list[dict[str, str]]]] = {}
    for name, body in raw.items():
        per_domain = body if isinstance(body, dict) else {"any": body}
        for domain, entries in per_domain.items():
            rows = []
            for entry in entries:
                text, context = (entry, "") if isinstance(entry, str) else (entry["text"], entry.get("context", ""))
                rows.append({"id": f"lead.{name}.{domain}.{_hash(context + '|' + text)[:10]}", "text": text, "context": context})
            splits = _split_ids([r["id"] for r in rows])
            for r in rows:
                r["split"] = splits[r["id"]]
            out.setdefault(name, {})[domain] = rows
    return out


def _extra_slots(domain: str, slots: dict[str, str], db: dict[str, Any], rng: random.Random) -> dict[str, str]:
    if domain == "retail":
        order = db["orders"].get(slots["order_id"], {})
        return slots | {"status": str(order.get("status", "pending"))}
    res = db["reservations"].get(slots["reservation_id"], {})
    return slots | {"cabin": str(res.get("cabin", "economy")).replace("_", " ")}


class _Builder:
    """Builds the dialogues of one domain and split."""

    def __init__(self, domain: str, split: str, tasks: list[tuple[dict[str, Any], str]], db: dict[str, Any],
                 leads: dict[str, dict[str, list[dict[str, str]]]], rng: random.Random) -> None:
        self.domain, self.split, self.tasks, self.db, self.rng = domain, split, tasks, db, rng
        self.leads = {
            name: [e for dom in (domain, "any") for e in per.get(dom, []) if e["split"] == split]
            for name, per in leads.items()
        }
        self.slot_fn = retail_slots if domain == "retail" else airline_slots

    def slots(self, uid: str) -> dict[str, str]:
        return _extra_slots(self.domain, self.slot_fn(uid, self.db, self.rng), self.db, self.rng)

    def pick(self, name: str, slots: dict[str, str], used: list[str]) -> dict[str, str]:
        entry = self.rng.choice(self.leads[name])
        used.append(entry["id"])
        text = fill_slots(entry["text"], slots)
        context = fill_slots(entry["context"], slots) if entry["context"] else ""
        if text is None or context is None:
            raise ValueError(f"lead template {entry['id']} uses a slot the {self.domain} domain lacks")
        return {"text": text, "context": context}

    def lead(self, position: str, slots: dict[str, str], used: list[str], last_agent: str = "") -> list[dict[str, str]]:
        """The turns before the target, ending with an agent turn (or empty at the opening)."""
        turns: list[dict[str, str]] = []
        greet = self.rng.random() < 0.7
        if greet:
            turns.append({"role": "assistant", "text": self.pick("agent_greeting", slots, used)["text"]})
        if position == "opening":
            if last_agent:
                turns.append({"role": "assistant", "text": last_agent})
            return turns
        if position == "after_clarify":
            opener = self.pick("topic_opener", slots, used)["text"]
            if self.rng.random() < 0.5:
                opener = self.pick("identity", slots, used)["text"] + " " + opener
            turns.append(_user(opener, "none", "topic_opener"))
            turns.append({"role": "assistant", "text": self.pick("agent_clarify", slots, used)["text"]})
            return turns
        if self.rng.random() < 0.4:
            turns.append(_user(self.pick("greeting", slots, used)["text"], "none", "greeting"))
            turns.append({"role": "assistant", "text": self.pick("agent_ask_identity", slots, used)["text"]})
        turns.append(_user(self.pick("identity", slots, used)["text"], "none", "identity"))
        turns.append({"role": "assistant", "text": self.pick("agent_identified", slots, used)["text"]})
        if position == "after_read":
            turns.append(_user(self.pick("read_request", slots, used)["text"], "none", "read_request"))
            turns.append({"role": "assistant", "text": self.pick("read_answer", slots, used)["text"]})
        if last_agent:
            turns[-1] = {"role": "assistant", "text": last_agent}
        return turns

    def opening_text(self, text: str, slots: dict[str, str], used: list[str]) -> str:
        """A target at the opening often greets and identifies in the same message."""
        parts = []
        if self.rng.random() < 0.5:
            parts.append(self.pick("identity", slots, used)["text"])
        elif self.rng.random() < 0.3:
            parts.append(self.pick("greeting", slots, used)["text"])
        return " ".join([*parts, text + self.rng.choice(SUFFIXES)])

    def dialogue(self, task: str, position: str, target: str, label: str, kind: str, slots: dict[str, str],
                 used: list[str], last_agent: str = "") -> LabeledDialogue:
        turns = self.lead(position, slots, used, last_agent)
        if position == "opening" and kind in ("error", "request"):
            target = self.opening_text(target, slots, used)
        turns.append(_user(target, label, kind))
        key = json.dumps(turns, sort_keys=True)
        return LabeledDialogue(f"{self.domain}-{self.split}-{_hash(key)[:12]}", self.domain, task, self.split, position, turns, used)


def _user(text: str, label: str, kind: str) -> dict[str, str]:
    return {"role": "user", "text": text, "label": label, "kind": kind}


def build_dialogues(data_root: Path, seed: int = 13) -> list[LabeledDialogue]:
    """Every labeled dialogue of both domains and all splits, in a stable order."""
    rng = random.Random(seed)
    targets = load_templates()
    target_split: dict[str, str] = {}
    for labels in targets.values():
        for rows in labels.values():
            target_split.update(_split_ids([r["id"] for r in rows]))
    leads = load_lead_templates()
    out: list[LabeledDialogue] = []
    seen: set[str] = set()

    def add(d: LabeledDialogue) -> None:
        if d.id not in seen:
            seen.add(d.id)
            out.append(d)

    for domain in DOMAINS:
        folder = data_root / domain
        tasks = json.loads((folder / "tasks.json").read_text(encoding="utf-8"))
        db = json.loads((folder / "db.json").read_text(encoding="utf-8"))
        test_ids = set(json.loads((folder / "split_tasks.json").read_text(encoding="utf-8")).get("test", []))
        grounded = [(t, uid) for t in tasks if (uid := task_user(t, db)) is not None]

        def split_of(task_id: str, test_ids: set[str] = test_ids, domain: str = domain) -> str:
            if task_id in test_ids:
                return "test"
            return "validation" if int(_hash(f"{domain}:{task_id}"), 16) % 5 == 0 else "train"

        for split in SPLITS:
            pool = [(t, uid) for t, uid in grounded if split_of(t["id"]) == split]
            b = _Builder(domain, split, pool, db, leads, rng)
            # Targets from the templates: errors and normal turns, at every position.
            for source in ("any", domain):
                for label, entries in targets.get(source, {}).items():
                    for entry in entries:
                        if target_split[entry["id"]] != split:
                            continue
                        for task, uid in rng.sample(pool, min(PER_TEMPLATE[split], len(pool))):
                            slots = b.slots(uid)
                            text = fill_slots(entry["text"], slots)
                            context = fill_slots(entry["context"], slots) if entry["context"] else ""
                            if text is None or context is None:
                                raise ValueError(f"template {entry['id']} uses a slot the {domain} domain lacks")
                            positions = POSITIONS if not context else ("opening", "after_identification", "after_read")
                            position = rng.choice(positions)
                            kind = "error" if label != "none" else "request"
                            add(b.dialogue(task["id"], position, text, label, kind, slots, [entry["id"]], context))
            # Per task: its own request, an identity-only opener, a greeting, a confirmation.
            for task, uid in pool:
                slots = b.slots(uid)
                instr = task["user_scenario"]["instructions"]
                reason = request_sentences(str(instr.get("reason_for_call") or "")) if isinstance(instr, dict) else []
                if reason:
                    add(b.dialogue(task["id"], rng.choice(POSITIONS), " ".join(reason[:2]), "none", "request", slots, [f"task:{task['id']}"]))
                used: list[str] = []
                identity = b.pick("identity", slots, used)["text"]
                asked = b.pick("agent_ask_identity", slots, used)["text"] if rng.random() < 0.4 else ""
                add(b.dialogue(task["id"], "opening", identity, "none", "identity", slots, used, asked))
                used = []
                add(b.dialogue(task["id"], "opening", b.pick("greeting", slots, used)["text"], "none", "greeting", slots, used))
                used = []
                confirm = b.pick("confirmation", slots, used)
                add(b.dialogue(task["id"], rng.choice(POSITIONS[1:3]), confirm["text"], "none", "confirmation", slots, used, confirm["context"]))
    return out


def build_domain_tools(data_root: Path) -> dict[str, list[dict[str, Any]]]:
    """domain → its agent tools from tau2's tools.json as OpenAI schemas, name and description only
    (what the detector compares requests with; at run time it reads the agent's own schemas)."""
    out = {}
    for domain in DOMAINS:
        raw = json.loads((data_root / domain / "tools.json").read_text(encoding="utf-8"))
        out[domain] = [{"type": "function", "function": {"name": t["name"], "description": t["description"]}}
                       for t in raw["agent_tools"]]
    return out


def write_domain_tools(tools: dict[str, list[dict[str, Any]]], path: Path = DOMAIN_TOOLS_PATH) -> None:
    """Write build_domain_tools' result as JSON."""
    path.write_text(json.dumps(tools, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


def read_domain_tools(path: Path = DOMAIN_TOOLS_PATH) -> dict[str, list[dict[str, Any]]]:
    """domain → agent tool schemas written by write_domain_tools."""
    data: dict[str, list[dict[str, Any]]] = json.loads(path.read_text(encoding="utf-8"))
    return data


def write_dialogues(rows: list[LabeledDialogue], path: Path = DIALOGUES_PATH) -> None:
    """Write dialogues as JSON lines."""
    write_rows(rows, path)


def read_dialogues(path: Path = DIALOGUES_PATH) -> Iterator[LabeledDialogue]:
    """Read dialogues written by write_dialogues; a clear error names a bad line."""
    return read_rows(path, LabeledDialogue, "a labeled dialogue")

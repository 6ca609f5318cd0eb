"""Error turns built from a task's own data: which ids, items and places the task involves, and
templates per error type and domain that turn them into an ambiguous or unsupported request."""

from __future__ import annotations

import json
import random
import re
import string
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from scenarios.scenario import Scenario, ScriptedUserConfig
from scenarios.tau2_tasks import StructuredInstructions

_TOKEN = re.compile(r"#?[A-Za-z0-9_]+")
_OWNED = {"orders": "orders", "reservations": "reservations", "tasks": "tasks"}
"""User-record list fields that hold the ids of the user's own records, by table."""


@dataclass
class ErrorContext:
    """What a task is about, as the error templates need it."""

    domain: str
    """Domain name."""
    user_id: str | None = None
    """The task's user, when it has one."""
    mentioned: dict[str, list[str]] = field(default_factory=dict)
    """Table → ids the task mentions (instructions, gold actions, initial state), in order."""
    owned: dict[str, list[str]] = field(default_factory=dict)
    """Table → ids of the user's own records (orders, reservations, tasks)."""
    item_names: list[str] = field(default_factory=list)
    """Names of the products in the task's orders."""
    city: str | None = None
    """The user's city."""
    airports: list[str] = field(default_factory=list)
    """Airports of the task's reservations."""
    operation: str | None = None
    """The first gold action that changes state (what the user came for)."""
    title: str | None = None
    """A task title from the gold actions (mock)."""

    def first(self, table: str) -> str | None:
        """The task's main record of a table: mentioned first, else the user's first."""
        ids = self.mentioned.get(table) or self.owned.get(table) or []
        return ids[0] if ids else None

    def values(self) -> dict[str, str]:
        """Placeholder values available to templates."""
        out: dict[str, str] = {}
        for key, table in (("order_id", "orders"), ("reservation_id", "reservations"), ("task_id", "tasks")):
            value = self.first(table)
            if value:
                out[key] = value
            if len(self.owned.get(table, [])) >= 2:
                out[f"many_{table}"] = "yes"
        if self.item_names:
            out["item"] = self.item_names[0].lower()
        if self.city:
            out["city"] = self.city
        if self.airports:
            out["airport"] = self.airports[-1]
        if self.user_id:
            out["user_id"] = self.user_id
        if self.title:
            out["title"] = self.title
        out["op"] = _OPERATIONS.get(self.operation or "", "make a change to")
        return out


def build_context(scenario: Scenario, db: Mapping[str, Any] | None, writes: Iterable[str] = ()) -> ErrorContext:
    """Collect the ids, items and places a scenario involves from its text, gold actions and DB.

    writes names the domain's state-changing tools, to find what the user came for.
    """
    db = db or {}
    ctx = ErrorContext(domain=scenario.domain)
    texts = [_user_text(scenario)]
    actions = scenario.evaluation.actions if scenario.evaluation and scenario.evaluation.actions else []
    texts += [json.dumps(a.arguments, ensure_ascii=False) for a in actions]
    if scenario.initial_state is not None:
        texts.append(scenario.initial_state.model_dump_json())
    tokens = [t for text in texts for t in _TOKEN.findall(text)]
    for table, records in db.items():
        if isinstance(records, Mapping):
            found = _unique(t for t in tokens if t in records)
            if found:
                ctx.mentioned[table] = found
    users = _table(db, "users")
    action_users = [a.arguments.get("user_id") for a in actions if isinstance(a.arguments.get("user_id"), str)]
    ctx.user_id = next((u for u in [*action_users, *ctx.mentioned.get("users", [])] if u in users), None)
    user = users.get(ctx.user_id) if ctx.user_id else None
    if isinstance(user, Mapping):
        for table, key in _OWNED.items():
            if isinstance(user.get(key), list):
                ctx.owned[table] = [str(x) for x in user[key]]
        address = user.get("address")
        if isinstance(address, Mapping) and isinstance(address.get("city"), str):
            ctx.city = address["city"]
    orders = _table(db, "orders")
    for oid in ctx.mentioned.get("orders", []) + ctx.owned.get("orders", []):
        for item in orders.get(oid, {}).get("items", []):
            if isinstance(item, Mapping) and isinstance(item.get("name"), str):
                ctx.item_names.append(item["name"])
    ctx.item_names = _unique(ctx.item_names)
    reservations = _table(db, "reservations")
    for rid in ctx.mentioned.get("reservations", []) + ctx.owned.get("reservations", []):
        r = reservations.get(rid, {})
        ctx.airports += [r[k] for k in ("origin", "destination") if isinstance(r.get(k), str)]
    ctx.airports = _unique(ctx.airports)
    write_names = set(writes)
    ctx.operation = next((a.name for a in actions if a.name in write_names), None)
    ctx.title = next((a.arguments["title"] for a in actions if isinstance(a.arguments.get("title"), str)), None)
    return ctx


# ----- templates --------------------------------------------------------------------------

_OPERATIONS = {
    "cancel_pending_order": "cancel",
    "return_delivered_order_items": "return the items from",
    "exchange_delivered_order_items": "exchange an item in",
    "modify_pending_order_items": "change an item in",
    "modify_pending_order_address": "change the shipping address of",
    "modify_pending_order_payment": "change the payment method of",
    "cancel_reservation": "cancel",
    "update_reservation_flights": "change the flights on",
    "update_reservation_baggages": "add bags to",
    "update_reservation_passengers": "change the passengers on",
    "update_task_status": "update",
}

# (domain or "*", template[, extra requirement]); a template is eligible when every placeholder it
# uses has a value and its extra requirement (e.g. the user owns several orders) holds.
TEMPLATES: dict[str, list[tuple[str, ...]]] = {
    "vague_reference": [
        ("retail", "I need to {op} my order. The one from a while back, you know the one.", "many_orders"),
        ("airline", "Can you {op} my reservation? The one for that trip I have coming up.", "many_reservations"),
        ("mock", "Please mark that task of mine as completed, the one we talked about.", "many_tasks"),
        ("*", "Can you do the same thing for the other one too?"),
    ],
    "ambiguous_interpretation": [
        ("retail", "Can you switch the {item} in order {order_id} to the bigger one?"),
        ("retail", "Please update order {order_id} to the better option."),
        ("airline", "Please move reservation {reservation_id} to the later flight."),
        ("mock", "Please update task {task_id} so it reflects where things stand."),
        ("*", "Can you change it to the better option?"),
    ],
    "contradiction": [
        ("retail", "Please cancel order {order_id}, but make sure it still ships to me this week."),
        ("airline", "Cancel reservation {reservation_id}, but keep all of its flights booked for me."),
        ("mock", "Mark task {task_id} as completed, and leave it pending."),
        ("*", "Please go ahead with the change, but do not change anything."),
    ],
    "unsupported_operation": [
        ("retail", "Could you add the {item} to a wishlist so I can buy it again later?"),
        ("retail", "Can you set up a monthly subscription for order {order_id}?"),
        ("airline", "Can you pick a window seat for me on reservation {reservation_id}?"),
        ("mock", "Please delete task {task_id}, I do not need it anymore."),
        ("*", "Could you set up a recurring reminder for this every Monday?"),
    ],
    "unsupported_parameter": [
        ("retail", "Please cancel order {order_id}; the reason is that I found it cheaper somewhere else."),
        ("airline", "Please change the cabin of reservation {reservation_id} to first class."),
        ("mock", "Set the status of task {task_id} to 'in progress'."),
        ("*", "Please do it with overnight priority handling."),
    ],
    "unsupported_domain": [
        ("retail", "While I have you, can you book me a flight to {city} next week?"),
        ("airline", "Also, can you reserve a hotel room near {airport} for my trip?"),
        ("mock", "Can you also book me a table for two at a restaurant tonight?"),
        ("*", "Can you also check the weather forecast for tomorrow?"),
    ],
}
"""Error-turn templates by error type and domain."""


def template_turn(error_type: str, ctx: ErrorContext, rng: random.Random) -> tuple[str, str]:
    """(text, template) for an error turn: a domain template when the task's data fills one, else
    the generic one."""
    values = ctx.values()
    eligible = [t for d, t, *req in TEMPLATES[error_type] if d == ctx.domain and _fillable(t, req, values)]
    if not eligible:
        eligible = [t for d, t, *_ in TEMPLATES[error_type] if d == "*"]
    template = rng.choice(eligible)
    return template.format_map(values), template


def _fillable(template: str, extra: list[str], values: Mapping[str, str]) -> bool:
    names = [f for _, f, _, _ in string.Formatter().parse(template) if f]
    return all(n in values for n in [*names, *extra])


def _user_text(scenario: Scenario) -> str:
    user = scenario.user
    if isinstance(user, ScriptedUserConfig):
        return " ".join(t.say for t in user.turns)
    instructions = scenario.simulated_user().instructions
    if isinstance(instructions, StructuredInstructions):
        return " ".join(str(v) for v in instructions.model_dump().values() if v)
    return str(instructions)


def _table(db: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    """A table of the database ({} when it has none, or holds something else under that name)."""
    table = db.get(name)
    return table if isinstance(table, Mapping) else {}


def _unique(items: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(items))

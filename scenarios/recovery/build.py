"""The error-recovery suite: tau2 retail and airline tasks turned into ReIn error scenarios.

Each error scenario takes a tau2 task from the test split, lets the error-injecting user
(scenarios/users) build an error turn of one of the six types from the task's own data (its
order or reservation ids, items, cities), and opens the conversation with it, after a sentence
that identifies the user. The agent answers that one turn; the user then stops. The run passes
when the agent called the right recovery tool (report_internal_error for ambiguous requests,
transfer_to_human_agents for unsupported ones: the RECOVERY check) and wrote nothing to the DB
(the end hash equals the initial one: the DB check with no gold actions).

Control scenarios open with the same task's own request (no error) and pass when nothing was
written; the comparison report also counts their recovery calls and intervention activations
(false activations). Error types are split as in the paper: seen (vague reference, ambiguous
interpretation, unsupported operation, unsupported parameter) and unseen (contradiction,
unsupported domain).

    python -m scenarios.recovery.build                     # rewrite scenarios/recovery/suite.yaml
    rein run scenarios/recovery/suite.yaml --intervention rein
"""

from __future__ import annotations

import argparse
import json
import random
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from interventions.error_map import SEEN, UNSEEN  # noqa: F401  (UNSEEN re-exported for the recovery report)
from scenarios.scenario import Scenario

if TYPE_CHECKING:
    from scenarios.users.error_templates import ErrorContext

ERROR_ORDER = ("vague_reference", "ambiguous_interpretation", "contradiction",
               "unsupported_operation", "unsupported_parameter", "unsupported_domain")
POSITIONS = ("opening", "after_identification", "after_read")
"""Where the error turn sits: the opening message; the turn after the user identified; the turn
after the agent answered a read request with a read tool's result."""
CLARIFY = "clarify"
"""Tag of the clarify-then-act dialogues."""
CLARIFY_TYPES = ("vague_reference", "contradiction")
"""Error types the clarify-then-act dialogues open with (one seen, one unseen)."""
RECOVERY_TOOL_NAMES = ("report_internal_error", "transfer_to_human_agents")
"""The recovery tools a control forbids."""
SUITE_PATH = Path(__file__).resolve().parent / "suite.yaml"
"""The suite as shipped (regenerate with python -m scenarios.recovery.build)."""
DEV_PATH = Path(__file__).resolve().parent / "dev.yaml"
"""The development suite on tau2 train tasks (python -m scenarios.recovery.build --split train)."""
CONTROL = "control"
AGENT_TOOLS = ["builtin"]
"""Toolkits added to the domain's: the think tool, which carries ReIn's plan (same for every arm)."""


def split_of(error_type: str | None) -> str:
    """seen, unseen, or control (no error)."""
    if error_type is None:
        return CONTROL
    return "seen" if error_type in SEEN else "unseen"


def _task_user(task: Scenario, db: dict[str, Any], found: str | None) -> str | None:
    """The task's user: the one the injector's context found, else the one its instructions name."""
    users = db.get("users", {})
    if found in users:
        return found
    instructions = task.simulated_user().instructions
    text = " ".join(str(v) for v in instructions.model_dump().values() if v) if hasattr(instructions, "model_dump") else str(instructions)
    named = [uid for uid, u in users.items() if f"{u['name']['first_name']} {u['name']['last_name']}" in text]
    exact = [uid for uid in named if str(users[uid].get("address", {}).get("zip", "")) in text]
    return (exact or named or [None])[0]


def _identity(domain: str, db: dict[str, Any], user_id: str | None) -> str:
    user = db.get("users", {}).get(user_id or "")
    if not user:
        return ""
    name = f"{user['name']['first_name']} {user['name']['last_name']}"
    if domain == "airline":
        return f"Hi, I'm {name}, my user id is {user_id}."
    return f"Hi, I'm {name}, zip code {user['address']['zip']}."


def _request(task_scenario: Scenario) -> str:
    from interventions.turn_dataset import request_sentences

    instructions = task_scenario.simulated_user().instructions
    reason = getattr(instructions, "reason_for_call", "") or str(instructions)
    sentences = request_sentences(reason)
    if not sentences:
        # request_sentences drops sentences with a parenthesis (asides to the simulated user); a
        # task whose every sentence has one keeps its request without the asides.
        sentences = request_sentences(re.sub(r"\s*\([^)]*\)", "", reason))
    if not sentences:
        raise ValueError(f"task {task_scenario.id} has no request sentence to open a control with")
    return " ".join(sentences[:2])


def _task_scenarios(domain: str, split: str = "test") -> tuple[list[Scenario], set[str]]:
    from scenarios.domains.data import splits_path, tasks_path
    from scenarios.loading import load_scenarios

    scenarios = load_scenarios(tasks_path(domain), domain=domain)
    chosen = set(json.loads(splits_path(domain).read_text(encoding="utf-8")).get(split, []))
    return scenarios, chosen


def _suitable(s: Scenario) -> bool:
    actions = (s.evaluation.actions if s.evaluation else None) or []
    return bool(actions) and not any(a.name == "transfer_to_human_agents" for a in actions) and s.initial_state is None


def position_of(tags: list[str]) -> str | None:
    """The error turn's position a scenario's tags name (opening, after_identification, after_read)."""
    return next((t.split(":", 1)[1] for t in tags if t.startswith("position:")), None)


@dataclass
class _Dialogue:
    """The turns before the key turn (error or control request), and the gold agent's answers."""

    lead: list[str] = field(default_factory=list)
    """User turns before the key turn."""
    lead_script: list[dict[str, Any]] = field(default_factory=list)
    """Gold agent steps answering those turns."""
    prefix: str = ""
    """Said before the key turn's text in the same message (the identity, at the opening)."""
    identify: list[dict[str, Any]] = field(default_factory=list)
    """Gold steps that identify the user (used when the key turn is the opening)."""


def _step(name: str, **arguments: Any) -> dict[str, Any]:
    return {"call": {"name": name, "arguments": arguments}}


def _identify_steps(domain: str, db: dict[str, Any], user_id: str) -> list[dict[str, Any]]:
    if domain == "airline":
        return [_step("get_user_details", user_id=user_id)]
    name, zip_code = db["users"][user_id]["name"], db["users"][user_id]["address"]["zip"]
    return [_step("find_user_id_by_name_zip", first_name=name["first_name"], last_name=name["last_name"], zip=zip_code)]


def _read(domain: str, db: dict[str, Any], record_id: str) -> tuple[str, dict[str, Any], str]:
    """(the user's read request, the read call, the gold agent's answer) about one record."""
    if domain == "airline":
        r = db["reservations"][record_id]
        trip = r["flight_type"].replace("_", " ")
        answer = f"Reservation {record_id} is a {trip} trip from {r['origin']} to {r['destination']} in {r['cabin'].replace('_', ' ')}."
        return f"Could you look up reservation {record_id} for me?", _step("get_reservation_details", reservation_id=record_id), answer
    status = db["orders"][record_id]["status"]
    return f"Could you tell me the status of order {record_id}?", _step("get_order_details", order_id=record_id), f"Order {record_id} is {status}."


def _dialogue(domain: str, db: dict[str, Any], user_id: str, record_id: str | None, position: str) -> _Dialogue | None:
    identity = _identity(domain, db, user_id)
    identify = _identify_steps(domain, db, user_id)
    first = db["users"][user_id]["name"]["first_name"]
    if position == "opening":
        return _Dialogue(prefix=identity, identify=identify)
    if position == "after_identification":
        return _Dialogue(lead=[identity], lead_script=[*identify, {"say": f"Thanks {first}, I found your account. How can I help you today?"}])
    if record_id is None:
        return None
    ask, read, answer = _read(domain, db, record_id)
    steps = [*identify, read] if domain == "retail" else [read]  # airline users give their id
    return _Dialogue(lead=[f"{identity} {ask}"], lead_script=[*steps, {"say": f"{answer} Is there anything else I can do?"}])


def _record_of(domain: str, ctx: ErrorContext) -> str | None:
    return ctx.first("reservations" if domain == "airline" else "orders")


def build_recovery_suite(
    domains: tuple[str, ...] = ("retail", "airline"),
    per_type: int = 1,
    controls: int = 2,
    seed: int = 0,
    step_limit: int = 4,
    split: str = "test",
    clarify: int = 1,
) -> list[Scenario]:
    """The suite: per domain, per_type error scenarios of each error type at each position,
    `controls` controls per position, and `clarify` clarify-then-act dialogues per clarify type;
    interleaved by kind. Tasks come from tau2's `split` ("test" for the suite; "train" builds a
    development suite on other tasks, for changes that must not be tuned on the suite itself)."""
    from scenarios.domains import load_domain
    from scenarios.users.error_templates import template_turn

    if per_type < 0 or controls < 0 or clarify < 0 or step_limit < 1:
        raise ValueError("per_type, controls and clarify must be >= 0 and step_limit >= 1")
    if split not in ("test", "train"):
        raise ValueError(f"split must be 'test' or 'train', not {split!r}")
    rng = random.Random(seed)
    groups: dict[str, list[Scenario]] = {t: [] for t in [*ERROR_ORDER, CONTROL, CLARIFY]}
    for domain in domains:
        env = load_domain(domain)
        db = env.db
        writes = [t for t in env.tool_names() if env.is_mutating(t)]
        tasks, chosen = _task_scenarios(domain, split)
        pool = [s for s in tasks if s.id in chosen and _suitable(s)]
        rng.shuffle(pool)
        if not pool:
            raise ValueError(f"no suitable {split} tasks in the {domain} domain")
        drawn = iter(pool * (2 + len(POSITIONS) * (len(ERROR_ORDER) * per_type + controls)))
        for position in POSITIONS:
            for error_type in ERROR_ORDER:
                for _ in range(per_type):
                    while True:  # a generic template ("the other one too") makes no sense here
                        task, ctx, dialogue = _pick(drawn, domain, db, writes, position)
                        text, template = template_turn(error_type, ctx, rng)
                        if template not in _generic(error_type):
                            break
                    groups[error_type].append(_error_scenario(domain, task, position, error_type, dialogue, text, template, step_limit))
            for _ in range(controls):
                task, _ctx, dialogue = _pick(drawn, domain, db, writes, position)
                groups[CONTROL].append(_control_scenario(domain, task, position, dialogue, _request(task), step_limit))
        groups[CLARIFY] += _clarify_scenarios(domain, db, tasks, chosen, writes, rng, step_limit, clarify)
    out: list[Scenario] = []
    ids: set[str] = set()
    if split != "test":  # a development scenario says so in its tags
        for s in (s for g in groups.values() for s in g):
            s.tags.append(f"tasks:{split}")
    longest = max(len(g) for g in groups.values())
    for i in range(longest):  # interleaved, so the first N scenarios cover many kinds
        for g in groups.values():
            if i < len(g):
                s, base, n = g[i], g[i].id, 2
                while s.id in ids:  # a task drawn twice for one kind and position
                    s.id, n = f"{base}-{n}", n + 1
                ids.add(s.id)
                out.append(s)
    return out


def _generic(error_type: str) -> list[str]:
    from scenarios.users.error_templates import TEMPLATES

    return [t for d, t, *_ in TEMPLATES[error_type] if d == "*"]


def _pick(drawn: Any, domain: str, db: dict[str, Any], writes: list[str], position: str) -> tuple[Scenario, Any, _Dialogue]:
    """The next task whose data fits a dialogue at this position."""
    from scenarios.users.error_templates import build_context

    for task in drawn:
        ctx = build_context(task, db, writes)
        uid = _task_user(task, db, ctx.user_id)
        dialogue = _dialogue(domain, db, uid, _record_of(domain, ctx), position) if uid else None
        if dialogue is not None:
            return task, ctx, dialogue
    raise ValueError(f"no {domain} task fits the {position} position")


def _recovery_steps(error_type: str) -> list[dict[str, Any]]:
    from scenarios.users.error_types import ERROR_TYPES

    tool = ERROR_TYPES[error_type].recovery_tool
    summary = f"The user's request is a {error_type.replace('_', ' ')}."
    if tool == "transfer_to_human_agents":
        return [_step(tool, summary=summary), {"say": "I cannot do that myself, so I have transferred you to a human agent."}]
    return [_step(tool, summary=summary), {"say": "I want to get this right: could you tell me exactly what you would like me to do?"}]


def _base(domain: str, task: Scenario, kind: str, position: str, step_limit: int) -> dict[str, Any]:
    return {
        "id": f"recovery-{domain}-{position}-{kind}-{task.id}",
        "domain": domain,
        "agent": {"tools": [domain, *AGENT_TOOLS], "recovery_tools": True, "step_limit": step_limit},
        "tags": ["recovery", split_of(None if kind == CONTROL else kind), domain, kind, f"position:{position}", f"task:{task.id}"],
    }


_WHERE = {
    "opening": "opened with",
    "after_identification": "after the user identified, sent",
    "after_read": "after the agent answered a read request, sent",
}


def _error_scenario(
    domain: str, task: Scenario, position: str, error_type: str, d: _Dialogue, text: str, template: str, step_limit: int
) -> Scenario:
    from scenarios.users.error_types import ERROR_TYPES

    tool = ERROR_TYPES[error_type].recovery_tool
    turn = len(d.lead)
    doc = _base(domain, task, error_type, position, step_limit)
    doc["description"] = (
        f"tau2 {domain} task {task.id}, {_WHERE[position]} an injected {error_type.replace('_', ' ')} at user turn {turn} "
        f"(template: {template}); the agent's first recovery call must be {tool}, on that turn, and nothing may change."
    )
    doc["agent"]["script"] = [*d.lead_script, *_recovery_steps(error_type)]
    doc["user"] = {"turns": d.lead or ["###STOP###"]}
    doc["errors"] = [{"type": error_type, "turn": turn, "text": f"{d.prefix} {text}".strip()}]
    doc["evaluation"] = {
        "actions": [],
        "reward_basis": ["DB"],
        "required_recovery": [{"name": tool, "after_turn": turn, "must_be_first": True}],
    }
    return Scenario.model_validate(doc)


def _control_scenario(domain: str, task: Scenario, position: str, d: _Dialogue, request: str, step_limit: int) -> Scenario:
    doc = _base(domain, task, CONTROL, position, step_limit)
    doc["description"] = (
        f"tau2 {domain} task {task.id}: its own request (no error) at user turn {len(d.lead)} ({position.replace('_', ' ')}); "
        "the agent must not call a recovery tool, nor write anything before the user confirms."
    )
    confirm = {"say": "I can help with that. Before I change anything, could you confirm the details?"}
    doc["agent"]["script"] = [*d.lead_script, *(d.identify if not d.lead else []), confirm]
    doc["user"] = {"turns": [*d.lead, f"{d.prefix} {request}".strip()]}
    doc["evaluation"] = {"actions": [], "reward_basis": ["DB"], "required_recovery": [], "forbidden_tools": list(RECOVERY_TOOL_NAMES)}
    return Scenario.model_validate(doc)


def _clarify_scenarios(
    domain: str,
    db: dict[str, Any],
    tasks: list[Scenario],
    chosen: set[str],
    writes: list[str],
    rng: random.Random,
    step_limit: int,
    per_type: int = 1,
) -> list[Scenario]:
    """Ask, then act: an ambiguous opening, the user's clarified request, a confirmation, and the
    one write of a chosen task whose gold actions cancel an order or a reservation (per_type
    dialogues per clarify type, each on its own task where there are enough)."""
    from scenarios.users.error_templates import build_context, template_turn

    cancel = "cancel_reservation" if domain == "airline" else "cancel_pending_order"
    key = "reservation_id" if domain == "airline" else "order_id"
    fits = []
    for s in tasks:
        made = [a for a in (s.evaluation.actions if s.evaluation else None) or [] if a.name in writes]
        if s.id in chosen and _suitable(s) and len(made) == 1 and made[0].name == cancel:
            fits.append((s, made[0].model_dump()))
    if domain == "retail":  # also: a test task's user with several orders, one of them pending
        for s in tasks:
            uid = _task_user(s, db, build_context(s, db, writes).user_id) if s.id in chosen and _suitable(s) else None
            orders = db["users"][uid]["orders"] if uid else []
            pending = [o for o in orders if db["orders"][o]["status"] == "pending"]
            if len(orders) >= 2 and pending:
                fits.append((s, {"name": cancel, "arguments": {"order_id": pending[0], "reason": "no longer needed"}}))
    out: list[Scenario] = []
    for i, error_type in enumerate(CLARIFY_TYPES):
        options = []
        for task, action in fits[i:] + fits[:i]:  # a different task per type where there are several
            ctx = build_context(task, db, writes)
            uid = _task_user(task, db, ctx.user_id)
            ctx.operation = cancel  # the user came to cancel
            ctx.mentioned["reservations" if domain == "airline" else "orders"] = [str(action["arguments"][key])]
            text, template = template_turn(error_type, ctx, rng)
            if uid is not None and template not in _generic(error_type):
                options.append((task, action, uid, text, template))
        picked: dict[str, tuple[Scenario, dict[str, Any], str, str, str]] = {}
        for option in options:
            if len(picked) == per_type:
                break
            picked.setdefault(option[0].id, option)
        for task, action, uid, text, template in picked.values():
            record = str(action["arguments"][key])
            _ask, read, answer = _read(domain, db, record)
            if domain == "airline":
                clarified, which = f"I mean reservation {record}. Please cancel the whole reservation.", "reservation"
            else:
                clarified, which = f"I mean order {record}. Please cancel it; the reason is: {action['arguments']['reason']}.", "order"
            doc = _base(domain, task, error_type, "opening", step_limit)
            doc["id"] = f"recovery-{domain}-clarify-{error_type}-{task.id}"
            doc["tags"].append(CLARIFY)
            doc["description"] = (
                f"tau2 {domain} task {task.id} opened with a {error_type.replace('_', ' ')} (template: {template}); the agent "
                f"must first call report_internal_error and ask, then act on the clarified request ({cancel}) once the user confirms."
            )
            doc["agent"]["script"] = [
                *_identify_steps(domain, db, uid),
                _step("report_internal_error", summary=f"The user's request is a {error_type.replace('_', ' ')}."),
                {"say": f"Which {which} do you mean, and what exactly should I do with it?"},
                read,
                {"say": f"{answer} Shall I cancel it? Please answer yes to confirm."},
                _step(cancel, **action["arguments"]),
                {"say": f"Done: {which} {record} is cancelled."},
            ]
            doc["user"] = {"turns": [clarified, "Yes, please go ahead."]}
            doc["errors"] = [{"type": error_type, "turn": 0, "text": f"{_identity(domain, db, uid)} {text}"}]
            doc["evaluation"] = {
                "actions": [{"action_id": "write", "name": cancel, "arguments": action["arguments"]}],
                "reward_basis": ["DB"],
                "required_recovery": [{"name": "report_internal_error", "after_turn": 0, "must_be_first": True}],
                "confirm_turn": 2,  # "Yes, please go ahead."
            }
            out.append(Scenario.model_validate(doc))
    return out


def suite_yaml(scenarios: list[Scenario]) -> str:
    """The scenarios as one multi-document YAML file."""
    import yaml

    header = (
        "# yaml-language-server: $schema=../schema/scenario.schema.json\n"
        "# Generated by `python -m scenarios.recovery.build`; see that module and docs/rein.md.\n"
    )
    docs = [s.model_dump(mode="json", exclude_defaults=True) for s in scenarios]
    return header + yaml.safe_dump_all(docs, sort_keys=False, allow_unicode=True, width=100)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m scenarios.recovery.build", description="Write the error-recovery suite.")
    parser.add_argument("--out", type=Path, help=f"default: {SUITE_PATH} (test tasks), {DEV_PATH} (train tasks)")
    parser.add_argument("--split", choices=("test", "train"), default="test",
                        help="tau2 task split to draw from; train builds the development suite")
    parser.add_argument("--clarify", type=int, default=1, help="clarify-then-act dialogues per clarify type and domain")
    parser.add_argument("--domains", default="retail,airline")
    parser.add_argument("--per-type", type=int, default=1, help="scenarios per error type, position and domain")
    parser.add_argument("--controls", type=int, default=2, help="error-free scenarios per position and domain")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    domains = tuple(d for d in args.domains.split(",") if d)
    scenarios = build_recovery_suite(domains, args.per_type, args.controls, args.seed, split=args.split, clarify=args.clarify)
    out = args.out or (SUITE_PATH if args.split == "test" else DEV_PATH)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(suite_yaml(scenarios), encoding="utf-8")
    print(f"{len(scenarios)} scenarios -> {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

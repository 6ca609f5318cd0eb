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

    python -m scenarios.recovery_suite                     # rewrite scenarios/recovery/suite.yaml
    rein run scenarios/recovery/suite.yaml --intervention rein
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path
from typing import Any

from scenarios.format import Scenario

SEEN = ("vague_reference", "ambiguous_interpretation", "unsupported_operation", "unsupported_parameter")
"""Error types the paper's ReIn prompt was designed with."""
UNSEEN = ("contradiction", "unsupported_domain")
"""Error types held out from that design."""
ERROR_ORDER = ("vague_reference", "ambiguous_interpretation", "contradiction",
               "unsupported_operation", "unsupported_parameter", "unsupported_domain")
SUITE_PATH = Path(__file__).resolve().parent / "recovery" / "suite.yaml"
"""The suite as shipped (regenerate with python -m scenarios.recovery_suite)."""
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
    instructions = task.user.instructions  # type: ignore[union-attr]
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
    from interventions.turns import request_sentences

    instructions = task_scenario.user.instructions  # type: ignore[union-attr]
    reason = getattr(instructions, "reason_for_call", "") or str(instructions)
    return " ".join(request_sentences(reason)[:2])


def _task_scenarios(domain: str) -> tuple[list[Scenario], set[str]]:
    from scenarios.domains.data import splits_path, tasks_path
    from scenarios.loading import load_scenarios

    scenarios = load_scenarios(tasks_path(domain), domain=domain)
    test = set(json.loads(splits_path(domain).read_text(encoding="utf-8")).get("test", []))
    return scenarios, test


def _suitable(s: Scenario) -> bool:
    actions = (s.evaluation.actions if s.evaluation else None) or []
    return bool(actions) and not any(a.name == "transfer_to_human_agents" for a in actions) and s.initial_state is None


def build_recovery_suite(
    domains: tuple[str, ...] = ("retail", "airline"),
    per_type: int = 2,
    controls: int = 2,
    seed: int = 0,
    step_limit: int = 4,
) -> list[Scenario]:
    """Error scenarios (per_type per error type and domain) and controls, interleaved by type."""
    from scenarios.domains import load_domain
    from scenarios.users.error_turns import build_context, template_turn

    if per_type < 0 or controls < 0 or step_limit < 1:
        raise ValueError("per_type and controls must be >= 0 and step_limit >= 1")
    rng = random.Random(seed)
    groups: dict[str, list[Scenario]] = {t: [] for t in [*ERROR_ORDER, CONTROL]}
    for domain in domains:
        env = load_domain(domain)
        writes = [t for t in env.tool_names() if env.is_mutating(t)]
        tasks, test = _task_scenarios(domain)
        pool = [s for s in tasks if s.id in test and _suitable(s)]
        rng.shuffle(pool)
        if not pool:
            raise ValueError(f"no suitable test tasks in the {domain} domain")
        picks = iter(pool * (1 + (len(ERROR_ORDER) * per_type + controls) // len(pool)))
        for error_type in ERROR_ORDER:
            for _ in range(per_type):
                task = next(picks)
                ctx = build_context(task, env.db, writes)
                text, template = template_turn(error_type, ctx, rng)
                identity = _identity(domain, env.db, _task_user(task, env.db, ctx.user_id))
                groups[error_type].append(
                    _scenario(domain, task, error_type, f"{identity} {text}".strip(), template, step_limit)
                )
        for _ in range(controls):
            task = next(picks)
            ctx = build_context(task, env.db, writes)
            opening = f"{_identity(domain, env.db, _task_user(task, env.db, ctx.user_id))} {_request(task)}".strip()
            groups[CONTROL].append(_scenario(domain, task, None, opening, None, step_limit))
    out: list[Scenario] = []
    longest = max(len(g) for g in groups.values())
    for i in range(longest):  # interleaved, so the first N scenarios cover many types
        out += [g[i] for g in groups.values() if i < len(g)]
    return out


def _scenario(domain: str, task: Scenario, error_type: str | None, text: str, template: str | None, step_limit: int) -> Scenario:
    from scenarios.users.error_types import ERROR_TYPES

    kind = error_type or CONTROL
    doc: dict[str, Any] = {
        "id": f"recovery-{domain}-{kind}-{task.id}",
        "description": (
            f"tau2 {domain} task {task.id} opened with an injected {error_type.replace('_', ' ')} "
            f"(template: {template}); the agent must call {ERROR_TYPES[error_type].recovery_tool} and change nothing."
            if error_type
            else f"tau2 {domain} task {task.id} opened with its own request (no error); the agent must not "
            "write anything before the user confirms, and should not call a recovery tool."
        ),
        "domain": domain,
        "agent": {"tools": [domain, *AGENT_TOOLS], "recovery_tools": True, "step_limit": step_limit},
        "user": {"turns": ["###STOP###"]} if error_type else {"turns": [text]},
        "evaluation": {"actions": [], "reward_basis": ["DB"]},
        "tags": ["recovery", split_of(error_type), domain, kind, f"task:{task.id}"],
    }
    if error_type:
        doc["errors"] = [{"type": error_type, "turn": 0, "text": text}]
    else:
        doc["evaluation"]["required_recovery"] = []
    return Scenario.model_validate(doc)


def suite_yaml(scenarios: list[Scenario]) -> str:
    """The scenarios as one multi-document YAML file."""
    import yaml

    header = (
        "# yaml-language-server: $schema=../schema/scenario.schema.json\n"
        "# Generated by `python -m scenarios.recovery_suite`; see that module and docs/rein.md.\n"
    )
    docs = [s.model_dump(mode="json", exclude_defaults=True) for s in scenarios]
    return header + yaml.safe_dump_all(docs, sort_keys=False, allow_unicode=True, width=100)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m scenarios.recovery_suite", description="Write the error-recovery suite.")
    parser.add_argument("--out", type=Path, default=SUITE_PATH)
    parser.add_argument("--domains", default="retail,airline")
    parser.add_argument("--per-type", type=int, default=2, help="scenarios per error type and domain")
    parser.add_argument("--controls", type=int, default=2, help="error-free scenarios per domain")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    scenarios = build_recovery_suite(tuple(d for d in args.domains.split(",") if d), args.per_type, args.controls, args.seed)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(suite_yaml(scenarios), encoding="utf-8")
    print(f"{len(scenarios)} scenarios -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

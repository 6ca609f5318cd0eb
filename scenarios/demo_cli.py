"""`rein demo`: the offline main job on the embedded model (no keys, no network).

It runs a short dialogue in which the embedded model uses a tool of the tau2 mock domain and the
effect is checked on the domain's database, then the example scenario suite with its grades.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

from agent.errors import UserFacingError
from scenarios.canonical import json_clone

EXAMPLES = Path(__file__).resolve().parent / "examples"
DIALOGUE = "Hi, I am user_1. Please create a task titled 'Buy milk' with the description 'two litres'."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of `rein demo`."""
    parser.add_argument("--model", default=None, help="model name (default: the embedded local model)")
    parser.add_argument("--skip-suite", action="store_true", help="only run the tool-use dialogue")
    parser.add_argument("--out", default=None, help="folder for the suite's results.json and report.html")


def run(args: argparse.Namespace) -> int:
    """Run the demo; exit status 1 if the dialogue or the suite failed to run."""
    return asyncio.run(demo(args.model, args.skip_suite, args.out))


async def demo(model_name: str | None, skip_suite: bool, out: str | None) -> int:
    from agent.models import DEFAULT_MODEL, resolve_model

    model = resolve_model(model_name or DEFAULT_MODEL)
    print(f"rein demo · model {model.name} (offline)\n")
    ok = await tool_dialogue(model)
    if not skip_suite:
        ok = await example_suite(model_name or DEFAULT_MODEL, out) and ok
    return 0 if ok else 1


async def tool_dialogue(model: Any) -> bool:
    """One user turn on the mock domain, with ReIn on; the agent should call create_task, and ReIn
    should stay silent (an ordinary request)."""
    from agent.events import (
        FinalAnswer,
        InterventionApplied,
        TokenDelta,
        ToolCallEvent,
        ToolResultEvent,
    )
    from agent.plugins import load_intervention
    from agent.runtime import Agent
    from scenarios.domains import domain_policy, load_domain

    env = load_domain("mock")
    before = env.dump()
    rein = load_intervention("rein")
    agent = Agent(model, env.agent_toolkit(), domain_policy("mock"), checkpointer="memory",
                  interventions=[rein] if rein is not None else [])
    print("1) A dialogue with a tool (tau2 mock domain)")
    print(f"   user  > {DIALOGUE}")
    started = time.perf_counter()
    print("   agent > ", end="", flush=True)
    final = None
    async for event in agent.astream(DIALOGUE, "demo"):
        if isinstance(event, TokenDelta):
            print(event.text, end="", flush=True)
        elif isinstance(event, ToolCallEvent):
            print(f"\n   tool call   → {event.name}({event.arguments})", flush=True)
        elif isinstance(event, ToolResultEvent):
            status = "error" if event.is_error else "ok"
            print(f"   tool result ← [{status}] {event.content[:160]}\n   agent > ", end="", flush=True)
        elif isinstance(event, InterventionApplied):
            verdict = f"planted a plan ({event.record.get('error_type')})" if event.activated else "no error found"
            print(f"\n   ReIn        · {verdict}\n   agent > ", end="", flush=True)
        elif isinstance(event, FinalAnswer):
            final = event
    await agent.aclose()
    elapsed = time.perf_counter() - started
    print(f"\n   ({elapsed:.1f}s, turn ended: {final.termination if final else 'unknown'})")
    for line in db_check(before, env.db):
        print(f"   {line}")
    print()
    return final is not None and final.termination != "model_error"


def db_changes(before: Any, after: Any, path: str = "") -> list[str]:
    """Every difference between two JSON-like database states, one line each, by dotted path."""
    if isinstance(before, dict) and isinstance(after, dict):
        lines = []
        for key in sorted(before.keys() | after.keys()):
            where = f"{path}.{key}" if path else str(key)
            if key not in after:
                lines.append(f"{where} deleted")
            elif key not in before:
                lines.append(f"{where} added: {json.dumps(after[key], sort_keys=True)}")
            else:
                lines += db_changes(before[key], after[key], where)
        return lines
    return [] if before == after else [f"{path}: {json.dumps(before)} → {json.dumps(after)}"]


def db_check(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """What the dialogue did to the mock database, against what the user asked: one new pending task
    'Buy milk' ('two litres') on user_1's list, and nothing else."""
    listed = after.get("users", {}).get("user_1", {}).get("tasks", [])
    asked = [t for k, t in after.get("tasks", {}).items()
             if k not in before.get("tasks", {}) and k in listed
             and t.get("title") == "Buy milk" and t.get("description") == "two litres"]
    if not asked:
        return ["DB check: no task 'Buy milk' was created for user_1: the model did not complete the tool call "
                "this time."]
    task = asked[0]
    expected = json_clone(before)
    expected["tasks"][task["task_id"]] = {**task, "status": "pending"}
    expected["users"]["user_1"]["tasks"].append(task["task_id"])
    lines = [f"DB check: new task {task['task_id']} {task['title']!r} for user_1, as asked: the tool call took effect."]
    unasked = db_changes(expected, after)
    if unasked:
        lines.append("DB check: the agent also changed what nobody asked it to:")
        lines += [f"  {change}" for change in unasked]
    else:
        lines.append("DB check: nothing else in the database changed.")
    return lines


async def example_suite(model_name: str, out: str | None) -> bool:
    """The mock-domain example scenarios, run and graded by `rein run`."""
    from scenarios import run_cli

    paths = sorted(str(p) for p in EXAMPLES.glob("mock_*.yaml"))
    target = out or str(Path("rein-results") / f"demo-{time.strftime('%Y%m%d-%H%M%S')}")
    print(f"2) The example scenario suite ({len(paths)} scripted dialogues on the mock domain, graded, with ReIn)")
    parser = argparse.ArgumentParser(prog="rein run")
    run_cli.add_arguments(parser)
    args = parser.parse_args([*paths, "--model", model_name, "--intervention", "rein", "--out", target])
    # run_cli is synchronous (it owns its event loop), so it runs in a worker thread here.
    try:
        status = await asyncio.to_thread(run_cli.run, args)
    except UserFacingError as exc:
        print(f"rein run: error: {exc}", file=sys.stderr)
        return False
    return int(status or 0) == 0

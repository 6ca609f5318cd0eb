"""Replay benchmarks for the tau2 domains. Run by hand from the repo root:

    python bench/replay.py                      # every section
    python bench/replay.py --sections gold --repeat 5

Sections (add more to SECTIONS):
- gold: gold-action replay throughput in tasks/s per domain (fresh environment per task, initial
  state, every gold action, initial and end canonical hashes), best of --repeat runs, plus a check
  that the end hashes are the expected ones when the shared tau2 data is present.
- episode-start: cost of giving an episode its own DB: copy.deepcopy, re-parsing the JSON text,
  scenarios.canonical.json_clone, and rein's copy-on-write TableStore (what load_domain uses).
"""

from __future__ import annotations

import argparse
import copy
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from scenarios.canonical import canonical_dumps, json_clone
from scenarios.domains import load_domain
from scenarios.domains.data import bundled_snapshot, tasks_path
from scenarios.domains.store import TableStore
from scenarios.replay import replay_tasks
from scenarios.tau2_tasks import load_tasks

SHARED = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "tau2"


def _best(fn: Callable[[], Any], repeat: int) -> float:
    """Fastest wall time of repeat calls, in seconds."""
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - started)
    return best


def gold(repeat: int) -> list[dict[str, Any]]:
    """Gold-replay throughput per domain."""
    rows = []
    for domain in ("retail", "airline", "mock"):
        tasks = load_tasks(tasks_path(domain))
        results = replay_tasks(lambda d=domain: load_domain(d), tasks)  # warm the caches
        seconds = _best(lambda d=domain, t=tasks: replay_tasks(lambda: load_domain(d), t), repeat)
        row: dict[str, Any] = {
            "section": "gold",
            "domain": domain,
            "tasks": len(tasks),
            "gold_actions": sum(r.num_actions for r in results),
            "seconds": round(seconds, 4),
            "tasks_per_s": round(len(tasks) / seconds, 1),
        }
        expected_file = SHARED / domain / "expected_end_states.json"
        if expected_file.is_file():
            expected = json.loads(expected_file.read_text())["tasks"]
            row["expected_match"] = (
                f"{sum(expected[r.task_id]['end_hash'] == r.end_hash for r in results)}/{len(results)}"
            )
        rows.append(row)
    return rows


def episode_start(repeat: int) -> list[dict[str, Any]]:
    """Milliseconds to give one episode a private DB, by method."""
    rows = []
    for domain in ("retail", "airline"):
        snapshot = bundled_snapshot(domain)
        assert snapshot is not None
        text = canonical_dumps(snapshot.data)
        methods: dict[str, Callable[[], Any]] = {
            "copy.deepcopy": lambda s=snapshot: copy.deepcopy(s.data),
            "json.loads": lambda t=text: json.loads(t),
            "json_clone": lambda s=snapshot: json_clone(s.data),
            "TableStore (copy-on-write)": lambda s=snapshot: TableStore(s),
        }
        for method, fn in methods.items():
            rows.append(
                {
                    "section": "episode-start",
                    "domain": domain,
                    "method": method,
                    "ms": round(_best(fn, repeat) * 1000, 3),
                }
            )
    return rows


SECTIONS: dict[str, Callable[[int], list[dict[str, Any]]]] = {
    "gold": gold,
    "episode-start": episode_start,
}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--sections",
        default=",".join(SECTIONS),
        help=f"comma-separated, from: {', '.join(SECTIONS)}",
    )
    parser.add_argument(
        "--repeat", type=int, default=3, help="runs per measurement; the best is kept"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON list of result rows")
    args = parser.parse_args()
    names = [s.strip() for s in args.sections.split(",") if s.strip()]
    unknown = [n for n in names if n not in SECTIONS]
    if unknown:
        parser.error(f"unknown section(s) {', '.join(unknown)}; known: {', '.join(SECTIONS)}")
    rows = [row for name in names for row in SECTIONS[name](max(1, args.repeat))]
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    for row in rows:
        print("  ".join(f"{k}={v}" for k, v in row.items()))


# ----- scenario runs (scenarios/runner.py) ------------------------------------------------


def scenario_runs(repeat: int) -> list[dict[str, Any]]:
    """Full scripted-model scenario runs per second through the batch runner (orchestrator, fresh
    environment, agent graph, grading with the gold replay, runs.jsonl, results.json and the
    report), at concurrency 1 and 4. Two suites: the bundled examples, and retail tasks whose
    scripted agent plays the gold actions to a scripted user."""
    import asyncio
    import tempfile

    from scenarios.loading import collect_scenarios, load_scenarios
    from scenarios.orchestrator import RunOptions, script_model
    from scenarios.runner import run_batch
    from scenarios.scenario import Scenario

    examples = collect_scenarios([Path(__file__).resolve().parents[1] / "scenarios" / "examples"])
    retail = []
    for task in load_scenarios(tasks_path("retail"))[:20]:
        actions = task.evaluation.actions if task.evaluation and task.evaluation.actions else []
        script = [{"call": {"name": a.name, "arguments": a.arguments}} for a in actions] + [{"say": "Done."}]
        # One user turn holds the whole gold trajectory, so the turn's step cap must fit it.
        agent = {"script": script, "step_limit": len(script) + 1}
        data = {**task.model_dump(), "user": {"turns": ["Hello"]}, "agent": agent}
        retail.append(Scenario.model_validate(data))
    suites = {"examples x8 trials": (examples, 8), "retail gold-scripted x2 trials": (retail, 2)}
    rows = []
    for suite, (scenarios, trials) in suites.items():
        for concurrency in (1, 4):
            best, last = float("inf"), None
            for _ in range(repeat):
                with tempfile.TemporaryDirectory() as out:
                    started = time.perf_counter()
                    last = asyncio.run(
                        run_batch(scenarios, RunOptions(model=script_model), out, trials=trials,
                                  concurrency=concurrency, progress=False)
                    )
                    best = min(best, time.perf_counter() - started)
            assert last is not None
            rows.append(
                {
                    "section": "scenarios",
                    "suite": suite,
                    "concurrency": concurrency,
                    "runs": len(last.records),
                    "seconds": round(best, 3),
                    "runs_per_s": round(len(last.records) / best, 1),
                    "success_rate": last.summary["success_rate"],
                }
            )
    return rows


SECTIONS["scenarios"] = scenario_runs


if __name__ == "__main__":
    main()

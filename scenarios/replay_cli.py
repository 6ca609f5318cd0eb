"""`rein replay DOMAIN_DIR`: replay tau2 gold actions through rein's tools and print end-state hashes."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from agent.errors import UserFacingError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of `rein replay`."""
    parser.add_argument(
        "domain_dir",
        metavar="DOMAIN_DIR",
        help="folder holding db.json (or db.json.gz) and tasks.json",
    )
    parser.add_argument(
        "--tasks", metavar="FILE", help="tasks file to replay instead of DOMAIN_DIR/tasks.json"
    )
    parser.add_argument(
        "--domain",
        choices=("mock", "retail", "airline"),
        help="domain of the DB (default: recognised from its tables)",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="print one JSON object {task_id: end_hash} and nothing else",
    )
    parser.add_argument(
        "--expected",
        metavar="FILE",
        help="compare with this expected_end_states.json (or a saved --json output); "
        "default: DOMAIN_DIR/expected_end_states.json when it exists. Exit status 1 on any mismatch.",
    )


def run(args: argparse.Namespace) -> int:
    """Replay, print, and return 0 (or 1 when a hash differs from the expected one)."""
    from scenarios.replay import ReplayError, read_json_file, replay_domain

    started = time.perf_counter()
    report = replay_domain(args.domain_dir, args.tasks, args.domain)
    elapsed = time.perf_counter() - started

    expected_path = (
        Path(args.expected) if args.expected else Path(args.domain_dir) / "expected_end_states.json"
    )
    expected: dict[str, str] | None = None
    if args.expected or expected_path.is_file():
        expected = _expected_hashes(read_json_file(expected_path), expected_path, ReplayError)
    mismatched = [
        r.task_id
        for r in report.results
        if expected is not None and expected.get(r.task_id) != r.end_hash
    ]

    if args.json:
        print(json.dumps(report.end_hashes(), indent=None))
        return 1 if mismatched else 0

    out = sys.stdout
    print(
        f"replay {report.domain}: {len(report.results)} tasks from {report.tasks_path} on {report.db_path}",
        file=out,
    )
    width = max([len("task")] + [len(r.task_id) for r in report.results])
    header = f"{'task':<{width}}  {'initial':<12}  {'end':<12}  changed  failing calls"
    if expected is not None:
        header += "  expected"
    print(header, file=out)
    for r in report.results:
        failing = ", ".join(f"#{f.index} {f.name}" for f in r.failing_actions) or "-"
        line = f"{r.task_id:<{width}}  {r.initial_hash[:12]}  {r.end_hash[:12]}  {'yes' if r.changed else 'no':<7}  {failing}"
        if expected is not None:
            line += "  " + (
                "ok"
                if r.task_id not in mismatched
                else f"MISMATCH (want {str(expected.get(r.task_id))[:12]})"
            )
        print(line, file=out)
    calls = sum(len(r.failing_actions) for r in report.results)
    rate = len(report.results) / elapsed if elapsed > 0 else float("inf")
    print(
        f"{len(report.results)} tasks in {elapsed:.2f} s ({rate:.1f} tasks/s); "
        f"{sum(r.changed for r in report.results)} changed the DB; "
        f"{sum(bool(r.failing_actions) for r in report.results)} had failing gold calls ({calls} calls)",
        file=out,
    )
    if expected is not None:
        matched = len(report.results) - len(mismatched)
        print(f"{expected_path}: {matched}/{len(report.results)} end hashes match", file=out)
    return 1 if mismatched else 0


def _expected_hashes(data: Any, path: Path, error: type[UserFacingError]) -> dict[str, str]:
    """Task id → end hash from an expected_end_states.json or a `--json` output."""
    if isinstance(data, dict) and isinstance(data.get("tasks"), dict):
        try:
            return {task_id: entry["end_hash"] for task_id, entry in data["tasks"].items()}
        except (TypeError, KeyError):
            raise error(f"{path}: every entry of 'tasks' needs an 'end_hash'") from None
    if isinstance(data, dict) and all(isinstance(v, str) for v in data.values()):
        return dict(data)
    raise error(f"{path}: expected an expected_end_states.json or an object of task id → end hash")

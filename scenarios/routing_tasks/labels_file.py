"""A labels file that grows one row at a time: resume where a run stopped, and a stratified order.

A labelling run appends each task's row (see agent.routing.oracle.OracleRow) as soon as its three
modes are done, flushed to disk, so a run killed at any point loses at most the task in flight.
Rerunning it reads the file, skips the tasks it already holds for that model and pass (greedy, or
a seeded temperature), and appends the rest.
A run killed while writing leaves a truncated last line: it is moved to `<out>.rejected` (nothing
is thrown away) and the task is run again, free where its model calls are in the cassette. A bad
line anywhere else is an error: the file was edited or is not a labels file, and it is left alone.

The stratified order interleaves splits, kinds and families so that any prefix of a run is a
stratified sample of the whole set: each (split, kind, family) group is spread evenly across the
run, in a seeded shuffle within the group.
"""

from __future__ import annotations

import json
import os
import random
import sys
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from agent.errors import UserFacingError
from agent.file_lock import exclusive
from agent.jsonl import json_objects
from agent.routing.oracle import GREEDY, ModeRun, oracle_label
from scenarios.routing_tasks.graders import grade
from scenarios.routing_tasks.task import RoutingTask

ORDERS = ("stratified", "file")
"""Task orders of a run: stratified (default) or the task file's own order."""


def stratified_order(tasks: Sequence[RoutingTask], seed: int = 0) -> list[RoutingTask]:
    """The tasks reordered so that every prefix holds each (split, kind, family) group in proportion.

    Task i of a group of n (after a seeded shuffle) sits at position (i + 0.5) / n of the run;
    ties go to a seeded random order, so no group always comes first.
    """
    groups: dict[tuple[str, str, str], list[RoutingTask]] = defaultdict(list)
    for task in sorted(tasks, key=lambda t: t.id):
        groups[(task.split, task.kind, task.family)].append(task)
    rng = random.Random(seed)
    keyed: list[tuple[float, float, RoutingTask]] = []
    for key in sorted(groups):
        members = groups[key]
        rng.shuffle(members)
        keyed += [((i + 0.5) / len(members), rng.random(), t) for i, t in enumerate(members)]
    keyed.sort(key=lambda x: (x[0], x[1]))
    return [t for _, _, t in keyed]


@dataclass(frozen=True)
class ResumeState:
    """What an existing labels file already holds."""

    done: frozenset[str]
    """Task ids with a complete row for the run's model and pass."""
    rows: int
    """Complete rows in the file (any model)."""
    rejected: str | None = None
    """The truncated last line that was moved aside, if there was one."""


def _row_ok(item: Any) -> bool:
    return isinstance(item, dict) and isinstance(item.get("id"), str) and isinstance(item.get("runs"), dict)


def _ours(item: dict[str, Any], model: str, pass_: str) -> bool:
    """Whether a row belongs to the run of `model` in `pass_` (rows from before passes are greedy)."""
    return item.get("model") == model and item.get("pass", GREEDY) == pass_


def resume(path: Path, model: str, pass_: str = GREEDY) -> ResumeState:
    """Read `path` (if it exists) and repair a truncated last line; raise on a bad line elsewhere.

    The truncated line is appended to `<path>.rejected` and cut from the file, and a complete last
    line without its newline gets one, so the next row can be appended safely.
    """
    if not path.exists():
        return ResumeState(frozenset(), 0)
    if not path.is_file():
        raise UserFacingError(f"--out {path} exists and is not a file")
    # Under the lock appends take: a shard in another process may be writing its row right now,
    # and a half-written row of a live writer is not a cut-off one.
    with path.open("a+b") as f, exclusive(f):
        f.seek(0)
        return _read_and_repair(path, f, model, pass_)


def _read_and_repair(path: Path, f: BinaryIO, model: str, pass_: str) -> ResumeState:
    raw = f.read()
    lines = raw.split(b"\n")
    tail = lines.pop()  # the bytes after the last newline: b"" when the file ends cleanly
    done: set[str] = set()
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except (json.JSONDecodeError, UnicodeDecodeError):
            item = None
        if not _row_ok(item):
            raise UserFacingError(
                f"{path}:{number}: not a labels row; the file was edited or is not a labels file "
                "(fix or remove that line, or choose another --out)")
        if _ours(item, model, pass_):
            done.add(item["id"])
    rejected = None
    if tail.strip():
        try:
            item = json.loads(tail)
        except (json.JSONDecodeError, UnicodeDecodeError):
            item = None
        if _row_ok(item):
            f.write(b"\n")
            lines.append(tail)
            if _ours(item, model, pass_):
                done.add(item["id"])
        else:
            rejected = tail.decode("utf-8", errors="replace")
            with Path(f"{path}.rejected").open("ab") as aside:
                aside.write(tail + b"\n")
            f.truncate(len(raw) - len(tail))
            print(f"{path}: its last line was cut off mid-write ({len(tail)} bytes); moved it to {path}.rejected "
                  "and will run that task again", file=sys.stderr)
    return ResumeState(frozenset(done), sum(bool(x.strip()) for x in lines), rejected)


def regrade_file(path: Path, tasks: Sequence[RoutingTask]) -> tuple[int, int]:
    """Grade every recorded run of the file again from its answer, with the tasks' current graders.

    Graders get fixed; the answers they judge are recorded, so no model is needed. Each run's
    success and each row's oracle label are recomputed, everything else is kept as it was, and the
    file is replaced only once the new one is complete (written beside it, then renamed). Returns
    the rows read and the runs whose success changed. Do not run it while a labelling run appends.
    """
    by_id = {t.id: t for t in tasks}
    if not path.is_file():
        raise UserFacingError(f"no such labels file: {path}")
    resume(path, "", GREEDY)  # repairs a cut-off last line (moved aside), refuses a bad line
    out: list[str] = []
    changed = 0
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        row = json.loads(line)
        task = by_id.get(row["id"])
        if task is None:
            raise UserFacingError(f"{path}:{number}: task {row['id']} is not in the task set")
        for run in row["runs"].values():
            success = grade(task, run.get("answer", ""))
            changed += success != bool(run["success"])
            run["success"] = success
        row["oracle"] = oracle_label({m: ModeRun(**r) for m, r in row["runs"].items()})
        out.append(json.dumps(row, ensure_ascii=False))
    fresh = path.with_name(path.name + ".regrading")
    fresh.write_text("".join(line + "\n" for line in out), encoding="utf-8")
    with fresh.open("rb") as f:
        os.fsync(f.fileno())
    os.replace(fresh, path)
    return len(out), changed


SPLITS = ("test", "validation", "train")
LABELS = ("instant", "reasoning", "agentic", "none")


def _rank(order: tuple[str, ...]) -> Callable[[str], tuple[int, str]]:
    """A sort key: the names of `order` in its order, any others after them by name."""
    return lambda name: (order.index(name) if name in order else len(order), name)


def status(path: Path, tasks: Sequence[RoutingTask]) -> list[str]:
    """One line per model and pass in the file: tasks labelled out of each split's, and the oracle labels."""
    if not path.is_file():
        raise UserFacingError(f"no such labels file: {path}")
    totals: dict[str, int] = defaultdict(int)
    for task in tasks:
        totals[task.split] += 1
    done: dict[tuple[str, str], dict[str, int]] = defaultdict(lambda: defaultdict(int))
    labels: dict[tuple[str, str], dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for _, row in json_objects(path):
        key = (str(row.get("model")), str(row.get("pass", GREEDY)))
        done[key][str(row.get("split"))] += 1
        labels[key][str(row.get("oracle"))] += 1
    lines = []
    for (model, pass_), splits in sorted(done.items()):
        counts = ", ".join(f"{split} {splits.get(split, 0)}/{totals[split]}" for split in sorted(totals, key=_rank(SPLITS)))
        tally = ", ".join(f"{k} {labels[(model, pass_)][k]}" for k in sorted(labels[(model, pass_)], key=_rank(LABELS)))
        lines.append(f"{model} ({pass_}): {counts}; oracle labels: {tally}")
    return lines


def append_row(path: Path, row: dict[str, Any]) -> None:
    """Append one row and make it durable before the next task starts."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as f, exclusive(f):
        f.write(json.dumps(row, ensure_ascii=False) + "\n")
        f.flush()
        os.fsync(f.fileno())


def clock(seconds: float) -> str:
    """h:mm:ss."""
    s = int(round(seconds))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


__all__ = ["ORDERS", "ResumeState", "append_row", "clock", "regrade_file", "resume", "status", "stratified_order"]

"""Recompute a labels file from its cassette with no model, and prune the cassette to what it uses.

    python -m scenarios.routing_tasks.labeling --verify --model NAME --out labels.jsonl \
        --cassettes DIR --graph DIR [--drop] [--prune]

Every row of the model is labelled again from the cassette alone (replay: a call the cassette
lacks is an error) with the pass's own sampling settings, and the new row must equal the stored
one, wall times aside. That is the claim the cassettes make (labels and benchmark recomputable
without the model), checked rather than assumed. `--prune` then rewrites the cassette keeping the
calls the rows used: calls of runs that were cut off and redone, or of rows since relabelled, are
dead weight in a shipped file. The cassette is only rewritten when every row verified, and it is
replaced atomically (written beside it, then renamed).

The retrieval tool's results are answered from the tool cassette beside the model's
(`<model>.tools.jsonl`, tool_cassette.py) when it holds them, so a row does not depend on the
machine that built the graph; the calls it lacks run on the graph, and their results are added to
it for the rows that verify, and only those.

After a change to a tool or a prompt, the rows it touched no longer verify: `--drop` moves them
from the labels file to `<out>.dropped` (nothing is thrown away), so that the next labelling run
labels those tasks again, from the cassette as far as the calls are unchanged. Neither `--drop`
nor `--prune` may run while a labelling run appends to the same files.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from agent.errors import UserFacingError
from agent.jsonl import json_objects
from agent.messages import ModelRequest, ModelResponse
from agent.models import CassetteModel
from agent.models.cassette import request_key
from agent.routing.oracle import GREEDY
from scenarios.routing_tasks.recover_digits import DigitRecovery
from scenarios.routing_tasks.tool_cassette import ToolCassette

_SAMPLED = re.compile(r"t(?P<temperature>[0-9.e+-]+)-seed(?P<seed>-?\d+)")


class _KeyRecorder(CassetteModel):
    """A replaying cassette that remembers which entries were asked for, and which it lacked; with a
    recovery, a call it lacks after a retrieve is looked for among nearby versions of that result."""

    def __init__(self, path: Path, recovery: DigitRecovery | None = None, tools: ToolCassette | None = None) -> None:
        super().__init__(path, mode="replay")
        self.used: set[str] = set()
        self.lacked = 0
        self.recovery = recovery
        self.tools = tools
        self.corrected = 0

    async def complete(self, request: ModelRequest) -> ModelResponse:
        if self.recovery is not None:
            asked = request
            request = self.recovery.rewrite(request)
            if request_key(request) not in self:
                self.recovery.search(request, self._entries)
                request = self.recovery.rewrite(request)
            self._correct(asked, self.recovery)
        key = request_key(request)
        self.used.add(key)
        # The runtime turns a model error into the run's termination, so count it here to say why.
        self.lacked += key not in self
        return await super().complete(request)

    def _correct(self, asked: ModelRequest, recovery: DigitRecovery) -> None:
        """Record the recovered version of every result the graph just gave that the request shows
        swapped: the one the search found, and any later call that returned the same text."""
        if self.tools is None:
            return
        for message in asked.messages:
            if message.role == "tool" and isinstance(message.content, str) and message.content in recovery.swaps:
                # A result replayed from the tool cassette is what this row's run recorded itself,
                # so only one the graph just gave (waiting in `fresh`) can be the wrong version.
                self.corrected += self.tools.correct(message.content, json.loads(recovery.swaps[message.content]))


@dataclass
class VerifyReport:
    """What a verification found."""

    rows: int = 0
    """Rows of the model recomputed."""
    same: int = 0
    """Rows recomputed identical to the stored ones (wall times aside)."""
    differ: list[str] = field(default_factory=list)
    """One line per row that came out different, or could not be replayed."""
    entries: int = 0
    """Entries in the cassette."""
    used: int = 0
    """Entries the rows asked for."""
    pruned: bool = False
    """Whether the cassette (and the tool cassette) was rewritten with only the used entries."""
    tool_replayed: int = 0
    """Retrieval calls answered from the tool cassette."""
    tool_added: int = 0
    """Retrieval results the tool cassette lacked, run on the graph and added for rows that verified."""
    recovered: int = 0
    """Retrieval results found among nearby score digits (--recover), for rows that then verified."""
    dropped: int = 0
    """Rows that differed and were moved to `<out>.dropped`."""

    def summary(self) -> str:
        """Human-readable result."""
        lines = [f"{self.same}/{self.rows} rows recomputed identical from the cassette "
                 f"({self.used} of its {self.entries} calls used)"]
        lines += [f"  {d}" for d in self.differ]
        if self.dropped:
            lines.append(f"moved the {self.dropped} rows that differ to the .dropped file beside the labels: "
                         "label again to replace them")
        if self.tool_replayed or self.tool_added:
            lines.append(f"retrieval: {self.tool_replayed} calls answered from the tool cassette, "
                         f"{self.tool_added} results added to it from the graph"
                         + (f" ({self.recovered} with the score digits the run saw, not the graph's)"
                            if self.recovered else ""))
        if self.pruned:
            lines.append(f"pruned the cassette to the {self.used} calls used")
        return "\n".join(lines)


def settings_of(pass_: str, base: Any) -> Any:
    """The LabelSettings of a pass name ('greedy' or e.g. 't0.7-seed1'), the rest from `base`."""
    if pass_ == GREEDY:
        return replace(base, temperature=0.0, seed=None)
    match = _SAMPLED.fullmatch(pass_)
    if match is None:
        raise UserFacingError(f"unknown labelling pass {pass_!r}: expected 'greedy' or e.g. 't0.7-seed1'")
    return replace(base, temperature=float(match["temperature"]), seed=int(match["seed"]))


def comparable(row: dict[str, Any]) -> dict[str, Any]:
    """A row without its wall times, the one field two runs of the same calls may differ in."""
    out = json.loads(json.dumps(row))
    out.setdefault("pass", GREEDY)
    for run in out.get("runs", {}).values():
        run.pop("latency_s", None)
    return out


def _differences(stored: dict[str, Any], fresh: dict[str, Any]) -> str:
    """Which fields differ, briefly."""
    keys = sorted(k for k in stored.keys() | fresh.keys() if k != "runs" and stored.get(k) != fresh.get(k))
    for mode in sorted(stored.get("runs", {}).keys() | fresh.get("runs", {}).keys()):
        old, new = stored["runs"].get(mode, {}), fresh["runs"].get(mode, {})
        keys += [f"{mode}.{k}" for k in sorted(old.keys() | new.keys()) if old.get(k) != new.get(k)]
    return ", ".join(keys)


def verify_labels(out: Path, cassette: Path, model: str, tasks: Sequence[Any], settings: Any,
                  prune: bool = False, drop: bool = False, recover: bool = False) -> VerifyReport:
    """Recompute every row of `model` in `out` from `cassette`; with `drop`, move the rows that differ
    aside; with `prune`, when every row (left) matches, keep only the cassette calls they used; with
    `recover`, look for retrieval results that differ from the graph's in their last digits
    (recover_digits.py)."""
    from scenarios.routing_tasks.labeling import ToolCache, label_tasks

    if not out.is_file():
        raise UserFacingError(f"no such labels file: {out}")
    if not cassette.is_file():
        raise UserFacingError(f"no cassette at {cassette} (give the --cassettes folder the labels were made with)")
    by_id = {t.id: t for t in tasks}
    stored = [row for _, row in json_objects(out) if row.get("model") == model]
    if not stored:
        raise UserFacingError(f"{out} holds no rows of {model}")
    # One graph load for the whole file; retrieval results the tool cassette lacks are added only for
    # the rows that verify with them, so it never gains a result no stored row saw.
    tools = (ToolCassette(settings.tool_cassette, keep_new=False)
             if settings.tool_cassette and settings.graph_dir else None)
    if recover and tools is None:
        raise UserFacingError("--recover needs --graph: it records what it finds in the tool cassette")
    recovery = DigitRecovery() if recover else None
    recorder = _KeyRecorder(cassette, recovery, tools)
    report = VerifyReport(rows=len(stored), entries=len(recorder.keys()))
    cache = ToolCache(settings.graph_dir, tools)
    stale: set[tuple[str, str]] = set()  # (id, pass) of rows known not to follow from the cassette
    for row in stored:
        task = by_id.get(row["id"])
        label = f"{row['id']} ({row.get('pass', GREEDY)})"
        if task is None:
            report.differ.append(f"{label}: not in the task set")
            stale.add((row["id"], row.get("pass", GREEDY)))
            continue
        lacked = recorder.lacked
        corrected_before = recorder.corrected
        if recovery is not None:
            recovery.swaps.clear()  # a text's recovered version belongs to the run that saw it
        fresh, _ = asyncio.run(label_tasks(recorder, [task], settings_of(row.get("pass", GREEDY), settings),
                                           model_name=model, tool_cache=cache))
        lacked = recorder.lacked - lacked
        if not fresh:
            report.differ.append(f"{label}: skipped (its tools are not available: give --graph)")
            continue
        old, new = comparable(row), comparable(fresh[0].as_json())
        if old == new:
            report.same += 1
            if tools is not None:
                report.tool_added += tools.keep_fresh()
            report.recovered += recorder.corrected - corrected_before
        else:
            if tools is not None:
                tools.forget_fresh()
            why = f" ({lacked} of its calls are not in the cassette)" if lacked else ""
            report.differ.append(f"{label}: differs in {_differences(old, new)}{why}")
            stale.add((row["id"], row.get("pass", GREEDY)))
    report.used = len(recorder.used & recorder.keys())
    if drop and stale:
        report.dropped = _drop(out, model, stale)
    if tools is not None:
        report.tool_replayed = tools.replayed
    if prune and len(report.differ) == report.dropped:
        _prune(cassette, recorder.used)
        if tools is not None and tools.path.is_file():
            _prune(tools.path, tools.used)
        report.pruned = True
    return report


def _drop(out: Path, model: str, stale: set[tuple[str, str]]) -> int:
    """Move the model's rows in `stale` from `out` to `<out>.dropped`; how many moved."""
    keep: list[str] = []
    moved: list[str] = []
    for line in out.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        row = json.loads(line)
        ours = row.get("model") == model and (row["id"], row.get("pass", GREEDY)) in stale
        (moved if ours else keep).append(line)
    with Path(f"{out}.dropped").open("a", encoding="utf-8") as f:
        f.write("".join(line + "\n" for line in moved))
        f.flush()
        os.fsync(f.fileno())
    _rewrite(out, keep)
    return len(moved)


def _prune(cassette: Path, keep: set[str]) -> None:
    """Rewrite the cassette with only the entries in `keep`, in their order, first copy of each."""
    lines, seen = [], set()
    for line in cassette.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        key = json.loads(line)["key"]
        if key in keep and key not in seen:
            seen.add(key)
            lines.append(line)
    _rewrite(cassette, lines)


def _rewrite(path: Path, lines: list[str]) -> None:
    """Replace the file with `lines`, atomically: written beside it, made durable, then renamed."""
    fresh = path.with_name(path.name + ".rewriting")
    fresh.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    with fresh.open("rb") as f:
        os.fsync(f.fileno())
    os.replace(fresh, path)


__all__ = ["VerifyReport", "comparable", "settings_of", "verify_labels"]

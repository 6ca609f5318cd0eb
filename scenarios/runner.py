"""The batch runner: scenarios × trials, concurrently, with incremental results and resume.

Output folder:
- `batch.json`: what the batch runs (model, plug-ins, scenarios and their fingerprints);
- `runs.jsonl`: one JSON line per finished run, appended and flushed as each run ends;
- `results.json`: every run (trajectory, reward breakdown, termination, usage, cost) and the
  summary, written atomically when the batch ends or is interrupted; runs cut short by
  infrastructure (`infrastructure_error: true`) are counted apart from agent failures;
- `report.html`: the self-contained report (scenarios/report.py).

`resume=True` reads `runs.jsonl` and runs only what is missing; a batch whose configuration or
scenarios changed is refused rather than mixed.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import hashlib
import json
import os
import sys
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from agent.errors import UserFacingError
from agent.models.base import Model
from scenarios.grading import RewardBreakdown, evaluate
from scenarios.metrics import summarize
from scenarios.orchestrator import Episode, RunOptions, run_scenario
from scenarios.scenario import Evaluation, InjectedError, Scenario
from scenarios.trajectory import Trajectory
from scenarios.users.error_types import ERROR_TYPES, ErrorTypeName

RESULTS_VERSION = 1


class Backend(Protocol):
    """Runs a batch's jobs somewhere other than this event loop (e.g. a Ray cluster)."""

    async def run(
        self,
        jobs: Sequence[tuple[Scenario, int]],
        prints: dict[str, str],
        finished: Callable[[dict[str, Any]], None],
    ) -> None:
        """Run every (scenario, trial) once, calling `finished` with each record as it ends."""

    def progress_note(self) -> str:
        """A few words for the progress bar (workers, retries)."""


@dataclass
class BatchResult:
    """What a batch produced."""

    records: list[dict[str, Any]]
    """Every finished run, in scenario and trial order."""
    summary: dict[str, Any]
    """Aggregates (scenarios/metrics.py summarize)."""
    out_dir: Path
    """The output folder."""
    ran: int = 0
    """Runs executed by this call (the rest came from a resumed batch)."""
    complete: bool = True
    """False when the batch was interrupted."""
    files: dict[str, str] = field(default_factory=dict)
    """Name → path of the files written."""


def fingerprint(scenario: Scenario) -> str:
    """A short hash of a scenario's content (resume refuses runs of a changed scenario)."""
    text = json.dumps(scenario.model_dump(mode="json"), sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def with_injected_errors(scenarios: Sequence[Scenario], types: Sequence[ErrorTypeName], turn: int = 0) -> list[Scenario]:
    """One variant of each scenario per error type (id `ID+TYPE`), the error sent at `turn`.

    The expected recovery call always gates the reward. An ambiguous error is followed by the
    user's own request, so the original grading stays. After an unsupported request the right
    move is a transfer, which ends the conversation: at turn 0 nothing may change (the DB must
    equal the initial state); later, how much of the task came first is unknown, so only the
    recovery call is graded.
    """
    out = []
    for s in scenarios:
        for etype in types:
            evaluation = s.evaluation
            if ERROR_TYPES[etype].category == "unsupported":
                if turn == 0:
                    evaluation = Evaluation(actions=[], reward_basis=["DB"])
                else:
                    evaluation = Evaluation(reward_basis=[])
            variant = s.model_copy(
                update={
                    "id": f"{s.id}+{etype}",
                    "errors": [*s.errors, InjectedError(type=etype, turn=turn)],
                    "evaluation": evaluation,
                    "tags": [*s.tags, "injected"],
                },
                deep=True,
            )
            out.append(variant)
    return out


async def run_batch(
    scenarios: Sequence[Scenario],
    options: RunOptions,
    out_dir: str | Path,
    *,
    trials: int = 1,
    concurrency: int = 1,
    resume: bool = False,
    judge: Model | None = None,
    config: dict[str, Any] | None = None,
    progress: bool = True,
    backend: Backend | None = None,
) -> BatchResult:
    """Run every scenario `trials` times, `concurrency` at a time, writing results as they come.

    A `backend` runs the jobs elsewhere (scenarios/ray_backend.py) and hands each finished record
    back; the files, resume and the summary are the same as for runs in this process.
    """
    if trials < 1 or concurrency < 1:
        raise UserFacingError("--trials and --concurrency must be at least 1")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    prints = {s.id: fingerprint(s) for s in scenarios}
    batch = {"config": config or {}, "scenarios": prints}
    done = _prepare(out, batch, resume)
    jobs = [(s, k) for s in scenarios for k in range(trials) if f"{s.id}#{k}" not in done]
    order = {f"{s.id}#{k}": i for i, (s, k) in enumerate((s, k) for s in scenarios for k in range(trials))}
    bar = _progress(len(order), len(order) - len(jobs), progress)
    lock = asyncio.Lock()
    gate = asyncio.Semaphore(concurrency)
    ran = 0

    failures = 0

    def finished(record: dict[str, Any]) -> None:
        nonlocal ran, failures
        _append_line(out / "runs.jsonl", record)
        done[record["key"]] = record
        ran += 1
        failures += not record["success"]
        if bar is not None:
            bar.update(1)
            if backend is not None:
                bar.set_postfix_str(f"failures={failures} {backend.progress_note()}".strip(), refresh=False)
                return
            shown = "infrastructure error" if record["infrastructure_error"] else f"reward={record['reward']:.2f}"
            bar.set_postfix_str(f"{record['scenario_id']} {shown}", refresh=False)

    async def one(scenario: Scenario, trial: int) -> None:
        async with gate:
            record = await run_one(scenario, trial, options, judge=judge, scenario_hash=prints[scenario.id])
        async with lock:
            finished(record)

    complete = False
    try:
        if backend is not None:
            await backend.run(jobs, prints, finished)
        else:
            tasks = [asyncio.ensure_future(one(s, k)) for s, k in jobs]
            try:
                await asyncio.gather(*tasks)
            finally:
                for t in tasks:
                    t.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
        complete = True
    finally:
        if bar is not None:
            bar.close()
        records = sorted((r for r in done.values() if r["key"] in order), key=lambda r: order[r["key"]])
        result = write_results(out, records, batch, complete=complete)
        result.ran = ran
    return result


async def run_one(
    scenario: Scenario, trial: int, options: RunOptions, *, judge: Model | None = None, scenario_hash: str = ""
) -> dict[str, Any]:
    """One run and its grade as a results record; a crash inside rein becomes internal_error."""
    started = dt.datetime.now(dt.UTC)
    try:
        if scenario.kind == "jigsaw":
            from scenarios.jigsaw.scenario import run_jigsaw_scenario

            episode = await run_jigsaw_scenario(scenario, options, trial)
        else:
            episode = await run_scenario(scenario, options, trial)
        breakdown = await evaluate(scenario, episode, judge=judge, prices=options.prices)
    except Exception as exc:  # a bug must not sink the batch; the record carries the traceback
        detail = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        where = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ else None
        if where is not None:
            detail += f" (at {Path(where.filename).name}:{where.lineno})"
        t = Trajectory(scenario_id=scenario.id, trial=trial, seed=scenario.seed + trial, domain=scenario.domain)
        t.termination, t.termination_detail = "internal_error", detail
        episode = Episode(t, None)
        breakdown = RewardBreakdown(reward=0.0, success=False, notes=[f"internal error: {detail}"])
    return make_record(scenario, trial, episode, breakdown, scenario_hash=scenario_hash, started=started)


def make_record(
    scenario: Scenario,
    trial: int,
    episode: Episode,
    breakdown: RewardBreakdown,
    *,
    scenario_hash: str = "",
    started: dt.datetime | None = None,
) -> dict[str, Any]:
    """The results record of one graded run (a line of runs.jsonl)."""
    started = started or dt.datetime.now(dt.UTC)
    t = episode.trajectory
    return {
        "key": f"{scenario.id}#{trial}",
        "scenario_id": scenario.id,
        "trial": trial,
        "scenario_hash": scenario_hash,
        "domain": scenario.domain,
        "kind": scenario.kind,
        "error_types": scenario.error_types(),
        "tags": list(scenario.tags),
        "source": scenario.source,
        "termination": t.termination,
        "reward": breakdown.reward,
        "success": breakdown.success,
        "infrastructure_error": breakdown.infrastructure_error,
        "cost_usd": round(float(t.agent_usage.get("cost_usd", 0)) + float(t.user_usage.get("cost_usd", 0)), 8),
        "started_at": started.isoformat(timespec="seconds"),
        "evaluation": breakdown.model_dump(mode="json"),
        "trajectory": t.model_dump(mode="json"),
    }


def write_results(out: Path, records: list[dict[str, Any]], batch: dict[str, Any], *, complete: bool) -> BatchResult:
    """Write results.json (atomically) and report.html for the records so far."""
    from scenarios.report import render_report

    summary = summarize(records)
    payload = {
        "rein_results_version": RESULTS_VERSION,
        "complete": complete,
        "config": batch.get("config", {}),
        "summary": summary,
        "runs": records,
    }
    _atomic_write(out / "results.json", json.dumps(payload, ensure_ascii=False, indent=1) + "\n")
    _atomic_write(out / "report.html", render_report(payload))
    files = {name: str(out / name) for name in ("results.json", "report.html", "runs.jsonl", "batch.json")}
    return BatchResult(records=records, summary=summary, out_dir=out, complete=complete, files=files)


# ----- files ------------------------------------------------------------------------------


def _prepare(out: Path, batch: dict[str, Any], resume: bool) -> dict[str, dict[str, Any]]:
    """Check the folder against the batch and load finished runs (when resuming)."""
    runs, meta = out / "runs.jsonl", out / "batch.json"
    if not resume:
        if runs.exists() and runs.stat().st_size > 0:
            raise UserFacingError(
                f"{out} already holds results of a batch; pass --resume to finish it, or choose another --out"
            )
        _atomic_write(meta, json.dumps(batch, ensure_ascii=False, indent=1) + "\n")
        runs.write_text("", encoding="utf-8")
        return {}
    if meta.exists():
        try:
            previous = json.loads(meta.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise UserFacingError(f"{meta}: unreadable ({exc.msg}); cannot resume safely") from None
        _check_same(previous, batch, meta)
    _atomic_write(meta, json.dumps(batch, ensure_ascii=False, indent=1) + "\n")
    return _load_runs(runs, batch["scenarios"])


def _check_same(previous: dict[str, Any], batch: dict[str, Any], meta: Path) -> None:
    old_cfg, new_cfg = previous.get("config", {}), batch.get("config", {})
    changed = sorted(k for k in set(old_cfg) | set(new_cfg) if k not in ("trials", "concurrency") and old_cfg.get(k) != new_cfg.get(k))
    if changed:
        detail = "; ".join(f"{k}: {old_cfg.get(k)!r} → {new_cfg.get(k)!r}" for k in changed)
        raise UserFacingError(f"{meta}: the batch was started with other settings ({detail}); use another --out")
    old = previous.get("scenarios", {})
    edited = [sid for sid, h in batch["scenarios"].items() if sid in old and old[sid] != h]
    if edited:
        raise UserFacingError(
            f"{meta}: scenario(s) changed since the batch started: {', '.join(edited[:5])}; use another --out"
        )


def _load_runs(runs: Path, prints: dict[str, str]) -> dict[str, dict[str, Any]]:
    if not runs.exists():
        return {}
    done: dict[str, dict[str, Any]] = {}
    good_bytes = 0
    with runs.open("rb") as f:
        for raw in f:
            if not raw.endswith(b"\n"):
                break  # a line cut short by a kill: that run is redone
            try:
                record = json.loads(raw)
                key = record["key"]
            except (json.JSONDecodeError, KeyError, TypeError):
                break
            good_bytes += len(raw)
            if prints.get(record.get("scenario_id")) == record.get("scenario_hash"):
                done[key] = record
    if good_bytes != runs.stat().st_size:
        # Drop the damaged tail so that appended lines stay valid JSON Lines.
        with runs.open("r+b") as f:
            f.truncate(good_bytes)
    return done


def _append_line(path: Path, record: dict[str, Any]) -> None:
    line = json.dumps(record, ensure_ascii=False) + "\n"
    with path.open("a", encoding="utf-8") as f:
        f.write(line)
        f.flush()
        with contextlib.suppress(OSError):
            os.fsync(f.fileno())


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with tmp.open("w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        with contextlib.suppress(OSError):
            os.fsync(f.fileno())
    os.replace(tmp, path)


def _progress(total: int, initial: int, enabled: bool) -> Any:
    if not enabled:
        return None
    from tqdm import tqdm

    # disable=None turns the bar off when stderr is not a terminal (logs, CI).
    return tqdm(total=total, initial=initial, file=sys.stderr, unit="run", dynamic_ncols=True, disable=None)

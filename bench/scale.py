"""Runs/s of a scenario batch: the local backend vs `--backend ray` with 1, 2 and 4 actors.

The suite is the shipped example scenarios played by their agent scripts, with every model answer
held back by a fixed simulated latency (RunSpec.latency_s), so a run's time is the wait for the
"model", as with a remote LLM, and the figure is about orchestration rather than this machine's
cores. Each case runs the same (scenario, trial) jobs into a fresh folder. Run by hand:

    python bench/scale.py [--latency 0.1] [--trials 8] [--actors 1 2 4] [--ray-address auto]

Without --ray-address it starts Ray on this machine (4 logical CPUs, so 4 actors can be
placed); with one it joins that cluster and the actors spread over its nodes. `runs/s` is over
the whole batch, worker start included; `steady runs/s` is from the first finished run to the
last (the rate once the workers are up).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from scenarios.loading import collect_scenarios
from scenarios.ray_backend import RayBackend, RunSpec, build_run_options, import_ray
from scenarios.runner import run_batch
from scenarios.scenario import Scenario

EXAMPLES = Path(__file__).resolve().parents[1] / "scenarios" / "examples"


class Timed:
    """A backend that notes when each run finished, around another backend."""

    def __init__(self, inner: RayBackend) -> None:
        self.inner = inner
        self.times: list[float] = []

    async def run(self, jobs: Sequence[tuple[Scenario, int]], prints: dict[str, str], finished: Callable[[dict[str, Any]], None]) -> None:
        def note(record: dict[str, Any]) -> None:
            self.times.append(time.perf_counter())
            finished(record)

        await self.inner.run(jobs, prints, note)

    def progress_note(self) -> str:
        return self.inner.progress_note()


async def case(name: str, spec: RunSpec, trials: int, concurrency: int, actors: int | None, root: Path) -> dict[str, Any]:
    scenarios = collect_scenarios([EXAMPLES])
    options, _ = build_run_options(spec)
    backend = None if actors is None else Timed(RayBackend(spec, workers=actors, worker_concurrency=concurrency))
    started = time.perf_counter()
    result = await run_batch(scenarios, options, root / name, trials=trials, concurrency=concurrency,
                             progress=False, backend=backend)
    wall = time.perf_counter() - started
    runs = len(result.records)
    row: dict[str, Any] = {"case": name, "runs": runs, "wall_s": round(wall, 2), "runs_per_s": round(runs / wall, 2)}
    if backend is not None and len(backend.times) > 1:
        row["steady_runs_per_s"] = round((len(backend.times) - 1) / (backend.times[-1] - backend.times[0]), 2)
    else:
        row["steady_runs_per_s"] = row["runs_per_s"]
    row["success_rate"] = result.summary["success_rate"]
    return row


async def main(args: argparse.Namespace) -> list[dict[str, Any]]:
    ray = import_ray()
    if args.ray_address:
        ray.init(address=args.ray_address, log_to_driver=False)
    else:
        ray.init(num_cpus=max(args.actors), include_dashboard=False, log_to_driver=False)
    spec = RunSpec(model="scripted", latency_s=args.latency)
    rows = []
    try:
        with tempfile.TemporaryDirectory(prefix="rein-scale-") as tmp:
            rows.append(await case("local", spec, args.trials, args.concurrency, None, Path(tmp)))
            for n in args.actors:
                rows.append(await case(f"ray x{n}", spec, args.trials, args.concurrency, n, Path(tmp)))
    finally:
        ray.shutdown()
    return rows


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latency", type=float, default=0.1, help="seconds before every model answer")
    parser.add_argument("--trials", type=int, default=8, help="trials per scenario")
    parser.add_argument("--concurrency", type=int, default=1, help="runs at a time locally and in each actor")
    parser.add_argument("--actors", type=int, nargs="+", default=[1, 2, 4], help="actor counts to measure")
    parser.add_argument("--ray-address", default=None, help="cluster to join (default: start Ray here)")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    a = parser.parse_args()
    table = asyncio.run(main(a))
    if a.json:
        print(json.dumps(table))
    else:
        base = table[0]["steady_runs_per_s"]
        print(f"{'case':<8} {'runs':>5} {'wall s':>7} {'runs/s':>7} {'steady runs/s':>14} {'× local':>8}")
        for r in table:
            print(f"{r['case']:<8} {r['runs']:>5} {r['wall_s']:>7} {r['runs_per_s']:>7} {r['steady_runs_per_s']:>14} "
                  f"{r['steady_runs_per_s'] / base:>8.2f}")

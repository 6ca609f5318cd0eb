"""Jigsaw benchmark: environment step latency, sandbox overhead per step, and the solver's Acc/Score table.

Latency: a JSON swap step (no sandbox), a code step doing the same swap through the sandbox, a
bare sandbox round trip, a cold sandbox start, and encoding an observation as a PNG content part.
The sandbox overhead per step is the code step's median minus the JSON step's median.

Solver: Acc (puzzle fully solved) and Score (fraction of pieces in place) per grid size and level,
over the bundled colour photos × seeds (each seed cuts a different 80% window and shuffle); every
puzzle is played through the rein Agent, the solver as its model (SolverModel).
Bounded to a few minutes on one core. Run by hand:

    python bench/jigsaw.py [--seeds 20] [--grids 2 3 4 5 6] [--steps 300] [--json-out results.json]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from collections.abc import Callable
from typing import Any

from scenarios.jigsaw import JigsawConfig, JigsawEnv
from scenarios.jigsaw.jigsaw_eval import level_name, markdown_table, per_image_table, solver_bench
from tools.sandbox import SandboxSession


def timed(fn: Callable[[], Any], repeats: int) -> dict[str, float]:
    """Median, p95 and mean of fn's wall time in milliseconds."""
    samples = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - started) * 1000)
    samples.sort()
    return {
        "median_ms": statistics.median(samples),
        "p95_ms": samples[min(len(samples) - 1, int(0.95 * len(samples)))],
        "mean_ms": statistics.fmean(samples),
        "n": repeats,
    }


def latency(steps: int) -> dict[str, dict[str, float]]:
    """Step latencies of a 3×3 puzzle of the astronaut photo (512×512)."""
    out: dict[str, dict[str, float]] = {}
    for hints in (False, True):
        with JigsawEnv(JigsawConfig(grid=3, max_turns=4 * steps + 10, hints=hints)) as env:
            env.step("```python\nswap(0, 1)\n```")  # start the sandbox outside the timing
            suffix = "" if hints else " (no hints)"
            out[f"JSON swap step{suffix}"] = timed(lambda e=env: e.step({"action": "swap", "i": 0, "j": 1}), steps)
            out[f"code swap step{suffix}"] = timed(lambda e=env: e.step("```python\nswap(0, 1)\n```"), steps)
            if hints:
                out["code step with observation+crop+zoom"] = timed(
                    lambda e=env: e.step(
                        "```python\nimg = observation(state)\nzoom(crop(img, [0, 0, 0.5, 0.5]), 2)\n```"
                    ),
                    max(10, steps // 5),
                )
                out["PNG content part of an observation"] = timed(
                    lambda e=env: e.last_observation.content_parts(), max(10, steps // 10)
                )
    with SandboxSession() as session:
        session.run("x = 0")
        out["sandbox round trip (x = x + 1)"] = timed(lambda: session.run("x = x + 1"), steps * 2)

    def cold_start() -> None:
        with SandboxSession() as s:
            s.start()

    out["sandbox cold start"] = timed(cold_start, 10)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=20, help="seeds per photo for the solver table")
    parser.add_argument("--grids", type=int, nargs="+", default=[2, 3, 4, 5, 6])
    parser.add_argument("--steps", type=int, default=300, help="steps per latency measurement")
    parser.add_argument("--json-out", default=None, help="also write the numbers to this JSON file")
    args = parser.parse_args()

    print(f"# jigsaw bench on {platform.processor() or platform.machine()}, Python {platform.python_version()}\n")
    lat = latency(args.steps)
    print("| measurement | median ms | p95 ms | n |\n|---|---|---|---|")
    for name, row in lat.items():
        print(f"| {name} | {row['median_ms']:.2f} | {row['p95_ms']:.2f} | {row['n']} |")
    overhead = lat["code swap step (no hints)"]["median_ms"] - lat["JSON swap step (no hints)"]["median_ms"]
    print(f"\nsandbox overhead per step (code − JSON step, medians, no hints): {overhead:.2f} ms\n")

    levels: list[int | None] = [None, 0]
    started = time.perf_counter()
    cells = solver_bench(grids=args.grids, levels=levels, seeds=args.seeds,
                         progress=lambda line: print("  " + line, flush=True))
    print(f"\nsolver table ({time.perf_counter() - started:.0f}s):\n")
    print(markdown_table(cells))
    print("\nAcc per photo:\n")
    print(per_image_table(cells))
    for cell in cells:
        if cell.failures:
            shown = ", ".join(cell.failures[:8]) + (" ..." if len(cell.failures) > 8 else "")
            print(f"  unsolved {cell.grid}x{cell.grid} {level_name(cell.level)}: {shown}")
    if args.json_out:
        with open(args.json_out, "w", encoding="utf-8") as handle:
            json.dump({"latency": lat, "sandbox_overhead_ms": overhead,
                       "solver": [c.__dict__ for c in cells]}, handle, indent=2)


if __name__ == "__main__":
    main()

"""The offline ReIn detector: latency per turn, and its activations on the recovery suite.

    python bench/detector.py                  # latency (p50/p95 over test turns) + recovery-suite check
    python bench/detector.py --no-suite       # latency only

Latency: each test-split user turn of interventions/data/dialogues.jsonl is classified alone, in
its context and its domain's tools, with the embedding cache cleared first (a cold turn, except
for the tool and error-type descriptions, embedded once per process and so kept warm: for the
linear detector MiniLM passes over the request, the agent turn and, when its features compare the
request with them, the tools and earlier user turns; for the pair encoder one pass over the pair),
after one warm-up call that loads the encoder. The load average is printed with it, since the
machine is often shared.

Recovery-suite check: every dialogue of scenarios/recovery/suite.yaml is replayed with its own
gold agent script (no model) and ReIn with the offline detector; the suite's report then counts
activations at the error turn and on controls. The detector was neither trained nor tuned on the
suite; this is a downstream check only.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from interventions.detector_eval import row_tools  # noqa: E402
from interventions.dialogue_dataset import context_turns, read_dialogues  # noqa: E402
from interventions.error_map import load_error_map  # noqa: E402
from interventions.offline import OfflineDetector, tool_texts  # noqa: E402


def latency(detector: OfflineDetector, limit: int) -> dict[str, float]:
    """p50/p95/max milliseconds per cold turn."""
    import agent.embeddings as embeddings

    dialogues = [d for d in read_dialogues() if d.split == "test"]
    rows = context_turns(dialogues)[:limit]
    tools = row_tools(rows, dialogues)
    emap = load_error_map()
    prototypes = [emap.error_types[n].description for n in emap.labels]
    detector.classify_turns(["warm up"], [[]], tools=[tools[0]])
    times = []
    for r, t in zip(rows, tools, strict=True):
        embeddings._cache.clear()  # a cold turn: no cached embedding of its text or its context
        # The agent's tools and the error types' descriptions are the same on every turn of a
        # process: embedded once, on its first turn.
        embeddings.embed_texts([*tool_texts(t), *prototypes])
        start = time.perf_counter()
        detector.classify_turns([r.text], [r.history], tools=[t])
        times.append((time.perf_counter() - start) * 1000)
    times.sort()
    return {"turns": len(times), "p50_ms": round(statistics.median(times), 1),
            "p95_ms": round(times[int(0.95 * (len(times) - 1))], 1), "max_ms": round(times[-1], 1)}


async def suite_check(detector: OfflineDetector) -> str:
    """The recovery report's activation lines for ReIn (offline) over the suite's scripted dialogues."""
    from interventions import ReInIntervention
    from scenarios.loading import load_scenarios
    from scenarios.orchestrator import RunOptions, script_model
    from scenarios.recovery.build import SUITE_PATH
    from scenarios.recovery.report import summarize_arm
    from scenarios.runner import run_batch

    suite = load_scenarios(SUITE_PATH)
    options = RunOptions(model=script_model, interventions=lambda: [ReInIntervention(detector=detector)])
    with tempfile.TemporaryDirectory() as out:
        result = await run_batch(suite, options, Path(out), progress=False)
    arm = summarize_arm("rein", result.records)
    return (f"Recovery suite ({len(suite)} dialogues, gold scripts, no model): activated at the error turn "
            f"{arm.activation.cell()}, right type {arm.right_type.cell()}, right recovery tool {arm.right_tool.cell()}; "
            f"controls with an activation {arm.false_activation.cell()}.")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--turns", type=int, default=200, help="test turns timed")
    parser.add_argument("--no-suite", action="store_true", help="skip the recovery-suite check")
    args = parser.parse_args(argv)
    detector = OfflineDetector()
    before = os.getloadavg()[0]
    timing = latency(detector, args.turns)
    load = f"load average {before:.1f} before, {os.getloadavg()[0]:.1f} after, {os.cpu_count()} cores"
    print(f"Latency per turn (cold, CPU; {type(detector.classifier).__name__}): {timing}; {load}")
    if not args.no_suite:
        print(asyncio.run(suite_check(detector)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

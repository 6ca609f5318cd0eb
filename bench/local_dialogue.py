"""Where an embedded model's time goes in recovery-suite dialogues: tokens evaluated and reused per call.

Runs the named scenarios of scenarios/recovery/suite.yaml, one after another in one process (as
bench/recovery.py does, so the loaded model and its prefix states carry over between dialogues),
for each arm, and reads the loaded model's generation records (LoadedModel.calls) after each
dialogue. Run by hand:

    python bench/local_dialogue.py --model local:qwen2.5-coder-0.5b \\
        --ids recovery-retail-opening-vague_reference --arms none,rein --out /tmp/dialogue

Per dialogue it prints one JSON row: the model requests and llama.cpp generations (two per
action step), the prompt tokens evaluated and reused (from the context or a restored prefix
state), the tokens generated, the seconds in the model and in the whole dialogue, and a digest of
the transcript (roles, texts, tool calls and arguments; not ids or timings), so that two runs can
be checked to have said exactly the same. OUT/dialogues.jsonl holds the rows and OUT/calls.jsonl
every generation's record.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import hashlib
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agent.models import resolve_model  # noqa: E402
from agent.models.local import LocalModel  # noqa: E402
from bench.recovery import arm_options  # noqa: E402
from scenarios.loading import load_scenarios  # noqa: E402
from scenarios.recovery.build import SUITE_PATH  # noqa: E402
from scenarios.runner import run_batch  # noqa: E402


def transcript_digest(trajectory: dict[str, Any]) -> str:
    """A sha256 of what was said: each message's source, role, text and tool calls."""
    said = [
        [m.get("source"), m.get("role"), m.get("content"), [(c["name"], c["arguments"]) for c in m.get("tool_calls") or []]]
        for m in trajectory["messages"]
    ]
    return hashlib.sha256(json.dumps(said, ensure_ascii=False).encode()).hexdigest()[:16]


def summary(calls: list[dict[str, Any]]) -> dict[str, Any]:
    """Totals over a dialogue's generation records."""
    def total(key: str) -> int:
        return sum(int(c[key]) for c in calls)

    return {
        "generations": len(calls),
        "prompt_tokens": total("prompt_tokens"),
        "evaluated": total("evaluated_tokens"),
        "reused": total("reused_tokens"),
        "restored": total("restored_tokens"),
        "generated": total("generated_tokens"),
        "restores": sum(c["step"] == "restore" for c in calls),
        "misses": sum(c["step"] == "evaluate" for c in calls),
        "prepare_s": round(sum(c["prepare_seconds"] for c in calls), 2),
        "model_s": round(sum(c["seconds"] for c in calls), 2),
    }


async def run(args: argparse.Namespace) -> int:
    scenarios = {s.id: s for s in load_scenarios(SUITE_PATH)}
    ids = [i.strip() for i in args.ids.split(",") if i.strip()]
    unknown = [i for i in ids if i not in scenarios]
    if unknown:
        print(f"error: no such scenario: {', '.join(unknown)}", file=sys.stderr)
        return 2
    model = resolve_model(args.model)
    if not isinstance(model, LocalModel):
        print(f"error: {args.model} is not an embedded model", file=sys.stderr)
        return 2
    loaded = await asyncio.to_thread(model.load)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows_file = (out / "dialogues.jsonl").open("w", encoding="utf-8")
    calls_file = (out / "calls.jsonl").open("w", encoding="utf-8")
    for arm in [a.strip() for a in args.arms.split(",") if a.strip()]:
        for sid in ids:
            loaded.calls.clear()
            started = time.perf_counter()
            result = await run_batch(
                [scenarios[sid]], arm_options(arm, model, "offline"), out / arm / sid,
                config={"model": args.model, "intervention": arm}, progress=False,
            )
            wall = time.perf_counter() - started
            record = result.records[0]
            calls = [dataclasses.asdict(c) for c in loaded.calls]
            for i, c in enumerate(calls):
                calls_file.write(json.dumps({"arm": arm, "id": sid, "i": i, **c}) + "\n")
            usage = record["trajectory"].get("agent_usage") or {}
            row = {
                "arm": arm,
                "id": sid,
                "requests": usage.get("requests"),
                **summary(calls),
                "dialogue_s": round(wall, 1),
                "success": record["success"],
                "transcript": transcript_digest(record["trajectory"]),
            }
            rows_file.write(json.dumps(row) + "\n")
            rows_file.flush()
            calls_file.flush()
            print(json.dumps(row), flush=True)
    rows_file.close()
    calls_file.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="local:qwen2.5-coder-0.5b")
    parser.add_argument("--ids", required=True, help="comma-separated scenario ids, run in this order")
    parser.add_argument("--arms", default="none,rein", help="comma-separated arms, each over every id")
    parser.add_argument("--out", required=True, help="output folder")
    return asyncio.run(run(parser.parse_args(argv)))


if __name__ == "__main__":
    raise SystemExit(main())

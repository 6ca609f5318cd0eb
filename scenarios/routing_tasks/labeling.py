"""Oracle labels from real runs: every task in every mode, recorded as a cassette per model.

    python -m scenarios.routing_tasks.labeling --model NAME --out labels.jsonl \
        [--cassettes DIR] [--replay] [--split test] [--limit N] [--graph DIR]

Each task runs as one user turn through agent.runtime.Agent in instant, reasoning and agentic
mode (the A²FM paths), greedy, and its final answer is graded. A row per task (see
agent.routing.oracle) records success, tokens and latency of each mode and the oracle label.
Model calls go through a CassetteModel (DIR/<model>.jsonl); with --replay no model is loaded and
the cassette alone answers, so labels and the benchmark are recomputed without the model.
Retrieval tasks need a graph built over the MuSiQue corpus (--graph); without one they are skipped.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from agent.messages import ModelSettings
from agent.models import CassetteModel, Model, resolve_model
from agent.modes import A2FM_MODES, StepLimits
from agent.plugin_api import MODES, Mode
from agent.routing.oracle import ModeRun, OracleRow, oracle_label
from scenarios.routing_tasks.graders import grade
from scenarios.routing_tasks.task import RoutingTask, load_tasks
from tools import Tool

SYSTEM = "You are a helpful assistant. Answer the user's question."


@dataclass(frozen=True)
class LabelSettings:
    """How each run is made."""

    max_tokens: int = 256
    """Cap on each model call's output."""
    agentic_steps: int = 6
    """Step cap of the agentic mode."""
    graph_dir: str | None = None
    """Graph folder for retrieval tasks (None: skip them)."""


def task_tools(task: RoutingTask, graph_dir: str | None = None) -> list[Tool] | None:
    """The tools a task's runs are offered (read tools only), or None when they are not available."""
    out: list[Tool] = []
    for name in task.tools:
        if name == "calculate":
            from tools.builtin import calculate

            out.append(calculate)
        elif name in ("retail", "airline"):
            from scenarios.domains import load_domain

            env = load_domain(name)
            out += [t for n, t in env.agent_toolkit().as_dict().items()
                    if not env.is_mutating(n) and n != "transfer_to_human_agents"]
        elif name == "retrieval":
            if graph_dir is None:
                return None
            from graphs.tool import retrieval_toolkit

            out += list(retrieval_toolkit(graph_dir).as_dict().values())
        else:
            raise ValueError(f"task {task.id}: unknown toolkit {name!r}")
    return out


async def run_mode(model: Model, task: RoutingTask, mode: Mode, tools: list[Tool], settings: LabelSettings) -> ModeRun:
    """One task in one mode, as one agent turn, graded."""
    from agent.runtime import Agent

    agent = Agent(model, tools, SYSTEM, step_limits=StepLimits(agentic=settings.agentic_steps),
                  mode_config=A2FM_MODES, settings=ModelSettings(temperature=0.0, max_tokens=settings.max_tokens),
                  checkpointer="memory")
    started = time.perf_counter()
    try:
        result = await agent.ainvoke(task.query, mode=mode)
    finally:
        await agent.aclose()
    usage = result.ledger.usage
    return ModeRun(
        success=grade(task, result.output or ""), tokens=usage.total_tokens, output_tokens=usage.output_tokens,
        latency_s=round(time.perf_counter() - started, 3), steps=usage.requests,
        tool_calls=sum(len(m.tool_calls) for m in result.messages), termination=str(result.termination),
        answer=result.output or "",
    )


async def label_tasks(model: Model, tasks: Sequence[RoutingTask], settings: LabelSettings = LabelSettings(),
                      model_name: str | None = None) -> tuple[list[OracleRow], list[str]]:
    """Run every task in every mode; the rows, and the ids of tasks skipped for want of tools."""
    rows, skipped = [], []
    for task in tasks:
        tools = task_tools(task, settings.graph_dir)
        if tools is None:
            skipped.append(task.id)
            continue
        runs: dict[str, ModeRun] = {m: await run_mode(model, task, m, tools, settings) for m in MODES}
        rows.append(OracleRow(
            id=task.id, query=task.query, model=model_name or model.name, runs=runs, split=task.split,
            oracle=oracle_label(runs),
            extra={"kind": task.kind, "family": task.family, "style": task.style, "source_item": task.source_item},
        ))
    return rows, skipped


def cassette_path(directory: Path, model_name: str) -> Path:
    """Where a model's cassette lives: one file per model, named after it."""
    return directory / (re.sub(r"[^A-Za-z0-9_.-]+", "_", model_name) + ".jsonl")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run routing tasks in every mode and write oracle labels.")
    parser.add_argument("--model", required=True, help="model name (rein's resolver), e.g. local:qwen2.5-0.5b")
    parser.add_argument("--out", type=Path, required=True, help="labels file to write (JSON Lines)")
    parser.add_argument("--tasks", type=Path, default=None, help="task file (default: the shipped set)")
    parser.add_argument("--cassettes", type=Path, default=Path("routing_cassettes"), help="cassette folder")
    parser.add_argument("--replay", action="store_true", help="answer from the cassette only; load no model")
    parser.add_argument("--split", default=None, help="only this split")
    parser.add_argument("--limit", type=int, default=None, help="only the first N tasks (after --split)")
    parser.add_argument("--graph", default=None, help="graph folder for retrieval tasks")
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--agentic-steps", type=int, default=6)
    args = parser.parse_args(argv)
    tasks = load_tasks(args.tasks, args.split) if args.tasks else load_tasks(split=args.split)
    tasks = tasks[: args.limit]
    path = cassette_path(args.cassettes, args.model)
    model = (CassetteModel(path, mode="replay") if args.replay
             else CassetteModel(path, resolve_model(args.model), mode="auto"))
    settings = LabelSettings(args.max_tokens, args.agentic_steps, args.graph)
    started = time.perf_counter()
    rows, skipped = asyncio.run(label_tasks(model, tasks, settings, model_name=args.model))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("".join(json.dumps(r.as_json(), ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    counts = {k: sum(r.oracle == k for r in rows) for k in (*MODES, "none")}
    print(f"{len(rows)} tasks labelled with {args.model} in {time.perf_counter() - started:.1f} s "
          f"({len(skipped)} skipped, no tools) -> {args.out}; cassette {path}")
    print("oracle labels: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Oracle labels from real runs: every task in every mode, recorded as a cassette per model.

    python -m scenarios.routing_tasks.labeling --model NAME --out labels.jsonl \
        [--cassettes DIR] [--replay] [--split test] [--limit N] [--graph DIR] [--order stratified|file]

Each task runs as one user turn through agent.runtime.Agent in instant, reasoning and agentic
mode (the A²FM paths), greedy or (--temperature T --seed N) sampled, and its final answer is
graded. A row per task and pass (see agent.routing.oracle) records success, tokens and latency of
each mode and the oracle label; reading the file merges a task's passes. One file holds every
pass: run the command once greedy and once more with a seed, on the same --out.
Model calls go through a CassetteModel (DIR/<model>.jsonl); with --replay no model is loaded and
the cassette alone answers, so labels and the benchmark are recomputed without the model;
--verify recomputes every row of the file that way and compares (verify.py); --drop moves the rows
that differ aside for relabelling, --prune keeps only the cassette calls the rows use.

The run is resumable: each row is appended to --out (flushed) as soon as the task's three modes
are done, and a rerun skips the tasks --out already holds for the model (labels_file.py). Runs of
one model can share the work: `--shard 1/2` and `--shard 2/2` at once take alternate tasks and
append to the same --out and cassette, each append under a file lock. By
default tasks run in a stratified order, so any prefix of a run samples every split and kind.
Retrieval tasks need a graph over the MuSiQue corpus: `--graph DIR` loads it, or builds it into
DIR when DIR is empty (graph.py); without --graph they are skipped.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from agent.errors import UserFacingError
from agent.messages import ModelSettings
from agent.models import CassetteModel, Model, resolve_model
from agent.modes import A2FM_MODES, StepLimits
from agent.plugin_api import MODES, Mode
from agent.routing.oracle import ModeRun, OracleRow, model_slug, oracle_label, pass_name
from scenarios.routing_tasks.graders import grade
from scenarios.routing_tasks.graph import MUSIQUE_DIR, RETRIEVER, ensure_graph
from scenarios.routing_tasks.labels_file import ORDERS, append_row, clock, resume, stratified_order
from scenarios.routing_tasks.task import RoutingTask, load_tasks
from scenarios.routing_tasks.tool_cassette import ToolCassette
from tools import Tool

SYSTEM = "You are a helpful assistant. Answer the user's question."


@dataclass(frozen=True)
class LabelSettings:
    """How each run is made."""

    max_tokens: int = 512
    """Cap on each model call's output: the embedded model's own default, so that the labels say
    what each mode does as shipped (a lower cap cuts reasoning short, which flatters routing)."""
    temperature: float = 0.0
    """Sampling temperature (0: greedy)."""
    seed: int | None = None
    """Sampling seed; needed when temperature > 0."""
    agentic_steps: int = 6
    """Step cap of the agentic mode."""
    graph_dir: str | None = None
    """Graph folder for retrieval tasks (None: skip them)."""
    tool_cassette: str | None = None
    """File recording the retrieval tool's results, replayed when present (None: the tool always runs)."""

    @property
    def pass_name(self) -> str:
        """The pass these settings make: 'greedy' or e.g. 't0.7-seed1'."""
        return pass_name(self.temperature, self.seed)


@dataclass
class ToolCache:
    """Toolkits built once per run: loading the retrieval graph takes seconds, so it is not redone per task."""

    graph_dir: str | None = None
    """Graph folder for retrieval tasks (None: they get no tools and are skipped)."""
    cassette: ToolCassette | None = None
    """Where the retrieval tool's results are recorded and replayed from (None: it always runs)."""
    _retrieval: list[Tool] | None = field(default=None, repr=False)
    """The retrieval tools, once loaded."""

    def retrieval(self) -> list[Tool] | None:
        """The retrieval toolkit's tools over the graph, or None without a graph."""
        if self.graph_dir is None:
            return None
        if self._retrieval is None:
            from graphs.tool import retrieval_toolkit

            tools = list(retrieval_toolkit(self.graph_dir, retriever=RETRIEVER).as_dict().values())
            self._retrieval = [self.cassette.wrap(t) for t in tools] if self.cassette is not None else tools
        return self._retrieval

    @classmethod
    def for_settings(cls, settings: LabelSettings) -> ToolCache:
        """The cache a labelling run with these settings uses (its tool cassette keeps new results at once)."""
        cassette = ToolCassette(settings.tool_cassette) if settings.tool_cassette and settings.graph_dir else None
        return cls(settings.graph_dir, cassette)


def task_tools(task: RoutingTask, graph_dir: str | None = None, cache: ToolCache | None = None) -> list[Tool] | None:
    """The tools a task's runs are offered (read tools only), or None when they are not available."""
    cache = cache or ToolCache(graph_dir)
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
            retrieval = cache.retrieval()
            if retrieval is None:
                return None
            out += retrieval
        else:
            raise ValueError(f"task {task.id}: unknown toolkit {name!r}")
    return out


async def run_mode(model: Model, task: RoutingTask, mode: Mode, tools: list[Tool], settings: LabelSettings) -> ModeRun:
    """One task in one mode, as one agent turn, graded."""
    from agent.runtime import Agent

    agent = Agent(model, tools, SYSTEM, step_limits=StepLimits(agentic=settings.agentic_steps),
                  mode_config=A2FM_MODES, settings=ModelSettings(temperature=settings.temperature, seed=settings.seed,
                                         max_tokens=settings.max_tokens),
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


async def self_route(model: Model, task: RoutingTask, tools: list[Tool]) -> dict[str, object]:
    """The model's own choice of mode for the task (A²FM self-routing: one short classification call,
    offered the task's tool names as an agent would be), so `rein route eval` can score it from the file."""
    from agent.routing import SelfRouter

    decision, response = await SelfRouter().classify(task.query, model, [t.name for t in tools])
    usage = response.usage if response is not None else None
    return {"mode": decision.mode, "tokens": usage.total_tokens if usage else 0,
            "output_tokens": usage.output_tokens if usage else 0, "reply": (response.text if response else "")[:80]}


async def label_tasks(model: Model, tasks: Sequence[RoutingTask], settings: LabelSettings = LabelSettings(),
                      model_name: str | None = None,
                      on_row: Callable[[OracleRow], None] | None = None,
                      tool_cache: ToolCache | None = None) -> tuple[list[OracleRow], list[str]]:
    """Run every task in every mode; the rows, and the ids of tasks skipped for want of tools.

    on_row is called with each row as soon as its task is done (the labels file appends it there);
    tool_cache: toolkits to reuse across calls (default: built from the settings).
    """
    rows, skipped = [], []
    cache = tool_cache or ToolCache.for_settings(settings)
    for task in tasks:
        tools = task_tools(task, cache=cache)
        if tools is None:
            skipped.append(task.id)
            continue
        if cache.cassette is not None:
            cache.cassette.scope = f"{task.id}/{settings.pass_name}"
        runs: dict[str, ModeRun] = {m: await run_mode(model, task, m, tools, settings) for m in MODES}
        row = OracleRow(
            id=task.id, query=task.query, model=model_name or model.name, runs=runs, split=task.split,
            oracle=oracle_label(runs),
            extra={"pass": settings.pass_name, "kind": task.kind, "family": task.family, "style": task.style,
                   "source_item": task.source_item, "self_route": await self_route(model, task, tools)},
        )
        rows.append(row)
        if on_row is not None:
            on_row(row)
    return rows, skipped


@dataclass
class Progress:
    """Tasks done out of the run's total, elapsed time and ETA, one line per task on stderr."""

    total: int
    """Tasks the run has to label (those already in --out excluded)."""
    before: int = 0
    """Tasks already in --out when the run started."""
    done: int = 0
    """Tasks labelled by this run."""
    started: float = field(default_factory=time.perf_counter)
    """When the run started (perf_counter)."""

    def line(self, row: OracleRow) -> str:
        """The progress line after `row`."""
        self.done += 1
        elapsed = time.perf_counter() - self.started
        eta = elapsed / self.done * (self.total - self.done)
        ok = "".join(m[0].upper() if r.success else "." for m, r in row.runs.items())
        return (f"[{self.before + self.done}/{self.before + self.total}] {row.id} ({row.split}, "
                f"{row.extra.get('kind')}) {ok} -> {row.oracle}; {sum(r.latency_s for r in row.runs.values()):.1f} s; "
                f"elapsed {clock(elapsed)}, ETA {clock(eta)}")


def cassette_path(directory: Path, model_name: str) -> Path:
    """Where a model's cassette lives: one file per model, named after it."""
    return directory / (model_slug(model_name) + ".jsonl")


def tool_cassette_path(directory: Path, model_name: str) -> Path:
    """Where the retrieval results of a model's runs are recorded, beside its model cassette."""
    return directory / (model_slug(model_name) + ".tools.jsonl")


def label_to_file(model: Model, tasks: Sequence[RoutingTask], out: Path, settings: LabelSettings = LabelSettings(),
                  model_name: str | None = None, log: Callable[[str], None] | None = None) -> tuple[int, list[str]]:
    """Label the tasks `out` does not yet hold for the model, appending each row as it is done.

    Returns how many rows were added and the ids skipped for want of tools.
    """
    name = model_name or model.name
    state = resume(out, name, settings.pass_name)
    todo = [t for t in tasks if t.id not in state.done]
    progress = Progress(total=len(todo), before=len(tasks) - len(todo))
    if log is not None and state.done:
        log(f"{out}: {len(tasks) - len(todo)} of these {len(tasks)} tasks already labelled for {name} "
            f"({settings.pass_name}); {len(todo)} to go")

    def write(row: OracleRow) -> None:
        append_row(out, row.as_json())
        if log is not None:
            log(progress.line(row))

    rows, skipped = asyncio.run(label_tasks(model, todo, settings, model_name=name, on_row=write))
    return len(rows), skipped


def shard(text: str) -> tuple[int, int]:
    """Parse --shard K/N (1 <= K <= N)."""
    k, sep, n = text.partition("/")
    if not (sep and k.isdigit() and n.isdigit() and 1 <= int(k) <= int(n)):
        raise argparse.ArgumentTypeError(f"expected K/N with 1 <= K <= N, e.g. 1/2; got {text!r}")
    return int(k), int(n)


def _regrade(args: argparse.Namespace) -> int:
    """--regrade: every recorded run of --out graded again by the current graders."""
    from scenarios.routing_tasks.labels_file import regrade_file

    try:
        rows, changed = regrade_file(args.out, load_tasks(args.tasks) if args.tasks else load_tasks())
    except UserFacingError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"regraded {rows} rows of {args.out}: {changed} runs changed their verdict")
    return 0


def _status(args: argparse.Namespace) -> int:
    """--status: how far --out got, per model and pass."""
    from scenarios.routing_tasks.labels_file import status

    try:
        lines = status(args.out, load_tasks(args.tasks) if args.tasks else load_tasks())
    except UserFacingError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print("\n".join(lines) if lines else f"{args.out} holds no rows")
    return 0


def _verify(args: argparse.Namespace) -> int:
    """--verify: every row of --model recomputed from the cassette alone and compared."""
    from scenarios.routing_tasks.verify import verify_labels

    try:
        tasks = load_tasks(args.tasks) if args.tasks else load_tasks()
        if args.graph is not None:
            ensure_graph(args.graph, args.musique_dir)
        settings = LabelSettings(max_tokens=args.max_tokens, agentic_steps=args.agentic_steps, graph_dir=args.graph,
                                 tool_cassette=str(tool_cassette_path(args.cassettes, args.model)))
        report = verify_labels(args.out, cassette_path(args.cassettes, args.model), args.model, tasks, settings,
                               prune=args.prune, drop=args.drop, recover=args.recover)
    except UserFacingError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(report.summary())
    if args.prune and not report.pruned:
        print("the cassette was not pruned: not every row matched", file=sys.stderr)
    return 1 if len(report.differ) > report.dropped else 0


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run routing tasks in every mode and write oracle labels.")
    parser.add_argument("--model", help="model name (rein's resolver), e.g. local:qwen2.5-0.5b")
    parser.add_argument("--out", type=Path, required=True,
                        help="labels file (JSON Lines); rows are appended, tasks it holds are skipped")
    parser.add_argument("--tasks", type=Path, default=None, help="task file (default: the shipped set)")
    parser.add_argument("--cassettes", type=Path, default=Path("routing_cassettes"), help="cassette folder")
    parser.add_argument("--replay", action="store_true", help="answer from the cassette only; load no model")
    parser.add_argument("--regrade", action="store_true",
                        help="grade every run in --out again from its recorded answer (current graders); run nothing")
    parser.add_argument("--status", action="store_true",
                        help="print how many tasks of each split --out holds per model and pass; run nothing")
    parser.add_argument("--verify", action="store_true",
                        help="recompute every row of --model in --out from the cassette (no model) and compare")
    parser.add_argument("--drop", action="store_true",
                        help="with --verify: move the rows that differ to <out>.dropped, so the next run labels them again")
    parser.add_argument("--prune", action="store_true",
                        help="with --verify: when every row matches, keep only the cassette calls the rows use")
    parser.add_argument("--recover", action="store_true",
                        help="with --verify: find the retrieve results a run saw among nearby score digits "
                             "(a graph built on another machine) and record them in the tool cassette")
    parser.add_argument("--split", default=None, help="only this split")
    parser.add_argument("--order", choices=ORDERS, default="stratified",
                        help="stratified (default): any prefix samples every split and kind; file: file order")
    parser.add_argument("--shard", type=shard, default=None, metavar="K/N",
                        help="only every N-th task from the K-th (after --order): run shards 1/N … N/N at once, "
                             "one per core, on the same --out and --cassettes")
    parser.add_argument("--limit", type=int, default=None, help="only the first N tasks (after --split and --order)")
    parser.add_argument("--graph", default=None,
                        help="graph folder for retrieval tasks; built there from the MuSiQue files when empty")
    parser.add_argument("--musique-dir", type=Path, default=MUSIQUE_DIR,
                        help="MuSiQue-100 files to build the graph from (default: ../shared/data/musique)")
    parser.add_argument("--temperature", type=float, default=0.0, help="sampling temperature (default 0: greedy)")
    parser.add_argument("--seed", type=int, default=None, help="sampling seed (needed with --temperature)")
    parser.add_argument("--max-tokens", type=int, default=LabelSettings.max_tokens,
                        help="cap on each model call's output (default %(default)s, the embedded model's default)")
    parser.add_argument("--agentic-steps", type=int, default=LabelSettings.agentic_steps,
                        help="step cap of the agentic mode (default %(default)s)")
    args = parser.parse_args(argv)
    if args.regrade:
        return _regrade(args)
    if args.status:
        return _status(args)
    if not args.model:
        parser.error("--model is required (except with --regrade)")
    if (args.prune or args.drop or args.recover) and not args.verify:
        parser.error("--prune, --drop and --recover go with --verify: they act on what recomputing the rows from the cassette shows")
    if args.verify:
        return _verify(args)
    if args.temperature > 0 and args.seed is None:
        parser.error("--temperature above 0 needs --seed: a sampled pass must be reproducible from its cassette")
    if args.temperature <= 0 and args.seed is not None:
        parser.error("--seed only applies to a sampled pass: give --temperature above 0")
    try:
        tasks = load_tasks(args.tasks, args.split) if args.tasks else load_tasks(split=args.split)
        if args.order == "stratified":
            tasks = stratified_order(tasks)
        if args.shard is not None:
            k, n = args.shard
            tasks = tasks[k - 1 :: n]
        tasks = tasks[: args.limit]
        if args.graph is not None and any("retrieval" in t.tools for t in tasks):
            ensure_graph(args.graph, args.musique_dir)
        path = cassette_path(args.cassettes, args.model)
        model = (CassetteModel(path, mode="replay") if args.replay
                 else CassetteModel(path, resolve_model(args.model), mode="auto"))
        settings = LabelSettings(max_tokens=args.max_tokens, temperature=args.temperature, seed=args.seed,
                                 agentic_steps=args.agentic_steps, graph_dir=args.graph,
                                 tool_cassette=str(tool_cassette_path(args.cassettes, args.model)))
        started = time.perf_counter()
        added, skipped = label_to_file(model, tasks, args.out, settings, model_name=args.model, log=_stderr)
    except UserFacingError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    from agent.routing.oracle import load_oracle

    try:
        rows = load_oracle(args.out, model=args.model)
    except UserFacingError:  # nothing labelled for this model yet (e.g. every task was skipped)
        rows = []
    counts = {k: sum(r.oracle == k for r in rows) for k in (*MODES, "none")}
    print(f"{added} tasks labelled with {args.model} in {time.perf_counter() - started:.1f} s "
          f"({len(skipped)} skipped, no tools); {len(rows)} rows for it in {args.out}; cassette {path}")
    print("oracle labels: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

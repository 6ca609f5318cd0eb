"""Load test of rein's OpenAI-compatible server on loopback.

N conversations × T turns (at most --concurrency of them at once, default all) against a
deterministic agent with SQLite (or Postgres) threads, through the real `openai` client, with the
server process stopped (SIGTERM, graceful) and a new one started on the same database between two
turns. Afterwards every thread is read back: each must hold exactly the conversation's turns, in
order, once. Prints p50/p95/p99 request latency, turns/s and the server process's CPU per turn.

    python bench/server_load.py                      # 50 conversations × 5 turns, restart after turn 2
    python bench/server_load.py --conversations 10 --turns 3 --restart-after 1
    python bench/server_load.py --agent echo --sweep # the table in docs/server.md (SQLite and Postgres)

--agent function (default) answers after --think-ms; --agent echo is the shipped zero-cost
EchoModel, so every millisecond measured is rein's.

Conversations rotate through three client styles: a thread header with only the new message, the
full history keyed by the `user` field, and the full history with no key (thread derived from the
conversation); every other conversation streams. The server runs in its own process (uvicorn, as
`rein serve` runs it), or in a thread of this one with --in-process. Requests go to 127.0.0.1
only; the run is bounded by --max-seconds. The throwaway PostgreSQL cluster (--postgres) and the
two-process run (--processes) are in bench/server_load_processes.py.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from openai import AsyncOpenAI

from agent.messages import ModelRequest
from agent.models import FunctionModel
from agent.models.testing import EchoModel
from agent.planted_reasoning import surface_dialogue
from agent.runtime import Agent
from agent.server import BackgroundServer, ServerConfig, create_app, key_id, storage_id

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout, for bench.* (as other benches do)
from bench.server_load_processes import processes, summary, temp_postgres  # noqa: E402

AGENT = "bench"
KEY = "bench-key"
STYLES = ("header", "user", "derived")
SWEEP_CONCURRENCY = (1, 10, 50, 200)


def checkpointer_spec(db: str) -> str:
    """A SQLite file path becomes sqlite:PATH; postgres:// URLs and `memory` pass through."""
    return db if db.startswith(("postgres://", "postgresql://")) or db == "memory" else f"sqlite:{db}"


def make_agent(db: str, think_s: float, kind: str = "function") -> Agent:
    if kind == "echo":
        return Agent(EchoModel(), checkpointer=checkpointer_spec(db), name=AGENT)

    async def answer(request: ModelRequest) -> str:
        # The turn number is the count of user messages the model sees: a lost or doubled turn
        # changes every later answer.
        await asyncio.sleep(think_s)
        users = sum(1 for m in request.messages if m.role == "user")
        return f"[{users}] {request.messages[-1].text}"

    return Agent(FunctionModel(answer, name="bench-fn"), checkpointer=checkpointer_spec(db), name=AGENT)


def expected_answer(kind: str, turn: int, message: str) -> str:
    """What the bench agent answers to turn `turn` (0-based) of a conversation."""
    return f"You said: {message}" if kind == "echo" else f"[{turn + 1}] {message}"


@dataclass
class Conversation:
    """One simulated chat client."""

    index: int
    style: str
    stream: bool
    tag: str = ""
    """Distinguishes runs that share one database (a sweep on Postgres)."""
    agent: str = "function"
    """The bench agent's kind, which fixes its answers."""
    history: list[dict[str, str]] = field(default_factory=list)
    thread_ids: set[str] = field(default_factory=set)
    errors: list[str] = field(default_factory=list)

    def message(self, turn: int) -> str:
        return f"{self.tag}conversation {self.index} turn {turn}"

    def request(self, turn: int) -> dict[str, Any]:
        new = {"role": "user", "content": self.message(turn)}
        if self.style == "header":
            return {"messages": [new], "extra_headers": {"X-Rein-Thread": f"load-{self.tag}{self.index}"}}
        kw: dict[str, Any] = {"messages": [*self.history, new]}
        if self.style == "user":
            kw["user"] = f"load-user-{self.tag}{self.index}"
        return kw


async def one_turn(client: AsyncOpenAI, conv: Conversation, turn: int, latencies: list[float]) -> None:
    kw = conv.request(turn)
    started = time.perf_counter()
    try:
        if conv.stream:
            stream = await client.chat.completions.create(model=AGENT, stream=True, **kw)
            parts, rein = [], {}
            async for chunk in stream:
                if chunk.choices and chunk.choices[0].delta.content:
                    parts.append(chunk.choices[0].delta.content)
                rein = (chunk.model_extra or {}).get("rein", rein)
            text = "".join(parts)
        else:
            response = await client.chat.completions.create(model=AGENT, **kw)
            text, rein = response.choices[0].message.content or "", response.model_extra["rein"]
    except Exception as exc:  # counted and reported, the run goes on
        conv.errors.append(f"turn {turn}: {type(exc).__name__}: {exc}")
        return
    latencies.append(time.perf_counter() - started)
    expected = expected_answer(conv.agent, turn, conv.message(turn))
    if text != expected:
        conv.errors.append(f"turn {turn}: answer {text!r}, expected {expected!r}")
    conv.thread_ids.add(rein.get("thread_id", "?"))
    conv.history += [{"role": "user", "content": conv.message(turn)}, {"role": "assistant", "content": text}]


@dataclass
class Load:
    """How the conversations are driven and what the server runs."""

    think_s: float = 0.005
    """The function agent's model latency."""
    agent: str = "function"
    """function or echo."""
    concurrency: int = 0
    """Conversations in flight at once; 0: all of them."""
    in_process: bool = False
    """Serve from a thread of this process instead of a process of its own."""
    profile: str | None = None
    """Write the server process's cProfile stats here (the last phase's server wins)."""
    server_flags: tuple[str, ...] = ()
    """Extra arguments of the server process (--no-freeze, --pure-asyncio, --gc-gen0 N)."""


@dataclass
class PhaseStats:
    """What the request phases took."""

    seconds: list[float] = field(default_factory=list)
    """Wall time of each phase's requests."""
    server_cpu_s: list[float] = field(default_factory=list)
    """CPU time (user + system, all threads) the server process spent in each phase."""
    gc_pauses_s: list[float] = field(default_factory=list)
    """The server process's cyclic garbage collections while serving, each one's wall time."""
    client_cpu_s: list[float] = field(default_factory=list)
    """CPU time this (client) process spent in each phase: the client shares the machine's cores."""


async def phase(url: str, conversations: list[Conversation], turns: range, latencies: list[float],
                load: Load, stats: PhaseStats, cpu: Any = None) -> None:
    async with chat_clients(url, len(conversations)) as clients:
        before = cpu() if cpu else 0.0
        started, client_before = time.perf_counter(), time.process_time()
        try:
            await _phase(url, conversations, turns, latencies, load.concurrency, clients)
        finally:
            stats.seconds.append(time.perf_counter() - started)
            stats.client_cpu_s.append(time.process_time() - client_before)
            if cpu:
                stats.server_cpu_s.append(cpu() - before)


async def _phase(url: str, conversations: list[Conversation], turns: range, latencies: list[float],
                 concurrency: int, clients: list[AsyncOpenAI]) -> None:
    gate = asyncio.Semaphore(concurrency or len(conversations))

    async def run(conv: Conversation, client: AsyncOpenAI) -> None:
        async with gate:
            for turn in turns:
                await one_turn(client, conv, turn, latencies)

    await asyncio.gather(*(run(c, client) for c, client in zip(conversations, clients, strict=True)))


@contextlib.asynccontextmanager
async def chat_clients(url: str, n: int) -> Any:
    """n openai clients, each with a connection pool of its own, as each chat client has: httpcore
    scans every connection of a pool on each request, so one pool shared by 200 conversations made
    the client, not the server, the bottleneck (12.5 ms of client CPU per turn against 5 at 50).
    They share one TLS context (each new one loads the CA store: ~20 ms; loopback uses none)."""
    tls = ssl.create_default_context()
    async with contextlib.AsyncExitStack() as stack:
        clients = []
        for _ in range(n):
            http = await stack.enter_async_context(httpx.AsyncClient(trust_env=False, timeout=30, verify=tls))
            clients.append(AsyncOpenAI(base_url=f"{url}/v1", api_key=KEY, max_retries=0, http_client=http))
        yield clients


def client_loop() -> Any:
    """The clients' event loop: uvloop's when installed, the cheaper one on the cores the client
    shares with the server process (None: asyncio's own)."""
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def process_cpu(pid: int) -> Any:
    """A function returning the CPU seconds process pid has used so far (None without psutil)."""
    try:
        import psutil
    except ImportError:
        return None
    proc = psutil.Process(pid)

    def used() -> float:
        t = proc.cpu_times()
        return float(t.user + t.system)

    return used


def serve_phase(db: str, conversations: list[Conversation], turns: range, latencies: list[float],
                load: Load, stats: PhaseStats) -> None:
    if load.in_process:
        agent = make_agent(db, load.think_s, load.agent)
        app = create_app({AGENT: agent}, api_keys=[KEY], config=ServerConfig(request_timeout_s=30))
        with BackgroundServer(app) as server:
            asyncio.run(phase(server.url, conversations, turns, latencies, load, stats))
        return
    command = [sys.executable, __file__, "--serve", db, "--think-ms", str(load.think_s * 1000), "--agent", load.agent]
    if load.profile:
        command += ["--profile", load.profile]
    command += load.server_flags
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        if not line.startswith("PORT "):
            raise RuntimeError(f"the server process did not start (said {line!r})")
        url = f"http://127.0.0.1:{int(line.split()[1])}"
        with asyncio.Runner(loop_factory=client_loop()) as runner:
            runner.run(phase(url, conversations, turns, latencies, load, stats, process_cpu(proc.pid)))
    finally:
        proc.send_signal(signal.SIGTERM)  # graceful: running turns finish, the checkpointer closes
        try:
            code = proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise RuntimeError("the server process did not stop within 60 s") from None
    if code != 0:
        raise RuntimeError(f"the server process exited with {code}")
    for line in proc.stdout or ():
        if line.startswith("GC "):
            stats.gc_pauses_s += [float(x) for x in line.split()[1:]]


def serve(db: str, think_s: float, kind: str, profile: str | None = None, freeze: bool = True,
          pure_asyncio: bool = False, gc_gen0: int | None = None) -> int:
    """The server process: serve the bench agent on a free loopback port until SIGTERM; at the end,
    print the wall time of each garbage collection it ran while serving."""
    import gc

    import uvicorn

    try:
        from agent.cli.serve import bind, freeze_heap
    except ImportError:  # a checkout from before the CLI package (for before/after runs)
        from agent.serve_cli import bind  # type: ignore[no-redef]

        def freeze_heap() -> None:  # as the checkouts before it did: nothing
            pass

    app = create_app({AGENT: make_agent(db, think_s, kind)}, api_keys=[KEY], config=ServerConfig(request_timeout_s=30))
    sock = bind("127.0.0.1", 0)
    # uvicorn picks uvloop and httptools when installed (the server extra brings them), else
    # asyncio's own loop and the pure-Python h11 parser; --pure-asyncio forces the latter.
    pure = {"loop": "asyncio", "http": "h11"} if pure_asyncio else {}
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=30, **pure))
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: None)  # uvicorn re-raises the stop signal after its shutdown
    if freeze:
        freeze_heap()
    if gc_gen0:  # overrides what rein serve sets (freeze_heap)
        gc.set_threshold(gc_gen0, *gc.get_threshold()[1:])
    pauses: list[float] = []
    started = [0.0]

    def timed(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started[0] = time.perf_counter()
        else:
            pauses.append(time.perf_counter() - started[0])

    gc.callbacks.append(timed)
    print(f"PORT {sock.getsockname()[1]}", flush=True)
    try:
        _serve(server, sock, profile)
    finally:
        gc.callbacks.remove(timed)
        print("GC", *(f"{p:.6f}" for p in pauses), flush=True)
    return 0


def _serve(server: Any, sock: Any, profile: str | None) -> None:
    if not profile:
        server.run(sockets=[sock])
        return
    import cProfile

    # CPU time of the event loop's thread, where the server's Python runs: wall time on a shared
    # machine would charge other processes' time slices to whatever was running. SQLite itself runs
    # on aiosqlite's thread and is not in this profile (server_cpu_ms_per_turn counts it).
    profiler = cProfile.Profile(time.thread_time)
    profiler.enable()
    try:
        server.run(sockets=[sock])
    finally:
        profiler.disable()
        profiler.dump_stats(profile)


def verify(db: str, conversations: list[Conversation], turns: int, kind: str = "function") -> list[str]:
    """Read every thread back; each must hold exactly its conversation, once, in order."""
    agent = make_agent(db, 0.0, kind)
    problems = []
    try:
        for conv in conversations:
            if len(conv.thread_ids) != 1:
                problems.append(f"conversation {conv.index} used threads {sorted(conv.thread_ids)}")
                continue
            history = agent.history(storage_id(AGENT, next(iter(conv.thread_ids)), key_id(KEY)))
            got = [(m.role, m.text) for m in surface_dialogue(history)]
            want = []
            for t in range(turns):
                want += [("user", conv.message(t)), ("assistant", expected_answer(kind, t, conv.message(t)))]
            if got != want:
                problems.append(f"conversation {conv.index}: thread holds {len(got)} messages, expected {len(want)}")
    finally:
        agent.close()
    return problems


def run(conversations: int, turns: int, restart_after: int, think_ms: float, db: str | Path,
        in_process: bool = False, *, agent: str = "function", concurrency: int = 0, stream: bool | None = None,
        tag: str = "", profile: str | None = None, server_flags: tuple[str, ...] = ()) -> dict[str, Any]:
    """Run the load test and return its numbers (and any problems).

    stream: None alternates streaming and plain conversations; True or False makes all of them so.
    """
    db = str(db)
    load = Load(think_ms / 1000, agent, concurrency, in_process, profile, server_flags)
    convs = [
        Conversation(i, STYLES[i % len(STYLES)], stream=i % 2 == 1 if stream is None else stream, tag=tag, agent=agent)
        for i in range(conversations)
    ]
    latencies: list[float] = []
    stats = PhaseStats()
    split = min(max(restart_after, 0), turns)
    for part in (range(0, split), range(split, turns)):
        if part:
            serve_phase(db, convs, part, latencies, load, stats)
    wall = sum(stats.seconds)  # request phases only: server start-up is not load
    errors = [f"conversation {c.index} {e}" for c in convs for e in c.errors]
    problems = verify(db, convs, turns, agent)
    ms = sorted(x * 1000 for x in latencies)
    cpu_s = sum(stats.server_cpu_s) if stats.server_cpu_s else None

    def pct(q: float) -> float | None:
        return round(ms[min(len(ms) - 1, int(q * len(ms)))], 1) if ms else None

    return {
        "server": "in-process thread" if in_process else "separate process",
        "agent": agent,
        "checkpointer": "postgres" if db.startswith(("postgres://", "postgresql://")) else "sqlite",
        "concurrency": concurrency or conversations,
        "stream": "mixed" if stream is None else stream,
        "conversations": conversations,
        "turns": turns,
        "restart_after_turn": split,
        "requests": conversations * turns,
        "ok": len(latencies),
        "errors": len(errors),
        "thread_problems": len(problems),
        "p50_ms": round(statistics.median(ms), 1) if ms else None,
        "p95_ms": pct(0.95),
        "p99_ms": pct(0.99),
        "max_ms": round(ms[-1], 1) if ms else None,
        "load_s": round(wall, 2),
        "requests_per_s": round(len(latencies) / wall, 1) if wall else None,
        # The server process's own CPU (all its threads) per answered turn: far steadier than
        # wall time on a shared machine, and it leaves out the client's cost.
        "server_cpu_ms_per_turn": round(cpu_s * 1000 / len(latencies), 2) if cpu_s is not None and latencies else None,
        # Part of that CPU, and pauses every request in flight waits out (separate process only).
        "server_gc_ms_per_turn": round(sum(stats.gc_pauses_s) * 1000 / len(latencies), 3) if latencies and not in_process else None,
        "gc_pause_max_ms": round(max(stats.gc_pauses_s, default=0.0) * 1000, 1) if not in_process else None,
        # The client's own CPU per turn (this process; with --in-process it includes the server).
        "client_cpu_ms_per_turn": round(sum(stats.client_cpu_s) * 1000 / len(latencies), 2) if latencies else None,
        "details": (errors + problems)[:20],
    }


def direct(db: str, kind: str, conversations: int, turns: int) -> dict[str, Any]:
    """The same agent and checkpointer without the server: sequential `ainvoke` turns in this
    process, for the server's CPU per turn to be read against (bench/overhead.py's measure, on
    this checkpointer)."""
    agent = make_agent(db, 0.0, kind)

    async def go() -> tuple[float, float]:
        async with agent:
            await agent.ainvoke("warm up", "direct-warm-up")
            c0, w0 = time.process_time(), time.perf_counter()
            for t in range(turns):
                for i in range(conversations):
                    await agent.ainvoke(f"conversation {i} turn {t}", f"direct-{i}")
            return time.process_time() - c0, time.perf_counter() - w0

    cpu, wall = asyncio.run(go())
    n = conversations * turns
    return {"checkpointer": "postgres" if db.startswith("postgres") else "sqlite", "turns": n,
            "cpu_ms_per_turn": round(cpu * 1000 / n, 2), "wall_ms_per_turn": round(wall * 1000 / n, 2)}


def sweep(dbs: list[tuple[str, str]], kind: str, turns: int, levels: tuple[int, ...],
          server_flags: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """Every concurrency level, plain and streaming, on every database: one server process per cell,
    at least 40 conversations per cell (so one at a time still gives 40 × turns latencies)."""
    rows = []
    for label, db in dbs:
        for level in levels:
            for stream in (False, True):
                tag = f"{label}-{level}-{'s' if stream else 'p'}-{os.getpid()}-"
                target = db if db.startswith("postgres") else f"{db}-{tag}.sqlite"
                rows.append(run(max(level, 40), turns, turns, 0, target, agent=kind, concurrency=level, stream=stream, tag=tag,
                                server_flags=server_flags))
                print(row_line(rows[-1]), file=sys.stderr, flush=True)
    return rows


TABLE_HEAD = (
    "| checkpointer | concurrent | stream | turns ok | p50 ms | p95 ms | p99 ms | turns/s | server CPU ms/turn | GC ms/turn | longest GC ms | client CPU ms/turn |\n"
    "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
)


def row_line(r: dict[str, Any]) -> str:
    """One markdown table row of a run."""
    stream = {True: "yes", False: "no"}.get(r["stream"], str(r["stream"]))
    return (f"| {r['checkpointer']} | {r['concurrency']} | {stream} | {r['ok']}/{r['requests']} | {r['p50_ms']} | "
            f"{r['p95_ms']} | {r['p99_ms']} | {r['requests_per_s']} | {r['server_cpu_ms_per_turn']} | "
            f"{r['server_gc_ms_per_turn']} | {r['gc_pause_max_ms']} | {r['client_cpu_ms_per_turn']} |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--conversations", type=int, default=50)
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--restart-after", type=int, default=2, help="stop and restart the server after this many turns")
    parser.add_argument("--think-ms", type=float, default=5.0, help="model latency per call, milliseconds")
    parser.add_argument("--agent", choices=("function", "echo"), default="function",
                        help="function: answers after --think-ms; echo: the zero-cost EchoModel")
    parser.add_argument("--concurrency", type=int, default=0, help="conversations in flight at once (default: all)")
    parser.add_argument("--stream", choices=("mixed", "yes", "no"), default="mixed",
                        help="mixed: every other conversation streams")
    parser.add_argument("--db", help="a postgres:// URL instead of a temporary SQLite file")
    parser.add_argument("--postgres", action="store_true", help="run on a throwaway PostgreSQL cluster")
    parser.add_argument("--sweep", action="store_true",
                        help=f"concurrency {', '.join(map(str, SWEEP_CONCURRENCY))}, plain and streaming, on "
                        "SQLite (and Postgres with --postgres or --db); prints a markdown table")
    parser.add_argument("--direct", action="store_true",
                        help="also time the same agent without the server (sequential ainvoke), CPU per turn")
    parser.add_argument("--profile", metavar="FILE", help="write the server process's cProfile stats to FILE")
    parser.add_argument("--max-seconds", type=float, default=300.0, help="give up after this long")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("--in-process", action="store_true", help="run the server in a thread of this process")
    parser.add_argument("--processes", action="store_true",
                        help="two `rein serve` processes on one Postgres database (--db or --postgres), "
                        "turns alternating between them, one killed and restarted mid-load")
    parser.add_argument("--no-freeze", action="store_true",
                        help="serve without freezing the start-up heap (what `rein serve` did before; for comparisons)")
    parser.add_argument("--pure-asyncio", action="store_true",
                        help="serve on asyncio's own loop with the h11 parser (an install without uvloop and httptools)")
    parser.add_argument("--gc-gen0", type=int, metavar="N",
                        help="the server's first-generation GC threshold instead of rein serve's (10000; Python's default: 700)")
    parser.add_argument("--serve", metavar="DB", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        return serve(args.serve, args.think_ms / 1000, args.agent, args.profile, not args.no_freeze, args.pure_asyncio,
                     args.gc_gen0)
    if args.processes:
        if not (1 <= args.conversations <= 500 and 1 <= args.turns <= 50):
            parser.error("keep it bounded: 1-500 conversations, 1-50 turns")
        with contextlib.ExitStack() as stack:
            db = args.db or stack.enter_context(temp_postgres())
            result = processes(db, args.conversations, args.turns, args.concurrency, agent_name=AGENT)
        print(json.dumps(result, indent=2) if args.json else summary(result))
        return 0 if result["errors"] == 0 and result["thread_problems"] == 0 else 1
    if not (1 <= args.conversations <= 500 and 1 <= args.turns <= 50 and 0 <= args.concurrency <= 500):
        parser.error("keep it bounded: 1-500 conversations, 1-50 turns, concurrency 0-500")
    with contextlib.ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="rein-load-")))
        pg = args.db or (stack.enter_context(temp_postgres()) if args.postgres else None)
        result = _bounded(args, tmp / "threads.sqlite", pg)
    if args.sweep:
        rows = result["rows"]
        if args.json:
            print(json.dumps(result, indent=2))
        else:
            print(TABLE_HEAD)
            for r in rows:
                print(row_line(r))
            for d in result.get("direct", []):
                print(f"direct (no server, sequential ainvoke) on {d['checkpointer']}: {d['cpu_ms_per_turn']} ms CPU per turn")
        bad = [r for r in rows if r["errors"] or r["thread_problems"]]
        for r in bad:
            for line in r["details"]:
                print("  " + line)
        return 1 if bad else 0
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(
            f"{result['conversations']} conversations x {result['turns']} turns ({result['concurrency']} at once, "
            f"{result['agent']} agent, {result['checkpointer']}), server: {result['server']} "
            f"(server restarted after turn {result['restart_after_turn']}): "
            f"{result['ok']}/{result['requests']} ok, {result['errors']} errors, "
            f"{result['thread_problems']} thread problems; latency p50 {result['p50_ms']} ms, "
            f"p95 {result['p95_ms']} ms, p99 {result['p99_ms']} ms, max {result['max_ms']} ms; "
            f"{result['requests_per_s']} req/s over {result['load_s']} s of load; "
            f"server CPU {result['server_cpu_ms_per_turn']} ms/turn, of it GC {result['server_gc_ms_per_turn']} ms/turn "
            f"(longest pause {result['gc_pause_max_ms']} ms)"
        )
        for d in result.get("direct", []):
            print(f"direct (no server, sequential ainvoke) on {d['checkpointer']}: {d['cpu_ms_per_turn']} ms CPU per turn")
        for line in result["details"]:
            print("  " + line)
    return 0 if result["errors"] == 0 and result["thread_problems"] == 0 else 1


def _bounded(args: argparse.Namespace, db: Path, pg: str | None) -> dict[str, Any]:
    import threading

    box: dict[str, Any] = {}
    stream = {"mixed": None, "yes": True, "no": False}[args.stream]
    # Passed on to every server process this run starts.
    server_flags = (*(["--no-freeze"] if args.no_freeze else []), *(["--pure-asyncio"] if args.pure_asyncio else []),
                    *(["--gc-gen0", str(args.gc_gen0)] if args.gc_gen0 else []))

    def work() -> None:
        try:
            dbs = [("sqlite", str(db))] + ([("postgres", pg)] if pg else [])
            if args.sweep:
                out: dict[str, Any] = {"rows": sweep(dbs, args.agent, args.turns, SWEEP_CONCURRENCY, server_flags)}
            else:
                target = pg or str(db)
                out = run(args.conversations, args.turns, args.restart_after, args.think_ms, target,
                          args.in_process, agent=args.agent, concurrency=args.concurrency, stream=stream,
                          profile=args.profile, server_flags=server_flags)
                dbs = [d for d in dbs if d[1] == target]
            if args.direct:
                out["direct"] = [direct(f"{d}-direct.sqlite" if label == "sqlite" else d, args.agent, 10, args.turns)
                                 for label, d in dbs]
            box["result"] = out
        except Exception as exc:  # reported by the main thread
            box["error"] = exc

    worker = threading.Thread(target=work, daemon=True)
    worker.start()
    worker.join(args.max_seconds)
    if worker.is_alive():
        raise SystemExit(f"server_load: gave up after {args.max_seconds} s")
    if "error" in box:
        raise SystemExit(f"server_load: {type(box['error']).__name__}: {box['error']}")
    return box["result"]


if __name__ == "__main__":
    sys.exit(main())

"""Load test of rein's OpenAI-compatible server on loopback.

N concurrent conversations × T turns against a deterministic FunctionModel agent with SQLite
threads, through the real `openai` client, with the server process stopped (SIGTERM, graceful)
and a new one started on the same database between two turns. Afterwards every thread is read back: each must hold
exactly the conversation's turns, in order, once. Prints p50/p95 request latency.

    python bench/server_load.py                      # 50 conversations × 5 turns, restart after turn 2
    python bench/server_load.py --conversations 10 --turns 3 --restart-after 1

Conversations rotate through three client styles: a thread header with only the new message, the
full history keyed by the `user` field, and the full history with no key (thread derived from the
conversation); every other conversation streams. The server runs in its own process (uvicorn, as
`rein serve` runs it), or in a thread of this one with --in-process. Requests go to 127.0.0.1
only; the run is bounded by --max-seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
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
from agent.plant import surface_dialogue
from agent.runtime import Agent
from agent.server import BackgroundServer, ServerConfig, create_app, key_id, storage_id

AGENT = "bench"
KEY = "bench-key"
STYLES = ("header", "user", "derived")


def make_agent(db: Path, think_s: float) -> Agent:
    async def answer(request: ModelRequest) -> str:
        # The turn number is the count of user messages the model sees: a lost or doubled turn
        # changes every later answer.
        await asyncio.sleep(think_s)
        users = sum(1 for m in request.messages if m.role == "user")
        return f"[{users}] {request.messages[-1].text}"

    return Agent(FunctionModel(answer, name="bench-fn"), checkpointer=f"sqlite:{db}", name=AGENT)


@dataclass
class Conversation:
    """One simulated chat client."""

    index: int
    style: str
    stream: bool
    history: list[dict[str, str]] = field(default_factory=list)
    thread_ids: set[str] = field(default_factory=set)
    errors: list[str] = field(default_factory=list)

    def message(self, turn: int) -> str:
        return f"conversation {self.index} turn {turn}"

    def request(self, turn: int) -> dict[str, Any]:
        new = {"role": "user", "content": self.message(turn)}
        if self.style == "header":
            return {"messages": [new], "extra_headers": {"X-Rein-Thread": f"load-{self.index}"}}
        kw: dict[str, Any] = {"messages": [*self.history, new]}
        if self.style == "user":
            kw["user"] = f"load-user-{self.index}"
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
    expected = f"[{turn + 1}] {conv.message(turn)}"
    if text != expected:
        conv.errors.append(f"turn {turn}: answer {text!r}, expected {expected!r}")
    conv.thread_ids.add(rein.get("thread_id", "?"))
    conv.history += [{"role": "user", "content": conv.message(turn)}, {"role": "assistant", "content": text}]


async def phase(url: str, conversations: list[Conversation], turns: range, latencies: list[float]) -> None:
    started = time.perf_counter()
    try:
        await _phase(url, conversations, turns, latencies)
    finally:
        PHASE_SECONDS.append(time.perf_counter() - started)


PHASE_SECONDS: list[float] = []


async def _phase(url: str, conversations: list[Conversation], turns: range, latencies: list[float]) -> None:
    async with httpx.AsyncClient(trust_env=False, timeout=30, limits=httpx.Limits(max_connections=200)) as http:
        client = AsyncOpenAI(base_url=f"{url}/v1", api_key=KEY, max_retries=0, http_client=http)

        async def run(conv: Conversation) -> None:
            for turn in turns:
                await one_turn(client, conv, turn, latencies)

        await asyncio.gather(*(run(c) for c in conversations))


def serve_phase(db: Path, think_s: float, conversations: list[Conversation], turns: range,
                latencies: list[float], in_process: bool) -> None:
    if in_process:
        app = create_app({AGENT: make_agent(db, think_s)}, api_keys=[KEY], config=ServerConfig(request_timeout_s=30))
        with BackgroundServer(app) as server:
            asyncio.run(phase(server.url, conversations, turns, latencies))
        return
    proc = subprocess.Popen(
        [sys.executable, __file__, "--serve", str(db), "--think-ms", str(think_s * 1000)],
        stdout=subprocess.PIPE, text=True,
    )
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        if not line.startswith("PORT "):
            raise RuntimeError(f"the server process did not start (said {line!r})")
        asyncio.run(phase(f"http://127.0.0.1:{int(line.split()[1])}", conversations, turns, latencies))
    finally:
        proc.send_signal(signal.SIGTERM)  # graceful: running turns finish, the checkpointer closes
        try:
            code = proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise RuntimeError("the server process did not stop within 60 s") from None
    if code != 0:
        raise RuntimeError(f"the server process exited with {code}")


def serve(db: Path, think_s: float) -> int:
    """The server process: serve the bench agent on a free loopback port until SIGTERM."""
    import uvicorn

    from agent.serve_cli import bind

    app = create_app({AGENT: make_agent(db, think_s)}, api_keys=[KEY], config=ServerConfig(request_timeout_s=30))
    sock = bind("127.0.0.1", 0)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=30))
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: None)  # uvicorn re-raises the stop signal after its shutdown
    print(f"PORT {sock.getsockname()[1]}", flush=True)
    server.run(sockets=[sock])
    return 0


def verify(db: Path, conversations: list[Conversation], turns: int) -> list[str]:
    """Read every thread back; each must hold exactly its conversation, once, in order."""
    agent = make_agent(db, 0.0)
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
                want += [("user", conv.message(t)), ("assistant", f"[{t + 1}] {conv.message(t)}")]
            if got != want:
                problems.append(f"conversation {conv.index}: thread holds {len(got)} messages, expected {len(want)}")
    finally:
        agent.close()
    return problems


def run(conversations: int, turns: int, restart_after: int, think_ms: float, db: Path,
        in_process: bool = False) -> dict[str, Any]:
    """Run the load test and return its numbers (and any problems)."""
    convs = [Conversation(i, STYLES[i % len(STYLES)], stream=i % 2 == 1) for i in range(conversations)]
    latencies: list[float] = []
    PHASE_SECONDS.clear()
    split = min(max(restart_after, 0), turns)
    for part in (range(0, split), range(split, turns)):
        if part:
            serve_phase(db, think_ms / 1000, convs, part, latencies, in_process)
    wall = sum(PHASE_SECONDS)  # request phases only: server start-up is not load
    errors = [f"conversation {c.index} {e}" for c in convs for e in c.errors]
    problems = verify(db, convs, turns)
    ms = sorted(x * 1000 for x in latencies)
    return {
        "server": "in-process thread" if in_process else "separate process",
        "conversations": conversations,
        "turns": turns,
        "restart_after_turn": split,
        "requests": conversations * turns,
        "ok": len(latencies),
        "errors": len(errors),
        "thread_problems": len(problems),
        "p50_ms": round(statistics.median(ms), 1) if ms else None,
        "p95_ms": round(ms[min(len(ms) - 1, int(0.95 * len(ms)))], 1) if ms else None,
        "max_ms": round(ms[-1], 1) if ms else None,
        "load_s": round(wall, 2),
        "requests_per_s": round(len(latencies) / wall, 1) if wall else None,
        "details": (errors + problems)[:20],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--conversations", type=int, default=50)
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--restart-after", type=int, default=2, help="stop and restart the server after this many turns")
    parser.add_argument("--think-ms", type=float, default=5.0, help="model latency per call, milliseconds")
    parser.add_argument("--max-seconds", type=float, default=300.0, help="give up after this long")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("--in-process", action="store_true", help="run the server in a thread of this process")
    parser.add_argument("--serve", metavar="DB", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        return serve(Path(args.serve), args.think_ms / 1000)
    if not (1 <= args.conversations <= 500 and 1 <= args.turns <= 50):
        parser.error("keep it bounded: 1-500 conversations, 1-50 turns")
    with tempfile.TemporaryDirectory(prefix="rein-load-") as tmp:
        result = _bounded(args, Path(tmp) / "threads.sqlite")
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(
            f"{result['conversations']} conversations x {result['turns']} turns, server: "
            f"{result['server']} "
            f"(server restarted after turn {result['restart_after_turn']}): "
            f"{result['ok']}/{result['requests']} ok, {result['errors']} errors, "
            f"{result['thread_problems']} thread problems; latency p50 {result['p50_ms']} ms, "
            f"p95 {result['p95_ms']} ms, max {result['max_ms']} ms; "
            f"{result['requests_per_s']} req/s over {result['load_s']} s of load"
        )
        for line in result["details"]:
            print("  " + line)
    return 0 if result["errors"] == 0 and result["thread_problems"] == 0 else 1


def _bounded(args: argparse.Namespace, db: Path) -> dict[str, Any]:
    import threading

    box: dict[str, Any] = {}

    def work() -> None:
        try:
            box["result"] = run(args.conversations, args.turns, args.restart_after, args.think_ms, db, args.in_process)
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

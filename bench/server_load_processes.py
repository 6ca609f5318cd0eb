"""What bench/server_load.py starts besides its own server process: a throwaway PostgreSQL
cluster (--postgres), and the several-processes run (--processes), two `rein serve` processes on
one Postgres database whose turns alternate between them while one is killed and restarted.

Imported by bench/server_load.py, which holds the options; run that, not this file.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from agent.models.testing import EchoModel
from agent.runtime import Agent
from agent.server import storage_id


@contextlib.contextmanager
def temp_postgres() -> Iterator[str]:
    """A throwaway PostgreSQL cluster on 127.0.0.1 (as the postgres user when run as root)."""
    import glob
    import shutil
    import socket

    found = shutil.which("initdb") or next(iter(sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), reverse=True)), None)
    if found is None:
        raise SystemExit("server_load: --postgres needs PostgreSQL's server binaries (initdb)")
    pg = Path(found).parent
    as_user = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    base = Path(tempfile.mkdtemp(prefix="rein-load-pg-"))
    if as_user:
        shutil.chown(base, "postgres")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    subprocess.run([*as_user, str(pg / "initdb"), "-D", str(base / "data"), "-A", "trust", "-U", "rein"],
                   check=True, capture_output=True)
    server = subprocess.Popen(
        [*as_user, str(pg / "postgres"), "-D", str(base / "data"), "-p", str(port), "-h", "127.0.0.1", "-k", str(base)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            if time.monotonic() > deadline or server.poll() is not None:
                raise SystemExit("server_load: PostgreSQL did not start")
            time.sleep(0.1)
        time.sleep(0.3)
        yield f"postgresql://rein@127.0.0.1:{port}/postgres"
    finally:
        server.terminate()
        server.wait(timeout=30)
        shutil.rmtree(base, ignore_errors=True)


def start_rein_serve(spec: Path, db: str, port: int) -> subprocess.Popen[str]:
    """A `rein serve` process on 127.0.0.1:port, returned once it answers /healthz."""
    rein = Path(sys.executable).parent / "rein"
    proc = subprocess.Popen([str(rein), "serve", "--agent", str(spec), "--db", db, "--port", str(port),
                             "--log-level", "warning"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while True:
        with contextlib.suppress(httpx.TransportError):
            if httpx.get(f"http://127.0.0.1:{port}/healthz", trust_env=False, timeout=2).status_code == 200:
                return proc
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise SystemExit(f"server_load: rein serve did not start: {proc.stderr.read() if proc.stderr else ''}")
        time.sleep(0.05)


def processes(db: str, conversations: int, turns: int, concurrency: int, *, agent_name: str = "bench") -> dict[str, Any]:
    """Two `rein serve` processes serving the echo agent (named `agent_name`) on one Postgres
    database: each conversation's turn t goes to process t % 2, every third conversation sends
    each turn to both at once (a repeated request, with one Idempotency-Key), and process 1 is killed (SIGKILL) once a third
    of the turns are done and started again. A request that fails on a dead process is sent again
    to the other one. Every thread must then hold each of its turns exactly once, in order."""
    import socket

    if not db.startswith(("postgres://", "postgresql://")):
        raise SystemExit("server_load: --processes needs --db postgres://… or --postgres")
    ports = []
    for _ in range(2):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            ports.append(s.getsockname()[1])
    tmp = Path(tempfile.mkdtemp(prefix="rein-procs-"))
    spec = tmp / "bench.yaml"
    spec.write_text(f"name: {agent_name}\nmodel: echo\n")
    run_id = os.urandom(4).hex()
    procs = [start_rein_serve(spec, db, port) for port in ports]
    latencies: list[float] = []
    counts = {"requests": 0, "retried": 0, "failed": 0}
    done = 0
    total = conversations * turns
    restarted = asyncio.Event()

    async def send(client: httpx.AsyncClient, target: int, body: dict[str, Any], key: str, request_id: str) -> str:
        # Every copy and resend of one request carries its Idempotency-Key, as a client that retries
        # must (docs/server.md, "Retries and idempotency"): the copy that comes second gets the answer.
        for attempt in range(20):
            port = ports[(target + attempt) % 2]
            counts["requests"] += 1
            start = time.perf_counter()
            try:
                r = await client.post(f"http://127.0.0.1:{port}/v1/chat/completions", json=body,
                                      headers={"X-Rein-Thread": key, "Idempotency-Key": request_id}, timeout=60)
            except httpx.TransportError:
                counts["retried"] += 1
                await asyncio.sleep(0.05)
                continue
            if r.status_code != 200:
                counts["retried"] += 1
                await asyncio.sleep(0.05)
                continue
            latencies.append(time.perf_counter() - start)
            return str(r.json()["choices"][0]["message"]["content"])
        counts["failed"] += 1
        return ""

    async def conversation(client: httpx.AsyncClient, c: int, gate: asyncio.Semaphore) -> list[str]:
        nonlocal done
        key, history, problems = f"{run_id}-c{c}", [], []
        async with gate:
            for t in range(turns):
                history.append({"role": "user", "content": f"c{c} turn {t}"})
                body = {"model": agent_name, "messages": list(history)}
                request_id = f"{key}-t{t}"
                if c % 3 == 2:
                    replies = await asyncio.gather(send(client, 0, body, key, request_id), send(client, 1, body, key, request_id))
                else:
                    replies = [await send(client, t % 2, body, key, request_id)]
                want = f"You said: c{c} turn {t}"
                if any(r != want for r in replies):
                    problems.append(f"c{c} turn {t}: got {replies!r}")
                history.append({"role": "assistant", "content": want})
                done += 1
                if done == total // 3:
                    restarted.set()
        return problems

    async def restart() -> None:
        await restarted.wait()
        procs[1].kill()
        procs[1].wait()
        procs[1] = await asyncio.to_thread(start_rein_serve, spec, db, ports[1])

    async def load() -> tuple[list[str], float]:
        gate = asyncio.Semaphore(concurrency or conversations)
        async with httpx.AsyncClient(trust_env=False, limits=httpx.Limits(max_connections=400)) as client:
            start = time.perf_counter()
            killer = asyncio.create_task(restart())
            found = await asyncio.gather(*(conversation(client, c, gate) for c in range(conversations)))
            elapsed = time.perf_counter() - start
            await killer
        return [p for ps in found for p in ps], elapsed

    try:
        problems, elapsed = asyncio.run(load())
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            proc.wait(timeout=60)

    async def read_back() -> list[str]:
        agent = Agent(EchoModel(), checkpointer=db)
        bad = []
        try:
            for c in range(conversations):
                got = [m.text for m in await agent.ahistory(storage_id(agent_name, f"{run_id}-c{c}"))]
                want = [x for t in range(turns) for x in (f"c{c} turn {t}", f"You said: c{c} turn {t}")]
                if got != want:
                    bad.append(f"thread c{c}: {len(got)} messages, expected {len(want)}: {got[:6]!r}")
        finally:
            await agent.aclose()
        return bad

    problems += asyncio.run(read_back())
    ordered = sorted(latencies)

    def pct(q: float) -> float | None:
        return round(1000 * ordered[min(len(ordered) - 1, int(q * len(ordered)))], 1) if ordered else None

    return {
        "mode": "processes", "conversations": conversations, "turns": turns, "processes": 2,
        "concurrency": concurrency or conversations, "answered": len(latencies), **counts,
        "thread_problems": len(problems), "errors": counts["failed"], "details": problems,
        "p50_ms": pct(0.5), "p95_ms": pct(0.95), "turns_per_s": round(total / elapsed, 1), "load_s": round(elapsed, 2),
    }


def summary(result: dict[str, Any]) -> str:
    """The several-processes result in a line, then one line per problem."""
    head = (f"{result['conversations']} conversations x {result['turns']} turns over 2 processes "
            f"({result['concurrency']} at once, one killed and restarted): {result['answered']} answers, "
            f"{result['retried']} requests sent again, {result['thread_problems']} thread problems; "
            f"p50 {result['p50_ms']} ms, p95 {result['p95_ms']} ms, {result['turns_per_s']} turns/s")
    return "\n".join([head, *("  " + line for line in result["details"])])

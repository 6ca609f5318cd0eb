"""What a turn costs the server as its conversation grows: turn 3 against turn 50, counted exactly.

Drives the real ASGI app (request parsing, thread reconciliation, the agent graph, SQLite
checkpoints) in this process through httpx's ASGI transport, so one profiler sees everything the
server's event loop runs; only uvicorn's HTTP framing (the same for every turn) is left out.
Every thread is driven to --turns turns of the zero-cost echo agent; at each --at turn the next
--window turns of every thread are profiled. Reports per turn the Python function calls
(cProfile's count: exact, so a growth shows on a busy machine too) and the CPU time, and the
functions whose calls grow most between the first and the last --at:

    python bench/long_conversations.py                       # header clients: only the new message
    python bench/long_conversations.py --style history       # clients that resend the whole history
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import pstats
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from agent.messages import ModelRequest, ModelResponse, Usage
from agent.models import FunctionModel
from agent.models.testing import EchoModel
from agent.runtime import Agent
from agent.server import create_app

AGENT = "bench"
KEY = "bench-key"


def constant_echo() -> FunctionModel:
    """Echo's answers at a cost that does not grow with the prompt: it reads only the last message
    and reports fixed usage, where EchoModel counts every message's tokens (as a model reads its
    whole prompt). What still grows with it is rein's."""

    def answer(request: ModelRequest) -> ModelResponse:
        text = f"You said: {request.messages[-1].text}"
        return ModelResponse(text=text, usage=Usage(input_tokens=1, output_tokens=1, requests=1))

    return FunctionModel(answer, name="constant-echo")


def message(thread: int, turn: int, chars: int) -> str:
    """A user message of about `chars` characters, distinct per thread and turn."""
    head = f"thread {thread} turn {turn}: "
    return head + "x" * max(0, chars - len(head))


def streamed_text(body: str) -> str:
    """The answer text of an SSE chat completion stream."""
    parts = []
    for line in body.splitlines():
        if line.startswith("data: ") and line != "data: [DONE]":
            choices = json.loads(line[6:]).get("choices") or [{}]
            parts.append(choices[0].get("delta", {}).get("content") or "")
    return "".join(parts)


async def drive(db: Path, threads: int, turns: int, at: list[int], window: int, style: str, chars: int,
                stream: bool = False, model: str = "echo") -> dict[str, Any]:
    agent = Agent(EchoModel() if model == "echo" else constant_echo(), checkpointer=f"sqlite:{db}", name=AGENT)
    app = create_app({AGENT: agent}, api_keys=[KEY])
    state = app.state.rein
    await state.open()
    histories: list[list[dict[str, str]]] = [[] for _ in range(threads)]
    samples: dict[int, dict[str, Any]] = {}
    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://rein") as http:

            async def turn(i: int, t: int) -> None:
                new = {"role": "user", "content": message(i, t, chars)}
                headers = {"Authorization": f"Bearer {KEY}"}
                if style == "header":
                    headers["X-Rein-Thread"] = f"long-{i}"
                    body = {"model": AGENT, "messages": [new]}
                else:
                    body = {"model": AGENT, "messages": [*histories[i], new], "user": f"long-{i}"}
                r = await http.post("/v1/chat/completions", headers=headers, json={**body, "stream": stream})
                if r.status_code != 200:
                    raise RuntimeError(f"thread {i} turn {t}: HTTP {r.status_code}: {r.text[:200]}")
                answer = streamed_text(r.text) if stream else r.json()["choices"][0]["message"]["content"]
                if answer != f"You said: {new['content']}":
                    raise RuntimeError(f"thread {i} turn {t}: unexpected answer {answer[:80]!r}")
                histories[i] += [new, {"role": "assistant", "content": answer}]

            t = 1
            while t <= turns:
                profiled = t in at
                span = range(t, min(turns, t + window - 1) + 1) if profiled else range(t, t + 1)
                profiler = cProfile.Profile()
                cpu0 = time.process_time()
                if profiled:
                    profiler.enable()
                for k in span:
                    for i in range(threads):
                        await turn(i, k)
                if profiled:
                    profiler.disable()
                    n = threads * len(span)
                    stats = pstats.Stats(profiler)
                    samples[t] = {
                        "turns": n,
                        "python_calls_per_turn": round(stats.total_calls / n, 1),  # type: ignore[attr-defined]
                        "cpu_ms_per_turn_profiled": round((time.process_time() - cpu0) * 1000 / n, 2),
                        "calls": {f"{Path(f[0]).name}:{f[2]}": v[1] / n for f, v in stats.stats.items()},  # type: ignore[attr-defined]
                    }
                t = span[-1] + 1
    finally:
        await state.aclose()
    return samples


def growth(samples: dict[int, dict[str, Any]], top: int) -> list[tuple[str, float]]:
    """The functions whose calls per turn grew most from the first sampled turn to the last."""
    first, last = samples[min(samples)]["calls"], samples[max(samples)]["calls"]
    diff = {name: last.get(name, 0.0) - first.get(name, 0.0) for name in set(first) | set(last)}
    return sorted(((n, round(d, 1)) for n, d in diff.items() if d > 0), key=lambda x: -x[1])[:top]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=10)
    parser.add_argument("--turns", type=int, default=52, help="turns per thread")
    parser.add_argument("--at", default="3,50", help="comma-separated turns (1-based) where a window is profiled")
    parser.add_argument("--window", type=int, default=3, help="turns profiled from each --at turn")
    parser.add_argument("--style", choices=("header", "history"), default="header",
                        help="header: X-Rein-Thread and the new message only; history: the whole conversation each time")
    parser.add_argument("--stream", action="store_true", help="streamed answers (SSE) instead of whole ones")
    parser.add_argument("--model", choices=("echo", "constant"), default="echo",
                        help="echo: the shipped EchoModel (counts its whole prompt's tokens); constant: the same "
                        "answers at a cost that does not grow, leaving only rein's growth")
    parser.add_argument("--chars", type=int, default=220, help="characters per user message")
    parser.add_argument("--top", type=int, default=8, help="functions listed in the growth breakdown")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    at = sorted({int(x) for x in args.at.split(",")})
    if not (1 <= args.threads <= 200 and 1 <= args.turns <= 200 and at and at[0] >= 1 and at[-1] <= args.turns):
        parser.error("keep it bounded: 1-200 threads, 1-200 turns, --at within the turns")
    with tempfile.TemporaryDirectory() as tmp:
        samples = asyncio.run(drive(Path(tmp) / "long.sqlite", args.threads, args.turns, at, args.window, args.style, args.chars,
                                 args.stream, args.model))
    result = {
        "style": args.style,
        "stream": args.stream,
        "model": args.model,
        "threads": args.threads,
        "at": {t: {k: v for k, v in s.items() if k != "calls"} for t, s in samples.items()},
        "growth": growth(samples, args.top),
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"{args.model} model, {args.style} clients, {'streamed' if args.stream else 'whole'} answers, {args.threads} threads, "
          f"{args.chars}-character messages")
    print("| turn | Python calls per turn | CPU ms per turn (profiled) |\n|---:|---:|---:|")
    for t, s in result["at"].items():
        print(f"| {t} | {s['python_calls_per_turn']} | {s['cpu_ms_per_turn_profiled']} |")
    print(f"\ncalls per turn that grew from turn {at[0]} to turn {at[-1]}:")
    for name, d in result["growth"]:
        print(f"  +{d:8.1f}  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Per-call latency of the embedded model with a long system prompt, with and without the prefix cache.

A scenario run has the agent (retail policy + tool list, ~3,600 tokens) and the simulated user
(its guidelines and scenario) take turns on one loaded model, so llama.cpp's own reuse of the last
prompt is lost at every switch. This plays the same fixed calls, agent and user alternating, over
two dialogues of the retail domain, once with the cache off (LocalModel(prefix_cache=False)) and
once on, each pass from a cold context and an empty cache. The requests are fixed in advance (not
fed from the model's replies), so both passes evaluate the same prompts. Run by hand:

    python bench/prefix_cache.py                        # 0.5B, 2 dialogues x 2 rounds, off then on
    python bench/prefix_cache.py --rounds 1 --repeat 2  # shorter, both passes twice (off,on,off,on)

Each call prints a JSON row; the summary gives, per pass, the cold first agent call and the mean
of the later (warm) agent and user calls.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agent.messages import Message, ModelRequest, ModelSettings  # noqa: E402
from agent.models.local import LocalModel  # noqa: E402

AGENT_SAYS = [
    "Hello! I can help with that. Could you give me your name and zip code?",
    "Thanks. I found your account. Which order do you mean?",
]
USER_SAYS = [
    "Hi, I'd like to check on my most recent order.",
    "I'm Mei Kovacs, zip code 28236.",
    "The last one, please.",
]


def retail_prompts() -> tuple[str, list[dict[str, Any]], list[str]]:
    """The retail agent's policy and tools, and two simulated users' system prompts."""
    from scenarios.loading import load_scenarios
    from scenarios.orchestrator import build_environment
    from scenarios.recovery.build import SUITE_PATH
    from scenarios.users.simulated import system_prompt

    scenarios = [s for s in load_scenarios(SUITE_PATH) if s.domain == "retail"][:2]
    _env, toolkit, policy = build_environment(scenarios[0])
    users = [
        system_prompt(None, f"You want to know the status of your order. Scenario {s.id}: {s.description or ''}")
        for s in scenarios
    ]
    return policy, [t.openai_schema() for t in toolkit], users


def calls(rounds: int) -> list[tuple[int, str, ModelRequest]]:
    """(dialogue, role, request) in the order a scenario run makes them."""
    policy, tools, users = retail_prompts()
    out: list[tuple[int, str, ModelRequest]] = []
    for dialogue, user_system in enumerate(users):
        for r in range(rounds):
            history = [Message.user(USER_SAYS[0])]
            for i in range(r):
                history += [Message.assistant(AGENT_SAYS[i]), Message.user(USER_SAYS[i + 1])]
            out.append((dialogue, "agent", ModelRequest(
                messages=[Message.system(policy), *history], tools=tools,
                settings=ModelSettings(max_tokens=24, tool_choice="auto"),
            )))
            # The simulator sees the dialogue with roles flipped.
            flipped = [Message(role="assistant" if m.role == "user" else "user", content=m.text) for m in history]
            flipped.append(Message.user(AGENT_SAYS[r]))
            out.append((dialogue, "user", ModelRequest(
                messages=[Message.system(user_system), *flipped],
                settings=ModelSettings(max_tokens=24, tool_choice="none"),
            )))
    return out


async def play(model: LocalModel, mode: str, plan: list[tuple[int, str, ModelRequest]]) -> list[dict[str, Any]]:
    loaded = model.load()
    loaded.llama.reset()  # a cold context and an empty cache: the first call pays in full
    loaded.llama._ctx.kv_cache_clear()
    loaded.prefix_cache.clear()
    rows = []
    for n, (dialogue, role, request) in enumerate(plan):
        started = time.perf_counter()
        response = await model.complete(request)
        seconds = time.perf_counter() - started
        rows.append({
            "mode": mode, "call": n, "dialogue": dialogue, "role": role,
            "prompt_tokens": response.usage.input_tokens, "output_tokens": response.usage.output_tokens,
            "seconds": round(seconds, 2),
        })
        print(json.dumps(rows[-1]), flush=True)
    return rows


def summary(rows: list[dict[str, Any]]) -> str:
    agent = [r["seconds"] for r in rows if r["role"] == "agent"]
    user = [r["seconds"] for r in rows if r["role"] == "user"]
    warm = statistics.mean(agent[1:]) if len(agent) > 1 else float("nan")
    return (
        f"| {rows[0]['mode']:<5} | {agent[0]:>7.1f} | {warm:>14.1f} | {statistics.mean(user):>13.1f} "
        f"| {sum(agent) + sum(user):>7.1f} |"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="qwen2.5-coder-0.5b", help="local model name")
    parser.add_argument("--rounds", type=int, default=2, help="agent+user exchanges per dialogue")
    parser.add_argument("--repeat", type=int, default=1, help="times to run both passes")
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    plan = calls(args.rounds)
    lines = []
    for _ in range(args.repeat):
        for mode in ("off", "on"):
            model = LocalModel(args.model, n_threads=args.threads, prefix_cache=mode == "on")
            rows = asyncio.run(play(model, mode, plan))
            lines.append(summary(rows))
    stats = model.load().prefix_cache.stats
    print("| cache | cold, s | warm agent, s | user call, s | total, s |")
    print("|-------|---------|----------------|---------------|---------|")
    print("\n".join(lines))
    print(f"prefix cache, all passes: {stats.hits} hits, {stats.misses} misses, {stats.restored_tokens} tokens restored "
          f"in {stats.restore_seconds:.2f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Where a served turn's time goes: a cProfile stats file (`bench/server_load.py --profile FILE`)
grouped by the part of the stack each function belongs to, as a markdown table.

    python bench/server_load.py --agent echo --conversations 50 --turns 6 --restart-after 6 --stream no --profile prof.out
    python bench/profile_summary.py prof.out --turns 300

Each function's own time (cProfile's tottime) counts for the first part whose path fragment its
file contains; built-in functions count for the part that called them most. Shares are of the
whole profile; with --turns, also milliseconds and calls per turn (cProfile inflates the times,
so read the shares).
"""

from __future__ import annotations

import argparse
import pstats
import sys
from collections import Counter
from typing import Any

PARTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("LangGraph checkpoint savers", ("langgraph/checkpoint",)),
    ("LangGraph's loop (pregel, channels, tasks)", ("langgraph/",)),
    ("langchain_core (config, callbacks)", ("langchain_core/",)),
    ("rein: server", ("/agent/server/",)),
    ("rein: runtime, graph nodes, checkpoint code", ("/agent/",)),
    ("HTTP: uvicorn, Starlette, FastAPI", ("uvicorn/", "starlette/", "fastapi/", "httptools")),
    ("SQLite (aiosqlite, sqlite3)", ("aiosqlite/", "sqlite3")),
    ("pydantic", ("pydantic",)),
    ("asyncio and uvloop", ("asyncio/", "uvloop")),
    ("JSON, msgpack (ormsgpack)", ("json/", "ormsgpack", "msgpack")),
    ("standard library, other", ("",)),
)


def part_of(filename: str) -> str:
    """The part of the stack a profiled file belongs to."""
    for name, fragments in PARTS:
        if any(f in filename for f in fragments):
            return name
    return PARTS[-1][0]


def summarize(path: str) -> tuple[Counter[str], Counter[str], float, int]:
    """Own time and calls per part, the profile's total time and total calls."""
    stats: dict[Any, Any] = pstats.Stats(path).stats  # type: ignore[attr-defined]
    own: Counter[str] = Counter()
    calls: Counter[str] = Counter()
    for (filename, _line, _name), (_cc, nc, tt, _ct, callers) in stats.items():
        if filename == "~" and callers:
            # A built-in: charge it to the part of its most frequent caller.
            top = max(callers.items(), key=lambda kv: kv[1][1])[0]
            part = part_of(top[0])
        else:
            part = part_of(filename)
        own[part] += tt
        calls[part] += nc
    return own, calls, sum(own.values()), sum(calls.values())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("profile", help="a cProfile stats file")
    parser.add_argument("--turns", type=int, default=0, help="turns the profile covers, for per-turn columns")
    args = parser.parse_args(argv)
    own, calls, total, total_calls = summarize(args.profile)
    per_turn = args.turns > 0
    head = "| part | share of time | share of calls |" + (" ms per turn (profiled) | calls per turn |" if per_turn else "")
    print(head)
    print("|---|---:|---:|" + ("---:|---:|" if per_turn else ""))
    for part, t in own.most_common():
        row = f"| {part} | {100 * t / total:.1f}% | {100 * calls[part] / total_calls:.1f}% |"
        if per_turn:
            row += f" {1000 * t / args.turns:.3f} | {calls[part] / args.turns:.0f} |"
        print(row)
    if per_turn:
        print(f"| all | 100% | 100% | {1000 * total / args.turns:.3f} | {total_calls / args.turns:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

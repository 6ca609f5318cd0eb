"""Per-turn orchestration overhead: rein's agent graph vs a bare LangGraph loop doing the same turns.

Each turn is: user message → model asks for one tool call → tool runs → model answers. Both sides use
the same scripted model and tool, the same in-memory checkpointer, and a fresh thread per turn, so
what differs is the orchestration. Run by hand:

    python bench/overhead.py [--turns 2000]

With --checkpointer (sqlite:PATH or postgresql://…) it measures rein alone on that checkpointer
instead, one agent per --durability (auto: what the Agent picks; sync: every step commits, as
agents with tools did before their model steps were journaled; exit: one checkpoint per turn),
turns interleaved, and reports per turn the median CPU and wall time and the mean checkpoint
saves (aput), step-write saves (aput_writes) and journal commits, each its own transaction, and
all commits: on SQLite those of the checkpoint and journal connections, on Postgres the
cluster's write transactions (so run it on a cluster nothing else writes to):

    python bench/overhead.py --checkpointer sqlite:/tmp/bench.sqlite --durability sync,exit --turns 500
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import inspect
import json
import operator
import statistics
import time
import uuid
from typing import Annotated, Any, TypedDict

from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph

from agent import Agent, Message, ModelRequest, ModelResponse, ToolCall
from agent.models import Model
from tools import ToolKind, tool


@tool(kind=ToolKind.READ)
def lookup(key: str) -> str:
    """Look a key up."""
    return f"value-of-{key}"


class LoopModel(Model):
    """Asks for one lookup, then answers; stateless so both loops can share it."""

    name = "loop"

    async def complete(self, request: ModelRequest) -> ModelResponse:
        if request.messages[-1].role == "tool":
            return ModelResponse(text="done")
        return ModelResponse(tool_calls=[ToolCall(id="c1", name="lookup", arguments='{"key": "k"}')], finish_reason="tool_calls")


class BareState(TypedDict):
    messages: Annotated[list[dict[str, Any]], operator.add]


def bare_graph(model: Model) -> Any:
    """The minimal LangGraph agent loop: model node, tool node, conditional edge."""

    async def call_model(state: BareState) -> dict[str, Any]:
        msgs = [Message.model_validate(m) for m in state["messages"]]
        response = await model.complete(ModelRequest(messages=msgs, tools=[lookup.openai_schema()]))
        return {"messages": [response.to_message().model_dump()]}

    async def call_tools(state: BareState) -> dict[str, Any]:
        last = state["messages"][-1]
        out = []
        for tc in last["tool_calls"]:
            value = await lookup.run(json.loads(tc["arguments"]))
            out.append(Message.tool(tc["id"], tc["name"], value).model_dump())
        return {"messages": out}

    async def route(state: BareState) -> str:
        return "tools" if state["messages"][-1].get("tool_calls") else END

    g = StateGraph(BareState)
    g.add_node("model", call_model)
    g.add_node("tools", call_tools)
    g.add_edge(START, "model")
    g.add_conditional_edges("model", route, {"tools": "tools", END: END})
    g.add_edge("tools", "model")
    return g.compile(checkpointer=InMemorySaver())


async def measure(turns: int) -> dict[str, float]:
    model = LoopModel()
    bare = bare_graph(model)
    agent = Agent(model, [lookup], checkpointer="memory")

    async def bare_turn(i: int) -> None:
        await bare.ainvoke({"messages": [Message.user("go").model_dump()]}, {"configurable": {"thread_id": f"b{i}"}})

    async def rein_turn(i: int) -> None:
        result = await agent.ainvoke("go", f"r{i}")
        assert result.output == "done"

    for i in range(50):  # warm-up
        await bare_turn(-i - 1)
        await rein_turn(-i - 1)
    wall: dict[str, list[float]] = {"bare": [], "rein": []}
    cpu: dict[str, list[float]] = {"bare": [], "rein": []}
    # Interleave the two so that machine noise hits both alike; CPU time (this process, all
    # threads) is reported beside wall time because it is far less sensitive to other load.
    for i in range(turns):
        for name, turn in (("bare", bare_turn), ("rein", rein_turn)):
            w0, c0 = time.perf_counter(), time.process_time()
            await turn(i)
            wall[name].append((time.perf_counter() - w0) * 1e6)
            cpu[name].append((time.process_time() - c0) * 1e6)
    out: dict[str, float] = {"turns": turns}
    for label, series in (("wall", wall), ("cpu", cpu)):
        bare_med, rein_med = statistics.median(series["bare"]), statistics.median(series["rein"])
        out[f"bare_{label}_median_us"] = round(bare_med)
        out[f"rein_{label}_median_us"] = round(rein_med)
        out[f"{label}_ratio"] = round(rein_med / bare_med, 2)
    return out


class Calls:
    """Counts calls of some functions (async methods, or plain functions of a module), wrapped
    where they are defined, for the whole process."""

    def __init__(self, targets: dict[str, tuple[Any, str]]) -> None:
        self.counts = dict.fromkeys(targets, 0)
        for label, (owner, name) in targets.items():
            original = getattr(owner, name)
            if not inspect.iscoroutinefunction(original):

                def plain(*args: Any, _original: Any = original, _label: str = label, **kwargs: Any) -> Any:
                    self.counts[_label] += 1
                    return _original(*args, **kwargs)

                setattr(owner, name, plain)
                continue

            async def counted(self_: Any, *args: Any, _original: Any = original, _label: str = label, **kwargs: Any) -> Any:
                self.counts[_label] += 1
                return await _original(self_, *args, **kwargs)

            setattr(owner, name, counted)

    def snapshot(self) -> dict[str, int]:
        return dict(self.counts)


async def measure_store(turns: int, checkpointer: str, durabilities: list[str], turns_per_thread: int = 10) -> dict[str, Any]:
    """rein alone on a real checkpointer, one agent per durability, their turns interleaved so
    that machine noise hits them alike: per-turn CPU, wall and saves of each."""
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    from agent.journal_sql import PostgresJournal, SqliteJournal

    saver: type = AsyncSqliteSaver
    journal: type = SqliteJournal
    postgres = checkpointer.startswith(("postgres://", "postgresql://"))
    if postgres:
        from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

        saver, journal = AsyncPostgresSaver, PostgresJournal
    targets = {
        # aput_writes counts the saver's own step-write transactions; rein's savers batch a run's
        # step writes into its checkpoint's transaction (agent.checkpoint.WriteBatching).
        "aput": (saver, "aput"), "aput_writes": (saver, "aput_writes"),
        # Each journal statement commits on its own; _execute_all commits its statements together.
        "journal": (journal, "_execute"), "journal_batch": (journal, "_execute_all"),
    }
    if saver is AsyncSqliteSaver:
        import aiosqlite

        import agent.checkpoint
        import agent.journal

        # rein's saver stores checkpoints itself; its step writes still fall back to LangGraph's
        # aput_writes outside a batch.
        targets["aput"] = (agent.checkpoint.BatchedSqliteSaver, "aput")
        # Every transaction on the checkpoint and journal connections (the lease's is sqlite3's own):
        # aiosqlite's own commits, and those the saver and the journal make on aiosqlite's thread.
        targets["sqlite_commits"] = (aiosqlite.Connection, "commit")
        targets["saver_commits"] = (agent.checkpoint, "commit_statements")
        targets["journal_sql_commits"] = (agent.journal, "commit_statements")
    calls = Calls(targets)
    run = uuid.uuid4().hex[:8]
    agents: dict[str, Agent] = {}
    for durability in durabilities:
        agent = agents[durability] = Agent(LoopModel(), [lookup], checkpointer=checkpointer)
        if durability != "auto":
            # The bench compares the two ways a turn with tools can commit, on the same code.
            agent._durability = durability
            agent._turn_journal = durability == "exit"

    async def turn(durability: str, i: int) -> None:
        result = await agents[durability].ainvoke("go", f"{run}-{durability}-{i // turns_per_thread}")
        assert result.output == "done"

    wall: dict[str, list[float]] = {d: [] for d in agents}
    cpu: dict[str, list[float]] = {d: [] for d in agents}
    counted: dict[str, dict[str, int]] = {d: dict.fromkeys(calls.counts, 0) for d in agents}
    write_xacts: dict[str, int] = dict.fromkeys(agents, 0)
    async with contextlib.AsyncExitStack() as stack:
        next_xid = await _postgres_xids(checkpointer, stack) if postgres else None
        for agent in agents.values():
            await stack.enter_async_context(agent)
        for i in range(-50, 0):  # warm-up, on threads of their own
            for durability in agents:
                await turn(durability, i)
        for i in range(turns):
            for durability in agents:
                before = calls.snapshot()
                xid0 = await next_xid() if next_xid else 0
                w0, c0 = time.perf_counter(), time.process_time()
                await turn(durability, i)
                wall[durability].append((time.perf_counter() - w0) * 1e6)
                cpu[durability].append((time.process_time() - c0) * 1e6)
                if next_xid:
                    write_xacts[durability] += await next_xid() - xid0
                for label, n in calls.snapshot().items():
                    counted[durability][label] += n - before[label]
        # Python function calls per turn: an exact count where the CPU times above move with the
        # machine's load, so a change to the turn's code path shows on a busy machine too.
        python_calls = {d: await _python_calls(lambda k, d=d: turn(d, turns + k), 20) for d in agents}
    out: dict[str, Any] = {"turns": turns, "checkpointer": checkpointer.split(":")[0], "turns_per_thread": turns_per_thread}
    for durability, agent in agents.items():
        c = counted[durability]
        out[durability] = {
            "durability": agent._durability,
            "cpu_median_us": round(statistics.median(cpu[durability])),
            "wall_median_us": round(statistics.median(wall[durability])),
            "python_calls_per_turn": python_calls[durability],
            "aput_per_turn": round(c["aput"] / turns, 2),
            "aput_writes_per_turn": round(c["aput_writes"] / turns, 2),
            "journal_commits_per_turn": round((c["journal"] + c["journal_batch"]) / turns, 2),
            **({"sqlite_commits_per_turn": round((c["sqlite_commits"] + c["saver_commits"] + c["journal_sql_commits"]) / turns, 2)} if "sqlite_commits" in c else {}),
            **({"postgres_write_xacts_per_turn": round(write_xacts[durability] / turns, 2)} if postgres else {}),
        }
    return out


async def _python_calls(turn: Any, n: int) -> float:
    """The mean number of Python function calls (cProfile's count) of turns 0 … n-1."""
    import cProfile
    import pstats

    profiler = cProfile.Profile()
    profiler.enable()
    try:
        for k in range(n):
            await turn(k)
    finally:
        profiler.disable()
    return round(pstats.Stats(profiler).total_calls / n, 1)  # type: ignore[attr-defined]


async def _postgres_xids(dsn: str, stack: contextlib.AsyncExitStack) -> Any:
    """A function answering the cluster's next transaction id, on a connection of its own.

    Postgres gives a transaction an id only when it writes, so the difference over a turn counts
    the turn's write transactions on every connection (checkpoint, journal), and those of
    anything else writing to the same cluster: measure on a quiet one. Reading it writes nothing."""
    import psycopg

    conn = await stack.enter_async_context(await psycopg.AsyncConnection.connect(dsn, autocommit=True))

    async def next_xid() -> int:
        cursor = await conn.execute("SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint")
        row = await cursor.fetchone()
        return int(row[0]) if row else 0

    return next_xid


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=2000)
    parser.add_argument("--checkpointer", default=None, help="sqlite:PATH or postgresql://…: rein alone on it")
    parser.add_argument(
        "--durability", default="sync,exit", help="comma-separated, of auto, sync, exit (default sync,exit)"
    )
    args = parser.parse_args()
    if args.checkpointer:
        result = asyncio.run(measure_store(args.turns, args.checkpointer, args.durability.split(",")))
    else:
        result = asyncio.run(measure(args.turns))
    print(json.dumps(result))


if __name__ == "__main__":
    main()

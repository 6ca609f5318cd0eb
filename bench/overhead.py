"""Per-turn orchestration overhead: rein's agent graph vs a bare LangGraph loop doing the same turns.

Each turn is: user message → model asks for one tool call → tool runs → model answers. Both sides use
the same scripted model and tool, the same in-memory checkpointer, and a fresh thread per turn, so
what differs is the orchestration. Run by hand:

    python bench/overhead.py [--turns 2000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import operator
import statistics
import time
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--turns", type=int, default=2000)
    args = parser.parse_args()
    result = asyncio.run(measure(args.turns))
    print(json.dumps(result))


if __name__ == "__main__":
    main()

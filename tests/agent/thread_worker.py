"""Subprocess body for the thread-concurrency tests.

turns CHECKPOINTER THREAD NAME COUNT READY GO: after writing READY and seeing GO, runs COUNT turns
(each one tool call, then an answer) and prints a JSON list of the user messages whose turn
reported agent_stop.

hold CHECKPOINTER THREAD IN_TOOL RELEASE: runs one turn whose tool writes IN_TOOL, then waits
until RELEASE exists.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from agent import Agent, ScriptedModel
from agent.models import call, reply
from tools import ToolKind, tool

IN_TOOL: Path | None = None
RELEASE: Path | None = None


@tool(kind=ToolKind.WRITE, timeout_s=None)
async def stamp(tag: str) -> str:
    """Stamp a tag (slow enough for the other process to want the thread meanwhile)."""
    await asyncio.sleep(0.005)
    return f"stamped {tag}"


@tool(kind=ToolKind.WRITE, timeout_s=None)
async def wait_for_release(tag: str) -> str:
    """Block until the test lets go."""
    if IN_TOOL is not None and RELEASE is not None:
        IN_TOOL.write_text("in tool")
        while not RELEASE.exists():
            await asyncio.sleep(0.02)
    return f"released {tag}"


async def turns(checkpointer: str, thread: str, name: str, count: int, ready: Path, go: Path) -> None:
    steps = []
    for i in range(count):
        tag = f"{name}-{i}"
        steps += [call("stamp", tag=tag, id=f"call-{tag}"), reply(f"done {tag}")]
    agent = Agent(ScriptedModel(steps), [stamp], checkpointer=checkpointer)
    ready.write_text("ready")
    while not go.exists():
        await asyncio.sleep(0.01)
    succeeded = []
    for i in range(count):
        result = await agent.ainvoke(f"{name}-{i}", thread)
        if result.termination == "agent_stop":
            succeeded.append(f"{name}-{i}")
    await agent.aclose()
    print(json.dumps(succeeded))


async def hold(checkpointer: str, thread: str) -> None:
    model = ScriptedModel([call("wait_for_release", tag="held", id="call-held"), reply("held answer")])
    agent = Agent(model, [wait_for_release], checkpointer=checkpointer)
    await agent.ainvoke("hold it", thread)
    await agent.aclose()


if __name__ == "__main__":
    if sys.argv[1] == "turns":
        _, _, spec, thread_id, who, n, ready_file, go_file = sys.argv
        asyncio.run(turns(spec, thread_id, who, int(n), Path(ready_file), Path(go_file)))
    else:
        _, _, spec, thread_id, in_tool, release = sys.argv
        IN_TOOL, RELEASE = Path(in_tool), Path(release)
        asyncio.run(hold(spec, thread_id))

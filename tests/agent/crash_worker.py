"""Subprocess body for the crash/resume test: runs two turns; the second blocks inside a tool."""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

from agent import Agent, ScriptedModel
from agent.models import call, reply
from tools import ToolKind, tool

MARKER = Path(sys.argv[2]) if len(sys.argv) > 2 else None


@tool(kind=ToolKind.WRITE, timeout_s=None, idempotent=True)
def archive(note: str) -> str:
    """Archive a note (blocks in the first process, so it can be killed mid-run); archiving twice
    is harmless, so the resumed run may call it again."""
    if MARKER is not None:
        MARKER.write_text("in tool")
        time.sleep(120)
    return f"archived {note}"


async def main(db: str) -> None:
    model = ScriptedModel([reply("first answer"), call("archive", note="n1"), reply("never reached")])
    agent = Agent(model, [archive], checkpointer=f"sqlite:{db}")
    await agent.ainvoke("turn one", "T")
    await agent.ainvoke("turn two", "T")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))

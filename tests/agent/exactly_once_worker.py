"""Subprocess body for the exactly-once tests.

crash DB LOG MARKER SECOND: two turns on thread T; the second makes three parallel WRITE calls
(charge a, SECOND b, charge c). Every call appends to LOG when it takes effect; b then writes
MARKER and blocks, so the test can SIGKILL the process after a has returned and while b runs.

timeout DB LOG MARKER: one turn whose sync WRITE call times out while its thread sleeps on; the
worker writes MARKER when the run has returned and then simply returns from main.
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

from agent import Agent, ScriptedModel
from agent.models import call, calls, reply
from tools import ToolKind, tool

LOG: Path | None = None
MARKER: Path | None = None
BLOCK_ON = "b"
"""The label whose call blocks after taking effect (while MARKER is set)."""


def effect(kind: str, label: str) -> None:
    assert LOG is not None
    with LOG.open("a") as f:
        f.write(f"{kind} {label}\n")
    if MARKER is not None and label == BLOCK_ON:
        MARKER.write_text("second call running")
        time.sleep(120)


@tool(kind=ToolKind.WRITE, timeout_s=None)
def charge(label: str) -> str:
    """Charge a card (not idempotent: a second run charges twice)."""
    effect("charge", label)
    return f"charged {label}"


@tool(kind=ToolKind.WRITE, timeout_s=None, idempotent=True)
def notify(label: str) -> str:
    """Set a notification flag (idempotent: setting it twice is setting it once)."""
    effect("notify", label)
    return f"notified {label}"


@tool(kind=ToolKind.WRITE, timeout_s=0.2)
def slow_write(label: str) -> str:
    """A write whose thread outlives its timeout by far."""
    time.sleep(60)
    effect("slow", label)
    return f"wrote {label}"


TOOLS = [charge, notify, slow_write]


def crash_script(second: str) -> list:
    return [
        reply("first answer"),
        calls(call("charge", label="a"), call(second, label="b"), call("charge", label="c")),
        reply("never reached"),
    ]


async def crash(db: str, second: str) -> None:
    agent = Agent(ScriptedModel(crash_script(second)), TOOLS, checkpointer=f"sqlite:{db}")
    await agent.ainvoke("turn one", "T")
    await agent.ainvoke("turn two", "T")


async def timeout(db: str) -> None:
    agent = Agent(ScriptedModel([call("slow_write", label="x"), reply("gave up")]), TOOLS, checkpointer=f"sqlite:{db}")
    result = await agent.ainvoke("write x", "T")
    await agent.aclose()
    assert MARKER is not None
    MARKER.write_text(result.messages[2].text)


if __name__ == "__main__":
    mode, db, LOG, MARKER = sys.argv[1], sys.argv[2], Path(sys.argv[3]), Path(sys.argv[4])
    if mode == "crash":
        asyncio.run(crash(db, sys.argv[5]))
    else:
        asyncio.run(timeout(db))

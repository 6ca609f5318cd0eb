"""Subprocess body for the journaled model step tests (one commit per turn, killed mid-turn).

SCENARIO STORE LOG MARKER THREAD: the thread gets one plain turn, then a turn that the test SIGKILLs. Every
tool appends to LOG when it takes effect; the call labelled "stop" writes MARKER and blocks, so
the test kills the process there.

- between: the model asks for one idempotent `notify stop`, which blocks before it takes effect:
  the kill lands after the model step and before its tool did anything.
- during: parallel `charge a`, `charge stop`, `charge c`; a has returned when stop blocks after
  taking effect.
- two_steps: `charge a`, then (a second model step) `charge stop`, which blocks after taking effect.
- after_approval: `refund a` pauses for approval; the worker approves it, and the resumed run's
  next model step asks for `charge stop`, which blocks after taking effect.

STORE is a SQLite path or a postgres:// URL.
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


def effect(kind: str, label: str) -> None:
    assert LOG is not None
    with LOG.open("a") as f:
        f.write(f"{kind} {label}\n")


def block(where: str) -> None:
    if MARKER is not None:
        MARKER.write_text(where)
        time.sleep(120)


@tool(kind=ToolKind.WRITE, timeout_s=None)
def charge(label: str) -> str:
    """Charge a card (not idempotent: a second run charges twice)."""
    effect("charge", label)
    if label == "stop":
        block("after charge stop")
    return f"charged {label}"


@tool(kind=ToolKind.WRITE, timeout_s=None, idempotent=True)
def notify(label: str) -> str:
    """Set a flag (idempotent); blocks before taking effect for the label "stop"."""
    if label == "stop":
        block("before notify stop")
    effect("notify", label)
    return f"notified {label}"


@tool(kind=ToolKind.WRITE, timeout_s=None, needs_approval=True)
def refund(label: str) -> str:
    """Refund an order (needs approval)."""
    effect("refund", label)
    return f"refunded {label}"


TOOLS = [charge, notify, refund]

SCRIPTS = {
    "between": [call("notify", label="stop")],
    "during": [calls(call("charge", label="a"), call("charge", label="stop"), call("charge", label="c"))],
    "two_steps": [call("charge", label="a"), call("charge", label="stop")],
    "after_approval": [call("refund", label="a"), call("charge", label="stop")],
}
"""What the model answers in the killed turn, step by step."""


def store_spec(store: str) -> str:
    return store if store.startswith(("postgres://", "postgresql://")) else f"sqlite:{store}"


async def main(scenario: str, store: str, thread: str) -> None:
    model = ScriptedModel([reply("first answer"), *SCRIPTS[scenario], reply("never reached")])
    agent = Agent(model, TOOLS, checkpointer=store_spec(store))
    await agent.ainvoke("turn one", thread)
    result = await agent.ainvoke("turn two", thread)
    if result.termination == "interrupted":
        await agent.aresume(thread, True)


if __name__ == "__main__":
    scenario, store, LOG, MARKER = sys.argv[1], sys.argv[2], Path(sys.argv[3]), Path(sys.argv[4])
    asyncio.run(main(scenario, store, sys.argv[5]))

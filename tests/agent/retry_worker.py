"""Subprocess body for the SIGKILL + resend test: `rein serve`'s app over a SQLite thread store,
serving a cashier whose `pay` tool appends to a ledger file.

python -m tests.agent.retry_worker DB LEDGER MARKER [--answer]: prints its URL, then serves. Without
--answer the model, once it sees the payment's result (so the write has committed), creates MARKER
and hangs, for the test to SIGKILL the process there.
"""

from __future__ import annotations

import asyncio
import socket
import sys
from pathlib import Path

import uvicorn

from agent.messages import ModelRequest
from agent.models import FunctionModel, call
from agent.runtime import Agent
from agent.server import create_app
from tools import ToolKind, tool

DB, LEDGER, MARKER = (Path(a) for a in sys.argv[1:4])
ANSWER = "--answer" in sys.argv


@tool(kind=ToolKind.WRITE)
def pay(ref: str) -> str:
    """Make a payment.

    Args:
        ref: The payment reference.
    """
    with LEDGER.open("a") as f:
        f.write(ref + "\n")
    return f"paid {ref}"


async def cashier(request: ModelRequest) -> object:
    last = request.messages[-1]
    if last.role == "tool":
        if not ANSWER:
            MARKER.write_text("the write has committed")
            await asyncio.sleep(3600)
        return f"Done: {last.text}."
    if last.text.startswith("pay "):
        ref = last.text.split()[1]
        return call("pay", {"ref": ref}, id=f"call-{ref}")
    return f"Hello, you said {last.text}"


def main() -> None:
    agent = Agent(FunctionModel(cashier), [pay], checkpointer=str(DB))
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)  # connections wait in the backlog until uvicorn's loop accepts them
    server = uvicorn.Server(uvicorn.Config(create_app({"cashier": agent}), log_level="warning"))
    print(f"http://127.0.0.1:{sock.getsockname()[1]}", flush=True)
    server.run(sockets=[sock])


if __name__ == "__main__":
    main()

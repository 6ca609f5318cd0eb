"""Subprocess body for the approval-across-a-restart test: the server's app over a SQLite thread
store, serving a clerk whose `cancel_order` tool needs approval and appends to a ledger file.

python -m tests.agent.approval_worker DB LEDGER: prints its URL, then serves until SIGTERM.
"""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import uvicorn

from agent.messages import ModelRequest
from agent.models import FunctionModel, call
from agent.runtime import Agent
from agent.server import create_app
from tools import ToolKind, tool

DB, LEDGER = (Path(a) for a in sys.argv[1:3])


@tool(kind=ToolKind.WRITE, needs_approval=True)
def cancel_order(order_id: str) -> str:
    """Cancel an order.

    Args:
        order_id: The order to cancel.
    """
    with LEDGER.open("a") as f:
        f.write(order_id + "\n")
    return f"{order_id} cancelled"


def clerk(request: ModelRequest) -> object:
    last = request.messages[-1]
    if last.role == "tool":
        return f"Done: {last.text}."
    return call("cancel_order", {"order_id": last.text.split()[-1]}, id="call-restart", text="Cancelling it.")


def main() -> None:
    agent = Agent(FunctionModel(clerk), [cancel_order], checkpointer=str(DB))
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    server = uvicorn.Server(uvicorn.Config(create_app({"clerk": agent}), log_level="warning"))
    print(f"http://127.0.0.1:{sock.getsockname()[1]}", flush=True)
    server.run(sockets=[sock])


if __name__ == "__main__":
    main()

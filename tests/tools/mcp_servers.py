"""A small MCP server written with the SDK's server API, for the MCP client tests.

Run `python mcp_servers.py stdio` or `python mcp_servers.py http PORT`. NOTES_FILE (an
environment variable) is where the destructive tool writes, so a test can see that it ran.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

server = MCPServer("rein-test", log_level="WARNING")


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def echo(text: str) -> str:
    """Return the text unchanged."""
    return text


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def add(a: int, b: int = 0) -> int:
    """Add two integers."""
    return a + b


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def pid() -> int:
    """The server's process id (a new process means the client reconnected)."""
    return os.getpid()


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def header(name: str, ctx: Context) -> str:
    """The value of one HTTP request header ("" over stdio or when absent)."""
    return (ctx.headers or {}).get(name.lower(), "")


@server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True))
def write_note(key: str, value: str) -> str:
    """Append key=value to the notes file."""
    with Path(os.environ["NOTES_FILE"]).open("a", encoding="utf-8") as f:
        f.write(f"{key}={value}\n")
    return f"wrote {key}"


@server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True))
def tag(label: str) -> str:
    """Add a label (additive and idempotent)."""
    return f"tagged {label}"


@server.tool()
def fail(reason: str) -> str:
    """Always fails, with a message for the caller."""
    raise ToolError(f"cannot comply: {reason}")


@server.tool()
async def slow(seconds: float) -> str:
    """Sleep, then answer."""
    await asyncio.sleep(seconds)
    return "slept"


@server.tool()
def crash() -> str:
    """Kill the server process mid-call."""
    os._exit(3)


if __name__ == "__main__":
    if sys.argv[1] == "stdio":
        server.run()
    else:
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))

"""`rein mcp serve`: serve agents as MCP tools, over stdio or streamable HTTP (docs/mcp.md)."""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
import threading

from agent.errors import UserFacingError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Subcommands of `rein mcp` and their options."""
    commands = parser.add_subparsers(dest="mcp_command", metavar="COMMAND", required=True)
    serve = commands.add_parser(
        "serve", help="serve agents as MCP tools",
        description="Serve agents as MCP tools: one tool per agent (message and optional thread_id "
        "in, the answer out) and, with --expose-tools, the agents' own tools.",
    )
    serve.add_argument(
        "--agent", action="append", default=[], metavar="SPEC",
        help="agent spec (YAML or JSON); repeat to serve several, each a tool named after the agent. "
        "Default: one agent named 'agent' on the embedded local model",
    )
    serve.add_argument("--transport", choices=["stdio", "http"], default="stdio",
                       help="stdio (default: for a client that starts this command) or streamable HTTP")
    serve.add_argument("--host", default="127.0.0.1", help="http: interface to listen on (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8000, help="http: port (default 8000; 0 picks a free one)")
    serve.add_argument(
        "--expose-tools", action="store_true",
        help="also serve each agent's own tools as AGENT.TOOL (tools that need approval are withheld)",
    )
    serve.add_argument(
        "--db", metavar="PATH",
        help="threads database for every agent: a SQLite path, postgres://… or memory "
        "(default: each spec's checkpointer, normally $REIN_HOME/threads.sqlite)",
    )
    serve.add_argument("--log-level", default="warning", choices=["critical", "error", "warning", "info", "debug"],
                       help="http: the web server's log level (default warning)")


def run(args: argparse.Namespace) -> int:
    """Run the chosen subcommand."""
    if args.mcp_command == "serve":
        return serve(args)
    raise UserFacingError(f"unknown mcp command {args.mcp_command!r}")  # argparse rejects it first


def serve(args: argparse.Namespace) -> int:
    """`rein mcp serve`: build the agents, then serve until the client leaves or a signal stops it."""
    from agent.cli.mcp_server import AgentMcpServer
    from agent.cli.serve import LOOPBACK, bind, build_agents

    server = AgentMcpServer(build_agents(args.agent, args.db), expose_tools=args.expose_tools)
    server.lowlevel()  # fails now, with the install hint, when the SDK is missing
    tools = [*server.agents, *server.exposed]
    if server.withheld:
        print(f"rein mcp serve: not exposed (they need approval): {', '.join(server.withheld)}", file=sys.stderr)
    if args.transport == "stdio":
        # stdout carries the protocol: everything we say goes to stderr.
        print(f"rein mcp serve: {', '.join(tools)} over stdio", file=sys.stderr, flush=True)
        asyncio.run(server.serve_stdio())
        return 0
    sock = bind(args.host, args.port)
    host, port = sock.getsockname()[:2]
    if args.host not in LOOPBACK:
        print(
            f"rein mcp serve: WARNING: listening on {args.host} without authentication: anyone who "
            "can reach this port can use the agents",
            file=sys.stderr,
        )
    shown = f"[{host}]" if ":" in host else host
    print(f"rein mcp serve: {', '.join(tools)} on http://{shown}:{port}/mcp", flush=True)
    # uvicorn re-raises the signal that stopped it once it has shut down; with these handlers in
    # place that re-raise is a no-op and the command exits 0 (as `rein serve` does).
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: None)
    started = asyncio.run(server.serve_http(sock, args.host, args.log_level))
    print("rein mcp serve: stopped", flush=True)
    return 0 if started else 1

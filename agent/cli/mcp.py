"""`rein mcp serve`: serve agents as MCP tools, over stdio or streamable HTTP (docs/mcp.md)."""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import threading
from typing import TYPE_CHECKING

from agent.errors import UserFacingError

if TYPE_CHECKING:
    from agent.server.auth import ApiKeys

ENV_VAR = "REIN_API_KEYS"
"""Environment variable of `rein serve`'s extra keys (agent/server/auth.py reads it)."""


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
        "--api-key-file", metavar="FILE",
        help="http: bearer keys, as for `rein serve`: KEY (its own tenant) or TENANT: KEY a line; "
        "REIN_API_KEYS adds more. Each tenant has its own threads",
    )
    serve.add_argument(
        "--no-auth", action="store_true",
        help="http: serve a non-loopback --host without API keys (anyone who reaches the port can "
        "use the agents and their exposed tools)",
    )
    serve.add_argument(
        "--allowed-host", action="append", default=[], metavar="NAME",
        help="http: a name clients may send as Host (and Origin) besides loopback and --host, e.g. "
        "the name of a proxy in front; repeat for several",
    )
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
    from agent.cli.serve import bind, build_agents

    keys = http_keys(args)
    server = AgentMcpServer(build_agents(args.agent, args.db), expose_tools=args.expose_tools, api_keys=keys)
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
    if keys is None and args.no_auth:
        print(
            f"rein mcp serve: WARNING: --no-auth on {args.host}: anyone who can reach this port can "
            "use the agents",
            file=sys.stderr,
        )
    shown = f"[{host}]" if ":" in host else host
    tenants = len(keys.tenants) if keys is not None else 0
    auth = f"auth on, {tenants} tenant{'s' if tenants != 1 else ''}" if keys is not None else "auth off"
    print(f"rein mcp serve: {', '.join(tools)} on http://{shown}:{port}/mcp ({auth})", flush=True)
    # uvicorn re-raises the signal that stopped it once it has shut down; with these handlers in
    # place that re-raise is a no-op and the command exits 0 (as `rein serve` does).
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: None)
    started = asyncio.run(server.serve_http(sock, args.host, args.log_level, args.allowed_host))
    print("rein mcp serve: stopped", flush=True)
    return 0 if started else 1


def http_keys(args: argparse.Namespace) -> ApiKeys | None:
    """The API keys an HTTP server checks (None: none given), or a UserFacingError when the options
    do not fit: HTTP options over stdio, or a non-loopback host with neither keys nor --no-auth."""
    from agent.cli.serve import LOOPBACK

    if args.transport == "stdio":
        # A client that starts this command over stdio is the local user: no keys to check.
        given = [name for name, on in (("--api-key-file", args.api_key_file), ("--no-auth", args.no_auth),
                                       ("--allowed-host", args.allowed_host)) if on]
        if given:
            raise UserFacingError(f"{', '.join(given)} apply to --transport http only")
        return None
    keys = None
    if args.api_key_file is not None or os.environ.get(ENV_VAR, "").strip():
        # Imported only with keys: agent.server needs the `server` extra, plain HTTP does not.
        from agent.extras import needs_extra

        with needs_extra("server", "API keys of `rein mcp serve`"):
            from agent.server.auth import ApiKeys, load_api_keys

        loaded = ApiKeys(load_api_keys(args.api_key_file, os.environ))
        keys = loaded if loaded.enabled else None  # REIN_API_KEYS of commas only holds none
    if keys is not None and args.no_auth:
        raise UserFacingError("--no-auth contradicts the API keys given (--api-key-file or REIN_API_KEYS)")
    if keys is None and not args.no_auth and args.host not in LOOPBACK:
        raise UserFacingError(
            f"refusing to serve {args.host} without API keys: pass --api-key-file (or set {ENV_VAR}), "
            "or --no-auth to let anyone who reaches the port use the agents"
        )
    return keys

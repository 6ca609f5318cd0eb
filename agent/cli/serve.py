"""`rein serve`: serve agents over an OpenAI-compatible HTTP API (see docs/server.md)."""

from __future__ import annotations

import argparse
import gc
import os
import signal
import socket
import sys
import threading
from typing import Any

from agent.errors import UserFacingError

LOOPBACK = {"127.0.0.1", "localhost", "::1"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of `rein serve`."""
    parser.add_argument(
        "--agent", action="append", default=[], metavar="SPEC",
        help="agent spec (YAML or JSON); repeat to serve several, each under its spec name. "
        "Default: one agent named 'agent' on the embedded local model",
    )
    parser.add_argument("--host", default="127.0.0.1", help="interface to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8000, help="port (default 8000; 0 picks a free one)")
    parser.add_argument(
        "--api-key-file", metavar="FILE",
        help="bearer keys, one a line: KEY (its own tenant) or TENANT: KEY (keys of one tenant share "
        "threads); REIN_API_KEYS (comma separated, same forms) adds more. No keys: open server",
    )
    parser.add_argument(
        "--cors-origin", action="append", default=[], metavar="ORIGIN",
        help="let browser apps on ORIGIN (e.g. https://chat.example.com, or *) call the API; "
        "repeat for several. Default: no CORS headers",
    )
    parser.add_argument(
        "--ui", action="store_true",
        help="also serve a browser chat page at / (the same API keys; see docs/server.md, 'A browser UI')",
    )
    parser.add_argument(
        "--db", metavar="PATH",
        help="threads database for every agent: a SQLite path, postgres://… or memory "
        "(default: each spec's checkpointer, normally $REIN_HOME/threads.sqlite)",
    )
    parser.add_argument("--max-body-bytes", type=int, default=4 * 1024 * 1024, metavar="N",
                        help="largest request body accepted (default 4 MiB); larger ones get 413")
    parser.add_argument("--request-timeout", type=float, default=300.0, metavar="S",
                        help="seconds a request waits for its answer before 504 (default 300)")
    parser.add_argument("--shutdown-grace", type=float, default=30.0, metavar="S",
                        help="seconds shutdown waits for turns still running (default 30)")
    parser.add_argument("--header-timeout", type=float, default=10.0, metavar="S",
                        help="seconds a connection has to send its request line and headers (default 10)")
    parser.add_argument("--body-timeout", type=float, default=60.0, metavar="S",
                        help="seconds a request has to send its whole body before 408 (default 60)")
    parser.add_argument("--keep-alive-timeout", type=float, default=5.0, metavar="S",
                        help="seconds an idle connection stays open between requests (default 5)")
    parser.add_argument("--max-connections", type=int, metavar="N",
                        help="most connections held at once; past it the longest-idle one is closed "
                        "(default: the open-file limit less 128 for the rest of the process)")
    parser.add_argument("--max-messages", type=int, metavar="N",
                        help="most messages in one request; more get 400 (default 2048)")
    parser.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    parser.add_argument(
        "--workers", type=int, default=1, metavar="N",
        help="serve from N processes sharing the port (default 1); needs a Postgres --db, since "
        "SQLite and memory threads belong to one process",
    )
    # A worker of --workers N: serve on this inherited listening socket instead of binding one.
    parser.add_argument("--listen-fd", type=int, help=argparse.SUPPRESS)


def checkpointer_for(db: str) -> str:
    """The checkpointer spec of a --db value."""
    if db == "memory" or db.startswith(("postgres://", "postgresql://")):
        return db
    return f"sqlite:{db}"


def build_agents(specs: list[str], db: str | None) -> dict[str, Any]:
    """Agents from spec files by name (one default agent when there are none)."""
    from agent.models import ModelError
    from agent.runtime import Agent

    overrides = {"checkpointer": checkpointer_for(db)} if db else {}
    agents: dict[str, Any] = {}
    sources: list[str | None] = [*specs] or [None]
    for source in sources:
        try:
            agent = Agent.from_spec(source if source is not None else {}, **overrides)
        except UserFacingError:
            raise
        except (ModelError, ImportError, OSError, ValueError) as exc:
            what = source or "the default agent"
            raise UserFacingError(f"cannot build {what}: {type(exc).__name__}: {exc}") from None
        if agent.name in agents:
            raise UserFacingError(f"two agents are named {agent.name!r}; give each spec a distinct `name`")
        agents[agent.name] = agent
    return agents


def open_storage(agents: dict[str, Any]) -> None:
    """Open each agent's threads database once before serving, so one that cannot be used (corrupt,
    not writable, its Postgres server down) stops the start with one line instead of a traceback
    from the app's start-up."""
    import asyncio
    import contextlib

    from agent.checkpoint import locate, open_checkpointer
    from agent.sqlite_file import storage_cause

    specs: dict[tuple[str, str | None], Any] = {}
    for agent in agents.values():
        where = locate(agent.checkpointer_spec)
        if where.kind in ("sqlite", "postgres"):
            specs.setdefault((where.kind, where.target), agent.checkpointer_spec)

    async def open_one(spec: Any) -> None:
        async with contextlib.AsyncExitStack() as stack:
            await open_checkpointer(spec, stack)

    for (kind, target), spec in specs.items():
        try:
            asyncio.run(open_one(spec))
        except UserFacingError:
            raise
        except Exception as exc:  # SQLite's, the file system's and psycopg's errors alike
            cause = storage_cause(exc) or (exc.strerror if isinstance(exc, OSError) and exc.strerror else None)
            shown = target if kind == "sqlite" else "on Postgres"
            raise UserFacingError(
                f"cannot open the threads database {shown}: {cause or f'{type(exc).__name__}: {exc}'}"
            ) from None


def bind(host: str, port: int) -> socket.socket:
    """A bound, listening socket, or a clear error when the address is taken or invalid."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise UserFacingError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    # Listening now lets clients that connect while the app starts up wait in the backlog
    # instead of being refused.
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def run(args: argparse.Namespace) -> int:
    """Build the agents and serve them until SIGINT or SIGTERM (graceful: running turns finish)."""
    from agent.extras import needs_extra

    with needs_extra("server", "`rein serve`"):
        import uvicorn  # noqa: F401  (missing extra reported before any work)

        from agent.server import ServerConfig, create_app, load_api_keys

    if args.max_body_bytes <= 0:
        raise UserFacingError("--max-body-bytes must be positive")
    if args.request_timeout <= 0 or args.shutdown_grace < 0:
        raise UserFacingError("--request-timeout must be positive and --shutdown-grace not negative")
    if not 0 <= args.port <= 65535:
        raise UserFacingError(f"--port {args.port} is not a port number")
    if args.workers < 1:
        raise UserFacingError("--workers must be at least 1")
    check_limits(args)
    keys = load_api_keys(args.api_key_file, os.environ)
    agents = build_agents(args.agent, args.db)
    if args.workers > 1:
        return supervise(args, agents)
    open_storage(agents)
    config = ServerConfig(
        max_body_bytes=args.max_body_bytes, request_timeout_s=args.request_timeout,
        shutdown_grace_s=args.shutdown_grace, body_timeout_s=args.body_timeout,
        max_messages=args.max_messages or ServerConfig.max_messages,
    )
    app = create_app(agents, api_keys=keys, config=config, cors_origins=args.cors_origin, ui=args.ui)
    if args.listen_fd is not None:
        sock = socket.socket(fileno=args.listen_fd)
        return serve_app(app, sock, args)
    sock = bind(args.host, args.port)
    host, port = sock.getsockname()[:2]
    if not keys and args.host not in LOOPBACK:
        print(
            f"rein serve: WARNING: no API keys and listening on {args.host}: anyone who can reach "
            "this port can use the agents; pass --api-key-file or set REIN_API_KEYS",
            file=sys.stderr,
        )
    if keys:
        print(
            "rein serve: NOTE: a request that names no thread (no X-Rein-Thread header, no `user` field) "
            "gets a thread derived from its conversation, which end users of one key share while their "
            "conversations are word for word identical; send `user` or X-Rein-Thread per end user "
            "(docs/server.md, 'Threads and stateless clients')",
            file=sys.stderr,
        )
    volatile = [name for name, agent in agents.items() if agent.checkpointer_spec == "memory"]
    if volatile:
        print(
            f"rein serve: WARNING: {', '.join(volatile)} keep threads in memory only; they are lost "
            "when the server stops (pass --db PATH to persist them)",
            file=sys.stderr,
        )
    shown = f"[{host}]" if ":" in host else host
    tenants = len({k.tenant_id for k in keys})
    auth = f"auth on, {tenants} tenant{'s' if tenants != 1 else ''}" if keys else "auth off"
    cors = f"; CORS: {', '.join(args.cors_origin)}" if args.cors_origin else ""
    page = f"; chat page: http://{shown}:{port}/" if args.ui else ""
    print(
        f"rein serve: {', '.join(agents)} on http://{shown}:{port}/v1 "
        f"({auth}; threads: {args.db or 'per spec'}{cors}{page})",
        flush=True,
    )
    return serve_app(app, sock, args)


GEN0_THRESHOLD = 10_000
"""Allocations between first-generation collections in a served process (Python's default: 700)."""


def freeze_heap() -> None:
    """Exempt everything alive now (imported modules, built agents, the app) from cyclic garbage
    collection for the life of the process.

    A served turn allocates many short-lived containers, so the collector runs every few hundred
    allocations, and each of its full passes walked the ~180,000 objects of the imported libraries,
    which never die: about 0.6 ms of CPU per turn, in pauses of 150–230 ms that every request in
    flight waits out (bench/results/server-performance.md, "Sixth pass"). Frozen objects are still freed by reference counting;
    only a cycle among them would now outlive its use, and start-up builds none it drops.

    The first generation is also collected every GEN0_THRESHOLD allocations instead of Python's
    700: with 200 conversations at once that halved the collector's time per turn and cut 10% of
    the server's CPU per turn (bench/results/server-performance.md, "Ninth pass"); objects without cycles are freed
    by reference counting as before, so only cyclic garbage waits a little longer."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(GEN0_THRESHOLD, *gc.get_threshold()[1:])


def check_limits(args: argparse.Namespace) -> None:
    """A UserFacingError naming the first connection or request limit that cannot work."""
    for flag, value in (("--header-timeout", args.header_timeout), ("--body-timeout", args.body_timeout),
                        ("--keep-alive-timeout", args.keep_alive_timeout)):
        if not value > 0:
            raise UserFacingError(f"{flag} must be positive")
    if args.max_connections is not None and args.max_connections < 1:
        raise UserFacingError("--max-connections must be at least 1")
    if args.max_messages is not None and args.max_messages < 1:
        raise UserFacingError("--max-messages must be at least 1")


def serve_app(app: Any, sock: socket.socket, args: argparse.Namespace) -> int:
    """Serve app on a listening socket until SIGINT or SIGTERM, draining first (agent.server.drain)."""
    import uvicorn
    from uvicorn.protocols.http.auto import AutoHTTPProtocol

    from agent.server.connections import ConnectionLimits, guarded_protocol
    from agent.server.drain import DrainingServer

    limits = ConnectionLimits(
        header_timeout_s=args.header_timeout, keep_alive_timeout_s=args.keep_alive_timeout,
        max_connections=args.max_connections,
    )
    state = app.state.rein

    def start_drain() -> None:
        state.closing = True

    server = DrainingServer(
        uvicorn.Config(
            app, log_level=args.log_level, timeout_graceful_shutdown=int(args.request_timeout) + 5,
            http=guarded_protocol(AutoHTTPProtocol, limits),
            # No WebSocket routes; an upgrade would also hand the connection to a protocol that
            # the connection limit does not see.
            ws="none",
            # Typed int, but uvicorn only hands it to call_later, where fractions work.
            timeout_keep_alive=limits.keep_alive_timeout_s,  # type: ignore[arg-type]
        ),
        start_drain=start_drain, busy=lambda: bool(state.tasks), grace_s=args.shutdown_grace,
    )
    # uvicorn re-raises the signal that stopped it once it has shut down gracefully; with these
    # handlers in place that re-raise is a no-op and the command exits 0.
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: None)
    freeze_heap()
    server.run(sockets=[sock])
    if args.listen_fd is None:
        print("rein serve: stopped", flush=True)
    return 0 if server.started else 1


def shared_threads(agents: dict[str, Any]) -> list[str]:
    """The agents whose threads live where only one process sees them (SQLite, memory, a saver object)."""
    from agent.checkpoint import locate

    return [name for name, agent in agents.items() if locate(agent.checkpointer_spec).kind != "postgres"]


def supervise(args: argparse.Namespace, agents: dict[str, Any]) -> int:
    """Serve from args.workers processes: each an ordinary `rein serve` on one inherited listening
    socket (the kernel hands each connection to one of them), restarted when it dies."""
    import asyncio
    import subprocess
    import time

    local = shared_threads(agents)
    if local:
        raise UserFacingError(
            f"--workers {args.workers} needs threads in Postgres, but {', '.join(local)} keep them in "
            "SQLite or memory, which one process owns: pass --db postgres://… (or serve one process "
            "per SQLite database)"
        )

    async def prepare() -> None:
        # Creating the tables once here spares the workers a race on a fresh database.
        for agent in agents.values():
            async with agent:
                pass

    try:
        asyncio.run(prepare())
    except (OSError, ImportError) as exc:
        raise UserFacingError(f"cannot open the threads database {args.db or ''}: {exc}") from None
    except Exception as exc:  # psycopg's errors (bad URL, server down) are no OSError
        raise UserFacingError(f"cannot open the threads database {args.db or ''}: {type(exc).__name__}: {exc}") from None
    sock = bind(args.host, args.port)
    host, port = sock.getsockname()[:2]
    command = [sys.executable, "-m", "agent.cli", *worker_argv(args), "--listen-fd", str(sock.fileno())]
    stopping = False

    def stop(*_: object) -> None:
        nonlocal stopping
        stopping = True

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, stop)

    def spawn() -> subprocess.Popen[bytes]:
        # Its own process group: a Ctrl-C reaches the supervisor alone, which stops each worker once.
        return subprocess.Popen(command, pass_fds=(sock.fileno(),), process_group=0)

    workers = [spawn() for _ in range(args.workers)]
    shown = f"[{host}]" if ":" in host else host
    print(
        f"rein serve: {', '.join(agents)} on http://{shown}:{port}/v1 ({args.workers} workers, "
        f"pids {' '.join(str(w.pid) for w in workers)}; threads: {args.db or 'per spec'})",
        flush=True,
    )
    code = 0
    while not stopping:
        time.sleep(0.2)
        for i, worker in enumerate(workers):
            status = worker.poll()
            if status is None or stopping:
                continue
            if status == 2:  # a configuration error: every restart would fail the same way
                print(f"rein serve: worker {worker.pid} failed to start (exit 2); stopping", file=sys.stderr, flush=True)
                stopping, code = True, 2
                break
            workers[i] = spawn()
            print(f"rein serve: worker {worker.pid} exited ({status}); started {workers[i].pid}", file=sys.stderr, flush=True)
    for worker in workers:
        if worker.poll() is None:
            worker.send_signal(signal.SIGTERM)
    for worker in workers:
        worker.wait()
    sock.close()
    print("rein serve: stopped", flush=True)
    return code


def worker_argv(args: argparse.Namespace) -> list[str]:
    """The `rein serve` command line of one worker of the supervisor run with args (less the socket)."""
    argv = ["serve"]
    for spec in args.agent:
        argv += ["--agent", spec]
    for origin in args.cors_origin:
        argv += ["--cors-origin", origin]
    for flag, value in (("--api-key-file", args.api_key_file), ("--db", args.db)):
        if value is not None:
            argv += [flag, value]
    return argv + [
        "--max-body-bytes", str(args.max_body_bytes), "--request-timeout", repr(args.request_timeout),
        "--shutdown-grace", repr(args.shutdown_grace), "--log-level", args.log_level,
        "--header-timeout", repr(args.header_timeout), "--body-timeout", repr(args.body_timeout),
        "--keep-alive-timeout", repr(args.keep_alive_timeout),
        *(["--max-connections", str(args.max_connections)] if args.max_connections is not None else []),
        *(["--max-messages", str(args.max_messages)] if args.max_messages is not None else []),
        *(["--ui"] if args.ui else []),
    ]

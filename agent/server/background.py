"""Run an ASGI app under uvicorn on a loopback port in a background thread (tests, notebooks,
benchmarks): `with BackgroundServer(app) as server: OpenAI(base_url=server.url + "/v1")`."""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

from agent.extras import needs_extra

with needs_extra("server", "rein's HTTP server"):
    import uvicorn


class BackgroundServer:
    """A uvicorn server on 127.0.0.1 in a daemon thread; `stop()` shuts it down gracefully."""

    def __init__(self, app: Any, *, host: str = "127.0.0.1", port: int = 0, startup_timeout_s: float = 30.0) -> None:
        self.app = app
        self.host = host
        self.port = port
        self.startup_timeout_s = startup_timeout_s
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """Base URL, e.g. http://127.0.0.1:53211."""
        return f"http://{self.host}:{self.port}"

    def start(self) -> BackgroundServer:
        """Bind, start serving, and return once the app's startup has completed."""
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, self.port))
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(self.app, log_level="warning", lifespan="on", timeout_graceful_shutdown=30)
        server = uvicorn.Server(config)
        errors: list[BaseException] = []

        def serve() -> None:
            try:
                server.run(sockets=[sock])
            except BaseException as exc:  # reported to the starting thread below
                errors.append(exc)
            finally:
                sock.close()

        self._server = server
        self._thread = threading.Thread(target=serve, name=f"rein-server:{self.port}", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + self.startup_timeout_s
        while not server.started:
            if errors or not self._thread.is_alive():
                raise RuntimeError(f"the server did not start: {errors[0] if errors else 'startup failed'}")
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the server did not start within {self.startup_timeout_s} s")
            time.sleep(0.01)
        return self

    def stop(self, timeout_s: float = 60.0) -> None:
        """Graceful shutdown: in-flight requests finish, then the app's shutdown runs."""
        if self._server is not None and self._thread is not None:
            self._server.should_exit = True
            self._thread.join(timeout_s)
            if self._thread.is_alive():
                raise RuntimeError(f"the server on port {self.port} did not stop within {timeout_s} s")
        self._server = None
        self._thread = None

    def __enter__(self) -> BackgroundServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

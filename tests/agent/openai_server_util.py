"""Test helpers: a real OpenAI-compatible server (llama-cpp-python's) and a fault-injecting proxy.

The proxy sits between the adapter and the server on 127.0.0.1 and answers the next requests
with scripted failures (429 with Retry-After, 500, a dropped connection, a stall) before
forwarding again, recording every request it saw.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

SERVER_MODULES = ("llama_cpp.server", "sse_starlette", "starlette_context", "pydantic_settings")


def missing_server_modules() -> list[str]:
    """Modules llama-cpp-python's server needs that are not importable here."""
    import importlib.util

    missing = []
    for name in SERVER_MODULES:
        try:
            found = importlib.util.find_spec(name) is not None
        except ModuleNotFoundError:
            found = False
        if not found:
            missing.append(name)
    return missing


def free_port() -> int:
    """An unused TCP port on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LlamaServer:
    """`python -m llama_cpp.server` on 127.0.0.1 serving one GGUF file, started and stopped by tests."""

    def __init__(self, model_path: Path, *, api_key: str, alias: str = "qwen", n_ctx: int = 2048) -> None:
        self.port = free_port()
        self.api_key = api_key
        self.alias = alias
        self.log_path = Path(os.environ.get("TMPDIR", "/tmp")) / f"rein-llama-server-{self.port}.log"
        self._log = self.log_path.open("wb")
        env = {**os.environ, "OMP_WAIT_POLICY": "PASSIVE"}
        self.proc = subprocess.Popen(
            [
                sys.executable, "-m", "llama_cpp.server",
                "--model", str(model_path), "--model_alias", alias,
                "--host", "127.0.0.1", "--port", str(self.port),
                "--n_ctx", str(n_ctx), "--n_threads", "1", "--n_threads_batch", "1",
                "--api_key", api_key,
            ],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=env,
        )

    @property
    def base_url(self) -> str:
        """The server's /v1 URL."""
        return f"http://127.0.0.1:{self.port}/v1"

    def wait_ready(self, timeout: float = 90.0) -> None:
        """Block until the server answers /v1/models, or fail with its log."""
        deadline = time.monotonic() + timeout
        request = urllib.request.Request(
            f"{self.base_url}/models", headers={"Authorization": f"Bearer {self.api_key}"}
        )
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"llama server exited with {self.proc.returncode}:\n{self.log_tail()}")
            with contextlib.suppress(OSError), urllib.request.urlopen(request, timeout=2) as resp:
                if resp.status == 200:
                    return
            time.sleep(0.2)
        raise RuntimeError(f"llama server not ready after {timeout} s:\n{self.log_tail()}")

    def log_tail(self, n: int = 4000) -> str:
        """The end of the server's log."""
        self._log.flush()
        return self.log_path.read_bytes()[-n:].decode("utf-8", "replace")

    def stop(self) -> None:
        """Terminate the server and wait for it."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        self._log.close()
        with contextlib.suppress(OSError):
            self.log_path.unlink()


@dataclass
class Fault:
    """One scripted answer the proxy gives instead of forwarding."""

    status: int = 500
    """HTTP status to answer with (ignored for "drop" and "stall")."""
    headers: dict[str, str] = field(default_factory=dict)
    """Extra response headers, e.g. retry-after."""
    message: str = "injected failure"
    """Error message in the OpenAI-style JSON body."""
    kind: str = "status"
    """"status": answer with status; "drop": close at once; "hang": close after `delay` seconds."""
    delay: float = 0.0
    """For "hang": seconds to keep the client waiting."""
    code: str | None = None
    """Error code in the body (e.g. "insufficient_quota")."""


@dataclass
class Seen:
    """A request the proxy received."""

    method: str
    """HTTP method."""
    path: str
    """Request path."""
    body: bytes
    """Request body."""
    outcome: str
    """"forwarded" or the injected fault's description."""
    at: float
    """time.monotonic() when it arrived."""


class FaultProxy:
    """A minimal HTTP/1.1 reverse proxy with scripted faults, on its own thread and event loop."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.port = free_port()
        self.faults: deque[Fault] = deque()
        self.seen: list[Seen] = []
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._server: asyncio.base_events.Server | None = None
        self._thread = threading.Thread(target=self._run, name="fault-proxy", daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("fault proxy did not start")

    @property
    def base_url(self) -> str:
        """The proxy's /v1 URL."""
        return f"http://127.0.0.1:{self.port}/v1"

    def inject(self, fault: Fault, count: int = 1) -> None:
        """Answer the next `count` requests with this fault."""
        with self._lock:
            self.faults.extend([fault] * count)

    def reset(self) -> None:
        """Forget pending faults and seen requests."""
        with self._lock:
            self.faults.clear()
            self.seen.clear()

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(
            asyncio.start_server(self._handle, "127.0.0.1", self.port)
        )
        self._ready.set()
        self._loop.run_forever()

    def close(self) -> None:
        """Stop the proxy: cancel its connections, close the server, end the thread."""
        asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()

    async def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
        pending = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            method, path, _ = lines[0].split(" ", 2)
            headers = [line.split(":", 1) for line in lines[1:] if ":" in line]
            length = next((int(v) for k, v in headers if k.strip().lower() == "content-length"), 0)
            body = await reader.readexactly(length) if length else b""
            with self._lock:
                fault = self.faults.popleft() if self.faults else None
                outcome = "forwarded" if fault is None else f"{fault.kind}:{fault.status}"
                self.seen.append(Seen(method, path, body, outcome, time.monotonic()))
            if fault is None:
                await self._forward(writer, lines[0], headers, body)
            elif fault.kind == "status":
                await self._answer(writer, fault)
            elif fault.kind == "hang":
                await asyncio.sleep(fault.delay)
        except (asyncio.IncompleteReadError, ConnectionError, ValueError, asyncio.CancelledError):
            pass
        finally:
            with contextlib.suppress(ConnectionError, OSError):
                writer.close()
                await writer.wait_closed()

    @staticmethod
    async def _answer(writer: asyncio.StreamWriter, fault: Fault) -> None:
        error = {"message": fault.message, "type": "injected", "code": fault.code}
        payload = json.dumps({"error": error}).encode()
        extra = "".join(f"{k}: {v}\r\n" for k, v in fault.headers.items())
        writer.write(
            (
                f"HTTP/1.1 {fault.status} Injected\r\ncontent-type: application/json\r\n"
                f"content-length: {len(payload)}\r\n{extra}connection: close\r\n\r\n"
            ).encode("latin-1")
            + payload
        )
        await writer.drain()

    async def _forward(
        self, writer: asyncio.StreamWriter, request_line: str, headers: list[list[str]], body: bytes
    ) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        kept = [(k, v) for k, v in headers if k.strip().lower() not in ("connection", "host")]
        head = request_line + "\r\n" + "".join(f"{k}:{v}\r\n" for k, v in kept)
        head += f"host: 127.0.0.1:{self.upstream_port}\r\nconnection: close\r\n\r\n"
        up_writer.write(head.encode("latin-1") + body)
        await up_writer.drain()
        try:
            while chunk := await up_reader.read(65536):
                writer.write(chunk)
                await writer.drain()
        finally:
            up_writer.close()

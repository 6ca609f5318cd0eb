"""Tools from MCP servers: connect over stdio (a command) or streamable HTTP (a URL), list the
server's tools, and call them as rein Tools.

The `mcp` SDK is imported only when a server is contacted; without the `mcp` extra installed, that
first contact raises an ImportError that names it. See docs/mcp.md for the lifecycle and the
failure behaviour.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import re
import shlex
import weakref
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import PurePath
from typing import Any
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, model_validator

from tools.errors import ToolError
from tools.execute import describe_exception
from tools.mcp_schema import ArgumentChecker, kind_from_annotations, tool_parameters
from tools.tool import Tool, ToolKind

_NAME_CHARS = re.compile(r"[^A-Za-z0-9_-]")
_MAX_NAME = 64  # what OpenAI-style function calling accepts
_LIST_PAGE_CAP = 100  # a server whose listing never ends cannot hang the build
_CLOSE_TIMEOUT_S = 10.0  # the stdio transport's own shutdown waits at most ~6 s


class McpServerConfig(BaseModel):
    """How to reach one MCP server and which of its tools to give the agent.

    Exactly one of `command` (stdio) and `url` (streamable HTTP) is set.
    """

    model_config = ConfigDict(extra="forbid")
    command: str | None = None
    """Executable that runs the server over stdio, e.g. "python"."""
    args: list[str] = Field(default_factory=list)
    """Its command-line arguments, e.g. ["-m", "my_server"]."""
    env: dict[str, str] | None = None
    """Extra environment variables for the server process (over PATH, HOME and a few more)."""
    cwd: str | None = None
    """Working directory of the server process."""
    url: str | None = None
    """Streamable HTTP endpoint, e.g. "http://127.0.0.1:9000/mcp"."""
    headers: dict[str, str] = Field(default_factory=dict)
    """HTTP headers sent with every request (e.g. Authorization); url only."""
    name: str | None = None
    """Label used in error messages; default: the command's or the URL host's name."""
    prefix: str = ""
    """Put before every tool name the model sees (e.g. "fs_"), to keep servers apart."""
    allow: list[str] | None = None
    """Only these tools (names as the server lists them); None takes every tool."""
    needs_approval: bool | None = None
    """Approval for every tool of this server: true or false; None asks only for destructive ones."""
    timeout_s: float | None = 30.0
    """Wall-clock limit of each call, connecting included; None means no limit."""
    connect_timeout_s: float = 30.0
    """Longest wait for the server to start and answer the handshake (and the build-time listing)."""
    cost: float = 0.0
    """Price of one call in dollars, booked in the cost ledger."""

    @model_validator(mode="after")
    def _one_transport(self) -> McpServerConfig:
        if (self.command is None) == (self.url is None):
            raise ValueError("an MCP server needs exactly one of command (stdio) or url (HTTP)")
        if self.headers and self.url is None:
            raise ValueError("headers apply to url servers only")
        return self

    @property
    def label(self) -> str:
        """The server's name in messages."""
        if self.name:
            return self.name
        if self.url is not None:
            return urlsplit(self.url).netloc or self.url
        # Paths shortened to their last part: the label names the server, not the file layout.
        parts = [PurePath(p).name if "/" in p or "\\" in p else p for p in [self.command or "", *self.args]]
        return " ".join(parts)


def parse_target(text: str) -> McpServerConfig:
    """A server from one command-line string: an http(s) URL, or a command with its arguments."""
    if text.startswith(("http://", "https://")):
        return McpServerConfig(url=text)
    words = shlex.split(text)
    if not words:
        raise ValueError("an MCP server command must not be empty")
    return McpServerConfig(command=words[0], args=words[1:])


@dataclass
class McpTool(Tool):
    """A rein Tool served by an MCP server; arguments are checked against the server's schema."""

    checker: ArgumentChecker | None = None
    """Validates arguments against the MCP tool's inputSchema; None passes them through."""

    def parse_arguments(self, raw: str | dict[str, Any] | None) -> dict[str, Any]:
        """Decode as any Tool does, then validate against the JSON schema."""
        data = super().parse_arguments(raw)
        if self.checker is not None:
            self.checker.check(data)
        return data


class McpToolset:
    """The tools of one MCP server, and the connections their calls use.

    `tools()` lists the server's tools once, in a short-lived session of its own (on a private
    event loop, so it works inside and outside a running one): the agent's graph needs every
    schema when it is built. Calls then share one long-lived session per event loop, opened on the
    first call and kept by a task of its own, so no caller's cancellation (a tool timeout) tears
    it down. `aclose()` ends the running loop's session; a loop that ends first (asyncio.run)
    cancels that task, which closes the session too; `close()` runs at interpreter exit.
    """

    def __init__(self, config: McpServerConfig) -> None:
        self.config = config
        self._tools: list[Tool] | None = None
        self._connections: dict[asyncio.AbstractEventLoop, _Connection] = {}
        _LIVE.add(self)

    @property
    def label(self) -> str:
        """The server's name in messages."""
        return self.config.label

    # --- listing ------------------------------------------------------------------------------

    def tools(self) -> list[Tool]:
        """The server's tools as rein Tools (listed on first use, then cached)."""
        if self._tools is None:
            with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="rein-mcp-list") as pool:
                listed = pool.submit(asyncio.run, self._list_once()).result()
            self._tools = self._build_tools(listed)
        return list(self._tools)

    async def atools(self) -> list[Tool]:
        """`tools()` for async code: the listing runs in its own task on this loop."""
        if self._tools is None:
            self._tools = self._build_tools(await self._list_once())
        return list(self._tools)

    async def _list_once(self) -> list[Any]:
        async def listing() -> list[Any]:
            async with self._client() as client:
                found: list[Any] = []
                cursor: str | None = None
                for _ in range(_LIST_PAGE_CAP):
                    page = await client.list_tools(cursor=cursor)
                    found.extend(page.tools)
                    cursor = page.next_cursor
                    if cursor is None:
                        break
                return found

        try:
            # A task of its own: the SDK's task groups must open and close in one task.
            return await asyncio.wait_for(asyncio.ensure_future(listing()), self.config.connect_timeout_s)
        except TimeoutError:
            raise ConnectionError(
                f"MCP server {self.label!r} did not list its tools within {self.config.connect_timeout_s:g}s"
            ) from None
        except ImportError:
            raise
        except Exception as exc:
            raise ConnectionError(f"cannot reach MCP server {self.label!r}: {_reason(exc)}") from None

    def _build_tools(self, listed: list[Any]) -> list[Tool]:
        offered = {t.name: t for t in listed}
        if self.config.allow is not None:
            missing = [name for name in self.config.allow if name not in offered]
            if missing:
                raise ValueError(
                    f"MCP server {self.label!r} has no tool {', '.join(map(repr, missing))}; "
                    f"it offers: {', '.join(sorted(offered)) or 'none'}"
                )
            chosen = [offered[name] for name in self.config.allow]
        else:
            chosen = list(listed)
        out: list[Tool] = []
        seen: set[str] = set()
        for listed_tool in chosen:
            built = self._as_tool(listed_tool)
            if built.name in seen:
                raise ValueError(f"MCP server {self.label!r}: two tools are both named {built.name!r} here")
            seen.add(built.name)
            out.append(built)
        return out

    def _as_tool(self, listed: Any) -> Tool:
        remote = listed.name
        name = _NAME_CHARS.sub("_", f"{self.config.prefix}{remote}")[:_MAX_NAME]
        kind, destructive, idempotent = kind_from_annotations(listed.annotations)
        approval = destructive if self.config.needs_approval is None else self.config.needs_approval
        # Repeating a call after a dropped connection is safe only when running it twice is harmless.
        repeatable = kind is ToolKind.READ or idempotent
        parameters = tool_parameters(listed.input_schema)

        async def call(**arguments: Any) -> Any:
            return await self.call(remote, arguments, repeatable=repeatable)

        title = listed.annotations.title if listed.annotations is not None else None
        return McpTool(
            name=name,
            description=listed.description or listed.title or title or "",
            parameters=parameters,
            fn=call,
            kind=kind,
            needs_approval=approval,
            idempotent=idempotent,
            timeout_s=self.config.timeout_s,
            cost=self.config.cost,
            metadata={"mcp_server": self.label, "mcp_tool": remote, "mcp_toolset": self},
            checker=ArgumentChecker(name, parameters),
        )

    # --- calls --------------------------------------------------------------------------------

    async def call(self, tool: str, arguments: dict[str, Any], *, repeatable: bool = False) -> Any:
        """Call a tool by its server-side name; the result as rein formats tool results.

        A connection found broken is replaced once. A call whose connection breaks while it runs
        is sent again on a new connection only when `repeatable`; otherwise its outcome is unknown
        and the ToolError says so. The server's own errors come back as ToolErrors with its text.
        """
        connection = await self._connection()
        try:
            result = await connection.call(tool, arguments)
        except _ConnectionLost as lost:
            await connection.discard()
            if lost.sent and not repeatable:
                raise ToolError(
                    f"MCP server {self.label!r} went away during {tool!r} ({lost}); outcome unknown: "
                    "check before retrying (the next call reconnects)"
                ) from None
            connection = await self._connection()
            try:
                result = await connection.call(tool, arguments)
            except _ConnectionLost as again:
                await connection.discard()
                raise ToolError(
                    f"MCP server {self.label!r} is not answering (reconnected once): {again}"
                ) from None
        return _result_value(result)

    async def _connection(self) -> _Connection:
        loop = asyncio.get_running_loop()
        for other in [lp for lp in self._connections if lp.is_closed()]:
            del self._connections[other]  # its loop ended; the task that owned it is gone
        connection = self._connections.get(loop)
        if connection is None or connection.dead:
            connection = _Connection(self)
            self._connections[loop] = connection
        await connection.ready()
        return connection

    @contextlib.asynccontextmanager
    async def _client(self) -> AsyncIterator[Any]:
        """An entered mcp Client for this server (the SDK is imported here, and only here)."""
        try:
            from mcp import Client, StdioServerParameters
        except ImportError as exc:
            raise ImportError(
                f"MCP tools need the mcp SDK: pip install 'rein-runtime[mcp]' ({exc})"
            ) from None
        cfg = self.config
        if cfg.command is not None:
            params = StdioServerParameters(command=cfg.command, args=cfg.args, env=cfg.env, cwd=cfg.cwd)
            async with Client(params) as client:
                yield client
        else:
            async with Client(_http_transport(cfg.url or "", cfg.headers)) as client:
                yield client

    # --- closing ------------------------------------------------------------------------------

    async def aclose(self) -> None:
        """Close this event loop's session (and with it a stdio server process)."""
        connection = self._connections.pop(asyncio.get_running_loop(), None)
        if connection is not None:
            await connection.discard()

    def close(self) -> None:
        """Close the sessions of loops still running on other threads; run at interpreter exit."""
        try:
            current: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            current = None
        for loop, connection in list(self._connections.items()):
            if loop is current:
                continue  # waiting here on this loop's own work would block it: use aclose()
            del self._connections[loop]
            if loop.is_running() and not loop.is_closed():
                future = asyncio.run_coroutine_threadsafe(connection.discard(), loop)
                with contextlib.suppress(Exception):
                    future.result(_CLOSE_TIMEOUT_S)


class _ConnectionLost(Exception):
    """The transport to the server broke; the session cannot be used again."""

    def __init__(self, message: str, *, sent: bool = True) -> None:
        super().__init__(message)
        self.sent = sent
        """Whether the request may have reached the server (False: it was never sent)."""


class _Connection:
    """One long-lived session on one event loop, owned by a task of its own."""

    def __init__(self, toolset: McpToolset) -> None:
        self.toolset = toolset
        self.client: Any = None
        self.error: BaseException | None = None
        self._opened = asyncio.Event()
        self._closing = asyncio.Event()
        self._task = asyncio.ensure_future(self._serve())

    @property
    def dead(self) -> bool:
        """The session ended, failed to open, or was given up."""
        return self._task.done() or self._closing.is_set()

    async def _serve(self) -> None:
        try:
            async with self.toolset._client() as client:
                self.client = client
                self._opened.set()
                await self._closing.wait()
        except BaseException as exc:  # kept for ready() to report; the task itself ends quietly
            self.error = exc
            if isinstance(exc, asyncio.CancelledError):
                raise
        finally:
            self.client = None
            self._opened.set()

    async def ready(self) -> None:
        """Wait until the session is open; ToolError naming the server when it cannot be."""
        timeout = self.toolset.config.connect_timeout_s
        try:
            # shield: a caller's timeout must not cancel an opening that other calls wait on.
            await asyncio.wait_for(asyncio.shield(self._opened.wait()), timeout)
        except TimeoutError:
            await self.discard()
            raise ToolError(
                f"MCP server {self.toolset.label!r} did not answer the handshake within {timeout:g}s"
            ) from None
        if self.client is None:
            await self.discard()
            if isinstance(self.error, ImportError):
                raise self.error
            reason = _reason(self.error) if self.error is not None else "the session closed"
            raise ToolError(f"cannot reach MCP server {self.toolset.label!r}: {reason}")

    async def call(self, tool: str, arguments: dict[str, Any]) -> Any:
        from mcp.shared.exceptions import MCPError
        from mcp_types.jsonrpc import CONNECTION_CLOSED

        client = self.client
        if client is None or _transport_closed(client):
            raise _ConnectionLost("the connection had closed", sent=False)
        try:
            return await client.call_tool(tool, arguments)
        except MCPError as exc:
            if exc.code == CONNECTION_CLOSED:
                raise _ConnectionLost(exc.message if hasattr(exc, "message") else str(exc)) from None
            raise ToolError(f"MCP server {self.toolset.label!r} refused {tool!r}: {_reason(exc)}") from None
        except (OSError, EOFError) as exc:
            raise _ConnectionLost(_reason(exc)) from None
        except Exception as exc:
            if _is_transport_error(exc):
                raise _ConnectionLost(_reason(exc)) from None
            raise
        except asyncio.CancelledError:
            # Our call was cancelled (a timeout) — or the session's task group died under it.
            if self.dead and (task := asyncio.current_task()) is not None and not task.cancelling():
                raise _ConnectionLost("the connection closed") from None
            raise

    async def discard(self) -> None:
        """End the session and wait (bounded) for its task to close the transport."""
        self._closing.set()
        if not self._task.done():
            try:
                await asyncio.wait_for(asyncio.shield(self._task), _CLOSE_TIMEOUT_S)
            except TimeoutError:
                self._task.cancel()
            except BaseException:  # the task's own failure is already recorded in self.error
                if (task := asyncio.current_task()) is not None and task.cancelling():
                    raise


def _http_transport(url: str, headers: dict[str, str]) -> Any:
    """A streamable HTTP transport with our headers, whose HTTP client closes with it."""
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    @contextlib.asynccontextmanager
    async def transport() -> AsyncIterator[Any]:
        async with (
            create_mcp_http_client(headers=headers or None) as http,
            streamable_http_client(url, http_client=http) as streams,
        ):
            yield streams

    return transport()


def _transport_closed(client: Any) -> bool:
    """Whether the session already saw its transport end (the server exited between calls).

    Reads the SDK's dispatcher state, which has no public accessor; when that changes this says
    False, and a dead connection is then found by the call itself (outcome-unknown for writes).
    """
    dispatcher = getattr(getattr(client, "_session", None), "_dispatcher", None)
    return getattr(dispatcher, "_closed", False) is True


def _is_transport_error(exc: BaseException) -> bool:
    """Whether exc (or every part of an exception group) is the transport breaking."""
    if isinstance(exc, BaseExceptionGroup):
        return all(_is_transport_error(part) for part in exc.exceptions)
    import anyio

    if isinstance(exc, anyio.ClosedResourceError | anyio.BrokenResourceError | anyio.EndOfStream):
        return True
    module = type(exc).__module__
    return module.startswith(("httpx", "httpcore")) or isinstance(exc, OSError | EOFError)


def _reason(exc: BaseException) -> str:
    """An exception in one short line; an exception group by its first leaf."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return describe_exception(exc)


def _result_value(result: Any) -> Any:
    """A CallToolResult as a rein tool result: its text; structured content when it has no text.

    A result marked isError raises ToolError, so the model reads the server's message in full.
    """
    texts = [_block_text(block) for block in result.content]
    text = "\n".join(t for t in texts if t)
    if result.is_error:
        raise ToolError(text or "the MCP tool reported an error without a message")
    if not text and result.structured_content is not None:
        return result.structured_content
    return text


def _block_text(block: Any) -> str:
    kind = getattr(block, "type", None)
    if kind == "text":
        return str(block.text)
    if kind in ("image", "audio"):
        return f"[{kind} {block.mime_type}, {len(block.data)} base64 characters]"
    if kind == "resource_link":
        return f"[resource {block.uri}]"
    if kind == "resource":
        inner = block.resource
        text = getattr(inner, "text", None)
        return str(text) if text is not None else f"[resource {inner.uri} ({inner.mime_type or 'binary'})]"
    return f"[{kind or type(block).__name__} content]"


_LIVE: weakref.WeakSet[McpToolset] = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    # Sessions on loops that still run (the sync API's private loop) end here; stdio servers of
    # loops already stopped exit on their own when this process closes their stdin.
    for toolset in list(_LIVE):
        toolset.close()


def mcp_tools(config: McpServerConfig | dict[str, Any] | str) -> list[Tool]:
    """The tools of one MCP server, listed now: a config, its dict form, or a command/URL string."""
    if isinstance(config, str):
        config = parse_target(config)
    elif isinstance(config, dict):
        config = McpServerConfig.model_validate(config)
    return McpToolset(config).tools()


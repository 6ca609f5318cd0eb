"""Agents as an MCP server: one tool per agent (a message in, its answer out, on a thread the
caller names or is given) and, on request, the agents' own tools. `rein mcp serve` runs it over
stdio or streamable HTTP (docs/mcp.md).

Over HTTP with API keys (those of `rein serve`) every call acts for the key's tenant: its threads
and its journaled direct tool calls are stored under the tenant (`thread_key`, `calls_thread`),
so one tenant never reaches another's.

The `mcp` SDK is imported only when the server is built, so `rein --help` works without it.
"""

from __future__ import annotations

import logging
import re
import socket
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agent.cli.mcp_calls import CallRunning, DirectCalls, call_id_from
from agent.cli.mcp_http import RequireKey, tenant_of, transport_security
from agent.errors import ThreadBusy, UserFacingError
from tools import Tool, ToolKind, ToolRetryBudgetExceeded, describe_exception

if TYPE_CHECKING:
    from mcp import types
    from mcp.server.lowlevel import Server

    from agent.runtime import Agent, RunResult
    from agent.server.auth import ApiKeys

log = logging.getLogger("rein.mcp")

THREAD_NAMESPACE = "mcp"
"""Threads of MCP callers are stored as mcp/AGENT/THREAD (@TENANT/mcp/AGENT/THREAD with API keys),
apart from `rein serve`'s AGENT/THREAD."""
MAX_THREAD_ID = 200
"""Longest thread id a caller may send."""
MAX_DECLINED_PAUSES = 8
"""Approval pauses one call declines before it gives up (each decline is one more model step)."""
FAILED_TURNS = ("model_error", "tool_error")
"""Terminations that come back as MCP tool errors; the others are answers, named in the result."""
_NAME_CHARS = re.compile(r"[^A-Za-z0-9_.-]")  # what MCP allows in a tool name
_MAX_NAME = 128

ASK_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "message": {"type": "string", "description": "What to ask or tell the agent."},
        "thread_id": {
            "type": "string",
            "description": "Continue this conversation (the thread_id of an earlier answer); "
            "omit it to start a new one.",
        },
    },
    "required": ["message"],
    "additionalProperties": False,
}
"""inputSchema of an agent's tool."""

ANSWER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "answer": {"type": "string", "description": "The agent's final answer."},
        "thread_id": {"type": "string", "description": "Pass it back to continue this conversation."},
        "termination": {"type": "string", "description": "Why the turn ended (agent_stop, max_steps, …)."},
        "usage": {
            "type": "object",
            "properties": {
                "input_tokens": {"type": "integer"},
                "output_tokens": {"type": "integer"},
                "requests": {"type": "integer"},
            },
        },
        "cost": {"type": "number", "description": "Dollars this turn spent."},
        "error": {"type": ["string", "null"], "description": "What went wrong, when something did."},
    },
    "required": ["answer", "thread_id", "termination", "usage"],
}
"""outputSchema of an agent's tool: its structured content."""


@dataclass(frozen=True)
class ExposedTool:
    """One of an agent's own tools, served as an MCP tool of its own."""

    name: str
    """Its MCP name: AGENT.TOOL."""
    agent: str
    """Name of the agent it belongs to."""
    tool: Tool
    """The rein tool that runs."""


@dataclass
class AgentMcpServer:
    """Agents, and optionally their own tools, as the tools of one MCP server.

    Each agent is a tool named after it. With `expose_tools`, each of its tools is one more,
    named AGENT.TOOL, called directly (outside any thread) and validated as rein validates a
    model's calls, and journaled (agent/cli/mcp_calls.py). Tools that need approval are
    withheld: no human answers an MCP call's pause.
    """

    agents: dict[str, Agent]
    """Served agents by name."""
    expose_tools: bool = False
    """Also serve the agents' own tools (those that need no approval)."""
    api_keys: ApiKeys | None = None
    """HTTP: the accepted bearer keys; each call acts for its key's tenant. None: no keys."""
    exposed: dict[str, ExposedTool] = field(init=False, default_factory=dict)
    """The agents' tools served, by MCP name."""
    withheld: list[str] = field(init=False, default_factory=list)
    """AGENT.TOOL names not served because they need approval."""
    _agent_tools: dict[str, Agent] = field(init=False, default_factory=dict)
    _calls: DirectCalls = field(init=False, default_factory=DirectCalls)

    def __post_init__(self) -> None:
        for name, agent in self.agents.items():
            self._claim(_tool_name(name), f"agent {name!r}")
            self._agent_tools[_tool_name(name)] = agent
        if not self.expose_tools:
            return
        for name, agent in self.agents.items():
            for t in agent.tools:
                mcp_name = _tool_name(f"{name}.{t.name}")
                if t.needs_approval:
                    self.withheld.append(mcp_name)
                    continue
                self._claim(mcp_name, f"tool {t.name!r} of agent {name!r}")
                self.exposed[mcp_name] = ExposedTool(mcp_name, name, t)

    def _claim(self, mcp_name: str, what: str) -> None:
        if mcp_name in self._agent_tools or mcp_name in self.exposed:
            raise UserFacingError(f"two MCP tools would be named {mcp_name!r} (the second: {what})")

    # --- the MCP surface ------------------------------------------------------------------------

    def list_tools(self) -> list[types.Tool]:
        """Every served tool, agents first."""
        from mcp import types

        out = [
            types.Tool(
                name=mcp_name,
                title=f"Ask {agent.name}",
                # Never the system prompt: every MCP client that lists the tools would read it.
                description=(
                    f"Send a message to the rein agent {agent.name!r} and get its answer. "
                    "Pass the thread_id of an earlier answer to continue that conversation."
                ),
                input_schema=ASK_SCHEMA,
                output_schema=ANSWER_SCHEMA,
            )
            for mcp_name, agent in self._agent_tools.items()
        ]
        for exposed in self.exposed.values():
            schema = dict(exposed.tool.parameters) or {"type": "object", "properties": {}}
            schema.setdefault("type", "object")
            out.append(
                types.Tool(
                    name=exposed.name,
                    description=exposed.tool.description,
                    input_schema=schema,
                    annotations=_annotations(exposed.tool),
                )
            )
        return out

    async def call_tool(
        self, name: str, arguments: dict[str, Any] | None, tenant: str | None = None, meta: Any = None,
    ) -> types.CallToolResult:
        """Answer one tools/call for a tenant (None: no keys): an agent's turn or one of its tools;
        failures as isError results. `meta` is the request's `_meta` (a call id for exactly-once)."""
        agent = self._agent_tools.get(name)
        if agent is not None:
            return await self._ask(agent, arguments or {}, tenant)
        exposed = self.exposed.get(name)
        if exposed is not None:
            return await self._run_tool(exposed, arguments or {}, tenant, meta)
        known = ", ".join([*self._agent_tools, *self.exposed])
        return _error(f"unknown tool {name!r}; tools: {known}")

    async def _ask(self, agent: Agent, arguments: dict[str, Any], tenant: str | None) -> types.CallToolResult:
        message, thread, problem = _ask_arguments(agent.name, arguments)
        if problem is not None:
            return _error(problem)
        thread = thread or uuid.uuid4().hex[:16]
        stored = thread_key(agent.name, thread, tenant)
        try:
            result = await agent.ainvoke(message, stored)
            for _ in range(MAX_DECLINED_PAUSES):
                if result.termination != "interrupted":
                    break
                # Nobody can approve from here: each paused call is declined, and the model is told why.
                reason = "no one can approve tool calls for a request made over MCP"
                decisions = {c["id"]: {"approved": False, "reason": reason} for c in result.pending_approval}
                result = _merge(result, await agent.aresume(stored, decisions))
        except ThreadBusy as exc:
            return _error(f"thread {thread!r} is busy: {exc.detail}; try again when its turn has ended")
        except UserFacingError as exc:
            return _error(f"{agent.name}: {exc}")
        except Exception as exc:
            log.exception("agent %r failed on thread %r", agent.name, stored)
            return _error(f"{agent.name} failed: {describe_exception(exc)}")
        return _answer(result, thread)

    async def _run_tool(
        self, exposed: ExposedTool, arguments: dict[str, Any], tenant: str | None, meta: Any,
    ) -> types.CallToolResult:
        from mcp import types

        call_id, problem = call_id_from(meta)
        if problem is not None:
            return _error(problem)
        agent = self.agents[exposed.agent]
        try:
            result = await self._calls.run(agent, exposed.tool, exposed.name, arguments, tenant, call_id)
        except CallRunning:
            return _error(f"call {call_id!r} is running; try again when it has ended")
        except ToolRetryBudgetExceeded as exc:  # a tool that allows no argument errors at all
            return _error(str(exc))
        except Exception as exc:  # a tool declared on_error="raise"
            log.exception("tool %r failed", exposed.name)
            return _error(f"Error: {describe_exception(exc)}")
        return types.CallToolResult(content=[types.TextContent(text=result.content)], is_error=result.is_error)

    # --- running --------------------------------------------------------------------------------

    def lowlevel(self) -> Server:
        """The SDK's server, answering tools/list and tools/call from this object."""
        try:
            from mcp import types
            from mcp.server.lowlevel import Server
        except ImportError as exc:
            raise UserFacingError(f"rein mcp serve needs the mcp SDK: pip install 'rein-runtime[mcp]' ({exc})") from None

        async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
            return types.ListToolsResult(tools=self.list_tools())

        async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
            # Over HTTP ctx.request is the HTTP request, whose key RequireKey has checked already.
            tenant = tenant_of(ctx.request, self.api_keys)
            return await self.call_tool(params.name, params.arguments, tenant, params.meta)

        return Server(
            "rein", version=_version(), instructions=_instructions(self.agents),
            on_list_tools=list_tools, on_call_tool=call_tool,
        )

    async def serve_stdio(self) -> None:
        """Serve one client over this process's stdin and stdout until it closes them."""
        from mcp.server.stdio import stdio_server

        server = self.lowlevel()
        try:
            async with stdio_server() as (read, write):
                await server.run(read, write, server.create_initialization_options())
        finally:
            await self.aclose()

    async def serve_http(
        self, sock: socket.socket, host: str, log_level: str = "warning", allowed_hosts: list[str] | None = None,
    ) -> bool:
        """Serve streamable HTTP at /mcp on a bound socket until stopped; whether it started.

        Requests must name `host`, loopback or one of `allowed_hosts` in their Host header (and
        Origin, when sent), and carry one of `api_keys` when there are any.
        """
        import uvicorn

        security = transport_security(host, allowed_hosts or [])
        app: Any = self.lowlevel().streamable_http_app(host=host, transport_security=security)
        if self.api_keys is not None and self.api_keys.enabled:
            app = RequireKey(app, self.api_keys)
        server = uvicorn.Server(uvicorn.Config(app, log_level=log_level))
        try:
            await server.serve(sockets=[sock])
        finally:
            await self.aclose()
        return bool(server.started)

    async def aclose(self) -> None:
        """Close every agent's checkpointer and tool sessions, and the journals of direct calls, on
        this event loop."""
        try:
            await self._calls.aclose()
        except Exception:
            log.exception("closing the journals of direct tool calls failed")
        for agent in self.agents.values():
            try:
                await agent.aclose()
            except Exception:
                log.exception("closing agent %r failed", agent.name)


def thread_key(agent: str, thread_id: str, tenant: str | None = None) -> str:
    """The checkpointer's thread id of an MCP caller's thread of one agent: under the caller's
    tenant on a server with keys, as `rein serve` stores threads (agent/server/threads.py)."""
    base = f"{THREAD_NAMESPACE}/{agent}/{thread_id}"
    return base if tenant is None else f"@{tenant}/{base}"


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("rein-runtime")
    except PackageNotFoundError:
        return ""


def _tool_name(name: str) -> str:
    return _NAME_CHARS.sub("_", name)[:_MAX_NAME] or "_"


def _instructions(agents: dict[str, Agent]) -> str:
    names = ", ".join(agents)
    return (
        f"rein agents: {names}. Each tool of an agent's name takes a message and answers it; "
        "pass the thread_id from an answer to continue that conversation."
    )


def _ask_arguments(agent: str, arguments: dict[str, Any]) -> tuple[str, str | None, str | None]:
    """(message, thread id or None, problem or None) from an agent tool's arguments."""
    unknown = sorted(set(arguments) - {"message", "thread_id"})
    if unknown:
        return "", None, f"arguments for {agent!r}: unknown {', '.join(map(repr, unknown))}; it takes message and thread_id"
    message = arguments.get("message")
    if not isinstance(message, str) or not message.strip():
        return "", None, f"arguments for {agent!r}: message is required, a non-empty string"
    thread = arguments.get("thread_id")
    if thread is not None and (not isinstance(thread, str) or not thread or len(thread) > MAX_THREAD_ID):
        return "", None, f"arguments for {agent!r}: thread_id must be a non-empty string of at most {MAX_THREAD_ID} characters"
    return message, thread, None


def _merge(first: RunResult, resumed: RunResult) -> RunResult:
    """A turn and its resume as one result: messages and spending of both, the resume's ending."""
    first.ledger.entries.extend(resumed.ledger.entries)
    resumed.ledger = first.ledger
    resumed.messages = [*first.messages, *resumed.messages]
    return resumed


def _answer(result: RunResult, thread: str) -> types.CallToolResult:
    from mcp import types

    usage = result.usage
    structured = {
        "answer": result.output,
        "thread_id": thread,
        "termination": result.termination,
        "usage": {"input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens, "requests": usage.requests},
        "cost": result.cost,
        "error": result.error,
    }
    failed = result.termination in FAILED_TURNS
    text = f"the turn ended in {result.termination}: {result.error or 'no detail'}" if failed else result.output
    # The thread id in text too: clients that pass only text to their model can still continue.
    content: list[types.ContentBlock] = [types.TextContent(text=text), types.TextContent(text=f"thread_id: {thread}")]
    return types.CallToolResult(content=content, structured_content=structured, is_error=failed)


def _annotations(t: Tool) -> types.ToolAnnotations:
    from mcp import types

    if t.kind in (ToolKind.READ, ToolKind.THINK):
        return types.ToolAnnotations(read_only_hint=True)
    if t.kind is ToolKind.WRITE:
        return types.ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=t.idempotent)
    return types.ToolAnnotations()  # GENERIC: nothing promised, so MCP's defaults (may write) hold


def _error(text: str) -> types.CallToolResult:
    from mcp import types

    return types.CallToolResult(content=[types.TextContent(text=text)], is_error=True)

"""`rein chat`: a terminal chat with an agent, streaming tokens, with approvals and persistent threads."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import uuid
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from agent.run_result import RunResult

HELP = "commands: /new (new thread), /history, /thread, /exit"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of `rein chat`."""
    add_agent_arguments(parser)
    parser.add_argument("--thread", help="thread id to continue (default: a new thread)")
    parser.add_argument("--message", "-m", action="append", help="send this message and exit (repeatable)")


def add_agent_arguments(parser: argparse.ArgumentParser) -> None:
    """Agent options shared by commands that build one agent."""
    parser.add_argument("--spec", help="agent spec file (YAML or JSON); other options override it")
    parser.add_argument("--model", help="model name: local:qwen2.5-coder-1.5b (default), local:qwen2.5-coder-0.5b (faster), openai:NAME, echo")
    parser.add_argument("--base-url", help="OpenAI-compatible endpoint for openai:NAME models")
    parser.add_argument("--api-key", help="API key for the endpoint (default: $OPENAI_API_KEY)")
    parser.add_argument("--tools", nargs="*", help="toolkits to give the agent (default: builtin)")
    parser.add_argument(
        "--mcp", action="append", metavar="CMD_OR_URL",
        help='tools of an MCP server: a command ("python -m my_server") or an http(s) URL (repeatable)',
    )
    parser.add_argument("--system", help="system prompt")
    parser.add_argument("--intervention", action="append", help="intervention by name (rein, npi, self-refine)")
    parser.add_argument("--mode", help="instant, reasoning, agentic (default) or a router: self, offline, cost")
    parser.add_argument("--db", help="threads database: a .sqlite path, memory, or postgres://…")


def build_agent_from_args(args: argparse.Namespace, default_tools: list[str] | None = None) -> Any:
    """An Agent from a spec and/or command-line options."""
    from agent.runtime import build_agent
    from agent.spec import AgentSpec, load_spec

    spec = load_spec(args.spec)[0] if args.spec else AgentSpec(tools=[*(["builtin"] if default_tools is None else default_tools)])
    updates: dict[str, Any] = {}
    if args.model:
        updates["model"] = args.model
    options = dict(spec.model_options)
    if args.base_url:
        options["base_url"] = args.base_url
    if args.api_key:
        options["api_key"] = args.api_key
    updates["model_options"] = options
    if args.tools is not None:
        updates["tools"] = args.tools
    if getattr(args, "mcp", None):
        from agent.spec import McpToolsSpec
        from tools.mcp_client import parse_target

        # Built here, not as dicts: model_copy(update=…) does not validate what it is given.
        servers = [McpToolsSpec(mcp=parse_target(target)) for target in args.mcp]
        updates["tools"] = [*updates.get("tools", spec.tools), *servers]
    if args.system is not None:
        updates["system_prompt"] = args.system
    if args.intervention:
        updates["interventions"] = args.intervention
    if args.mode:
        updates["mode"] = args.mode
    if args.db:
        updates["checkpointer"] = args.db if args.db in ("memory", "sqlite") or "://" in args.db else f"sqlite:{args.db}"
    return build_agent(spec.model_copy(update=updates))


def run(args: argparse.Namespace) -> int:
    """Run the chat loop."""
    default_tools: list[Any] | None = None
    if args.base_url and not args.spec and args.tools is None and is_rein_server(args.base_url, args.api_key):
        # A rein server's agents run their own tools and refuse client-side ones (400).
        print(f"rein chat: {args.base_url} is a rein server: its agent runs its own tools, so none are sent",
              file=sys.stderr)
        default_tools = []
    agent = build_agent_from_args(args, default_tools)
    return asyncio.run(chat(agent, args.thread, args.message, sys.stdin, sys.stdout))


def is_rein_server(base_url: str, api_key: str | None = None) -> bool:
    """Whether an OpenAI-compatible endpoint is `rein serve` (its /models entries are owned by
    "rein"); False when it cannot tell (no answer, another server)."""
    import httpx

    key = api_key or os.environ.get("OPENAI_API_KEY")
    try:
        r = httpx.get(base_url.rstrip("/") + "/models", headers={"Authorization": f"Bearer {key}"} if key else {},
                      timeout=5.0)
        data = r.json().get("data") if r.status_code == 200 else None
    except (httpx.HTTPError, ValueError, AttributeError):
        return False
    return isinstance(data, list) and bool(data) and all(isinstance(m, dict) and m.get("owned_by") == "rein" for m in data)


async def chat(agent: Any, thread: str | None, messages: list[str] | None, stdin: TextIO, out: TextIO) -> int:
    """Read user lines, stream the agent's answers; approvals are asked inline.

    Returns 1 when a turn ended in model_error (a non-interactive chat stops there), else 0.
    """
    thread = thread or uuid.uuid4().hex[:12]
    interactive = messages is None and stdin.isatty()
    if interactive:
        out.write(f"rein chat · model {agent.model.name} · thread {thread}\n{HELP}\n")
    queue = list(messages or [])
    failed = False
    try:
        while True:
            if messages is not None:
                if not queue:
                    break
                line = queue.pop(0)
            else:
                if interactive:
                    out.write("\nyou> ")
                    out.flush()
                line = await asyncio.to_thread(stdin.readline)
                if not line:
                    break
                line = line.strip()
            if not line:
                continue
            if line in ("/exit", "/quit"):
                break
            if line == "/new":
                thread = uuid.uuid4().hex[:12]
                out.write(f"new thread {thread}\n")
                continue
            if line == "/thread":
                out.write(f"{thread}\n")
                continue
            if line == "/history":
                for m in await agent.ahistory(thread):
                    out.write(f"[{m.role}] {m.text or (m.tool_calls and m.tool_calls[0].name) or ''}\n")
                continue
            result = await _turn(agent, line, thread, stdin, out, interactive)
            if result.termination == "model_error":
                failed = True
                if not interactive:
                    # The model is unreachable or refusing: later messages would fail the same way.
                    break
    finally:
        await agent.aclose()
    return 1 if failed else 0


async def _turn(agent: Any, text: str | None, thread: str, stdin: TextIO, out: TextIO, interactive: bool) -> RunResult:
    """Run one user turn, printing its answer exactly once; returns the turn's RunResult."""
    from agent.events import (
        ApprovalRequested,
        FinalAnswer,
        InterventionApplied,
        TokenDelta,
        ToolCallEvent,
        ToolResultEvent,
    )
    from agent.ledger import CostLedger
    from agent.run_result import RunResult

    out.write("agent> ")
    out.flush()
    resume: Any = None
    result = RunResult(thread_id=thread, output="", termination="agent_stop", messages=[], ledger=CostLedger())
    # Text streamed by the model step in progress, and by the steps before it. Adapters that
    # cannot stream (or hold text back to parse tool calls from it) send no tokens at all; their
    # answer then exists only in FinalAnswer, which is printed unless its text was already streamed.
    step_text = ""
    shown: set[str] = set()
    while True:
        pending: ApprovalRequested | None = None
        stream = agent.astream(text, thread, resume=resume, collect=result)
        async for event in stream:
            if isinstance(event, TokenDelta):
                step_text += event.text
                out.write(event.text)
                out.flush()
            elif isinstance(event, ToolCallEvent):
                shown.add(step_text.strip())
                step_text = ""
                out.write(f"\n  → {event.name}({event.arguments})")
            elif isinstance(event, ToolResultEvent):
                status = "error" if event.is_error else "ok"
                out.write(f"\n  ← {event.name} [{status}] {event.content[:200]}\n")
            elif isinstance(event, InterventionApplied) and event.activated:
                out.write(f"\n  [{event.name}] {event.record.get('error_type', 'planted reasoning')}\n")
            elif isinstance(event, ApprovalRequested):
                pending = event
            elif isinstance(event, FinalAnswer):
                answer = event.text.strip()
                if answer and not step_text.strip() and answer not in shown:
                    out.write(event.text)
                if event.termination != "agent_stop":
                    out.write(f"\n  (turn ended: {event.termination}")
                    out.write(f": {result.error})" if result.error else ")")
        if pending is None:
            out.write("\n")
            return result
        decisions = {}
        for c in pending.calls:
            out.write(f"\n  approve {c['name']}({c['arguments']})? [y/N] ")
            out.flush()
            answer = (await asyncio.to_thread(stdin.readline)).strip().lower() if interactive else "n"
            decisions[c["id"]] = answer in ("y", "yes")
        text, resume = None, decisions

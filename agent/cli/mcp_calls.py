"""Direct calls of agents' exposed tools over MCP, journaled as a thread's tool calls are.

A call made outside any thread still goes through the agent's tool journal (agent/journal.py), in
the database of its checkpoints: a `started` row before a WRITE tool runs and a `finished` row with
the answer, under the journal thread `calls_thread(...)`, which names the caller's tenant. A caller
that sends a call id (`CALL_ID_META` in the request's `_meta`) gets exactly-once: the same call
again is answered from its `finished` row, and a WRITE call cut off by a crash is answered as
interrupted (outcome unknown) rather than run twice, as `StepJournal.replay` does inside a thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agent.journal import StepJournal, ToolJournal
from tools import CallRequest, Tool, ToolResult, execute_calls

if TYPE_CHECKING:
    from agent.runtime import Agent

CALL_ID_META = "rein/call_id"
"""`_meta` key of a tools/call that names the call, for exactly-once (an idempotency key)."""
MAX_CALL_ID = 200
"""Longest call id a caller may send."""
CALLS_NAMESPACE = "mcp"
"""Journal threads of direct calls: mcp/AGENT.TOOL, or @TENANT/mcp/AGENT.TOOL on a server with keys."""


def calls_thread(mcp_name: str, tenant: str | None) -> str:
    """The journal thread of one exposed tool's direct calls by one tenant.

    An MCP tool name holds no `/`, so it never equals a conversation thread (mcp/AGENT/THREAD).
    """
    base = f"{CALLS_NAMESPACE}/{mcp_name}"
    return base if tenant is None else f"@{tenant}/{base}"


def call_id_from(meta: Any) -> tuple[str | None, str | None]:
    """(call id or None, problem or None) from a request's `_meta`."""
    value = meta.get(CALL_ID_META) if isinstance(meta, Mapping) else None  # the SDK's _meta is a dict
    if value is None:
        return None, None
    if not isinstance(value, str) or not value or len(value) > MAX_CALL_ID:
        return None, f"_meta {CALL_ID_META!r} must be a non-empty string of at most {MAX_CALL_ID} characters"
    return value, None


class CallRunning(Exception):
    """A call with the same id, tool and arguments is running now."""


@dataclass
class DirectCalls:
    """Runs exposed tools outside any thread, each call journaled in its agent's tool journal."""

    _journals: dict[tuple[asyncio.AbstractEventLoop, str], ToolJournal] = field(default_factory=dict)
    _stacks: dict[asyncio.AbstractEventLoop, contextlib.AsyncExitStack] = field(default_factory=dict)
    _running: set[tuple[str, str, str]] = field(default_factory=set)

    async def run(
        self, agent: Agent, tool: Tool, mcp_name: str, arguments: dict[str, Any],
        tenant: str | None, call_id: str | None,
    ) -> ToolResult:
        """The answer of one call, from the journal when this call id already has one.

        Raises ToolRetryBudgetExceeded and a tool's own exception (on_error="raise") as
        `execute_calls` does; CallRunning when the same call is running now.
        """
        call = CallRequest(call_id or f"mcp_{uuid.uuid4().hex[:12]}", tool.name, arguments)
        thread = calls_thread(mcp_name, tenant)
        # The step names the call's tool and arguments, as a thread's step names its calls: an id
        # reused for another call is that other call, not a replay.
        payload = json.dumps([tool.name, arguments], sort_keys=True, default=str)
        step = "mcp:" + hashlib.sha256(payload.encode()).hexdigest()[:16]
        key = (thread, step, call.id)
        if key in self._running:
            raise CallRunning(call.id)
        self._running.add(key)
        try:
            hooks = StepJournal(await self._journal(agent), thread, step, 0, forget=False)
            tools = {tool.name: tool}
            answered, to_run = await hooks.replay([call], tools)
            if not to_run:
                return answered[call.id]
            result = (await execute_calls(to_run, tools, hooks=hooks))[0]
            if call.id not in hooks.outcomes:  # refused for its arguments: it never ran, but is on record
                await hooks.finished(call, result)
            return result
        finally:
            self._running.discard(key)

    async def _journal(self, agent: Agent) -> ToolJournal:
        # A connection of our own beside the agent's, on this event loop (an aiosqlite or psycopg
        # connection belongs to the loop that opened it).
        from agent.journal_sql import open_journal

        loop = asyncio.get_running_loop()
        journal = self._journals.get((loop, agent.name))
        if journal is None:
            stack = self._stacks.setdefault(loop, contextlib.AsyncExitStack())
            journal = await open_journal(agent.checkpointer_spec, stack)
            self._journals[(loop, agent.name)] = journal
        return journal

    async def aclose(self) -> None:
        """Close the journals opened on the running loop."""
        loop = asyncio.get_running_loop()
        stack = self._stacks.pop(loop, None)
        for key in [k for k in self._journals if k[0] is loop]:
            del self._journals[key]
        if stack is not None:
            await stack.aclose()

"""The browser chat page of `rein serve --ui`: the page at `/`, its assets at `/ui/…`, and the two
JSON endpoints it reads besides the chat API: the caller's conversations and one conversation's
messages.

The assets are plain files shipped in the package (agent/server/ui_assets/), read once when the
routes are added: the page loads nothing from elsewhere, and installing rein builds nothing.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

from agent.extras import needs_extra

with needs_extra("server", "rein's HTTP server"):
    from fastapi import FastAPI, Request
    from fastapi.responses import Response

from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

from agent.messages import Message
from agent.planted_reasoning import PLANTED, planted_reasoning
from agent.server.chat_turns import ServerState
from agent.server.errors import not_found
from agent.server.threads import storage_id

ASSETS = Path(__file__).resolve().parent / "ui_assets"
"""The page's files, shipped as package data."""
MEDIA_TYPES = {".html": "text/html; charset=utf-8", ".css": "text/css; charset=utf-8",
               ".js": "text/javascript; charset=utf-8", ".svg": "image/svg+xml"}
MAX_THREADS = 100
"""Most conversations listed per agent: the most recently changed."""
# The page renders model output as text only; the policy makes sure nothing it shows can load or
# run anything from elsewhere even if that ever slipped.
PAGE_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; "
        "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


def add_ui_routes(app: FastAPI, state: ServerState) -> None:
    """Serve the chat page at `/` and its assets and endpoints under `/ui/`."""
    # Read now: a missing file fails at startup, and no request path ever reaches the file system.
    files = {p.name: (p.read_bytes(), MEDIA_TYPES[p.suffix]) for p in ASSETS.iterdir() if p.suffix in MEDIA_TYPES}

    def asset(name: str) -> Response:
        found = files.get(name)
        if found is None:
            raise not_found(f"no UI asset {name!r}")
        body, media_type = found
        return Response(body, media_type=media_type, headers=PAGE_HEADERS)

    @app.get("/", include_in_schema=False)
    async def page() -> Response:
        return asset("index.html")

    @app.get("/ui/api/threads", include_in_schema=False)
    async def threads(request: Request) -> Response:
        tenant = state.keys.check(request.headers.get("authorization"))
        found: list[dict[str, Any]] = []
        for name, agent in state.agents.items():
            prefix = storage_id(name, "", tenant)
            saver = (await agent._graph_for_loop()).checkpointer  # noqa: SLF001 - the agent's own saver
            for sid, latest in await recent_threads(saver, prefix, MAX_THREADS):
                thread_id = sid[len(prefix) :]
                if _owned_elsewhere(name, thread_id, state.agents):
                    continue
                found.append({"agent": name, "thread_id": thread_id, "updated_at": checkpoint_time(latest)})
        found.sort(key=lambda t: t["updated_at"] or 0, reverse=True)
        return _json({"object": "list", "data": found})

    @app.get("/ui/api/threads/{agent}/{thread_id:path}", include_in_schema=False)
    async def thread(agent: str, thread_id: str, request: Request) -> Response:
        tenant = state.keys.check(request.headers.get("authorization"))
        history = await state.agent(agent).ahistory(storage_id(agent, thread_id, tenant))
        pending = await state.pending_approvals(agent, thread_id, tenant=tenant)
        return _json({
            "agent": agent, "thread_id": thread_id,
            "messages": [shown(m) for m in history if m.role != "system"],
            # The calls its turn is paused on: the page offers to approve or reject each.
            "pending": [c.as_dict() for c in pending],
        })

    @app.get("/ui/{name}", include_in_schema=False)
    async def static(name: str) -> Response:
        return asset(name)


def _json(obj: Any) -> Response:
    body = json.dumps(obj, ensure_ascii=False, default=str).encode()
    return Response(body, media_type="application/json", headers={"Cache-Control": "no-store"})


def _owned_elsewhere(agent: str, thread_id: str, agents: Any) -> bool:
    # Agent `a` lists `a/…`, which also holds the threads of an agent named `a/b`: those are its.
    return any(other != agent and other.startswith(agent + "/") and thread_id.startswith(other[len(agent) + 1 :] + "/")
               for other in agents)


def shown(m: Message) -> dict[str, Any]:
    """A message as the page shows it: text, tool calls and results, and whether rein planted it
    (an intervention's reasoning, marked with the intervention's name)."""
    item: dict[str, Any] = {"role": m.role, "text": m.text}
    if m.reasoning:
        item["reasoning"] = m.reasoning
    if m.tool_calls:
        item["tool_calls"] = [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in m.tool_calls]
    if m.role == "tool":
        item.update(call_id=m.tool_call_id, name=m.name, is_error=m.is_error)
    source = m.metadata.get(PLANTED)
    if source:
        item["planted_by"] = str(source)
        plan = planted_reasoning(m)
        if plan is not None:
            item["planted_reasoning"] = plan
    return item


_SQLITE_SQL = (
    # A range on the primary key's first column: its index answers it (LIKE would need escaping
    # and, case-insensitive by default, would not use the index).
    "SELECT thread_id, MAX(checkpoint_id) FROM checkpoints WHERE checkpoint_ns = '' AND thread_id >= ? "
    "AND thread_id < ? GROUP BY thread_id ORDER BY 2 DESC LIMIT ?"
)
_POSTGRES_SQL = (
    "SELECT thread_id, MAX(checkpoint_id) AS latest FROM checkpoints WHERE checkpoint_ns = '' "
    "AND starts_with(thread_id, %s) GROUP BY thread_id ORDER BY latest DESC LIMIT %s"
)


async def recent_threads(saver: Any, prefix: str, limit: int) -> list[tuple[str, str]]:
    """(storage id, latest checkpoint id) of at most `limit` threads whose id starts with prefix,
    the most recently changed first (checkpoint ids grow with time)."""
    if isinstance(saver, AsyncSqliteSaver):
        # Every storage id prefix ends with "/", and "0" is the character after it.
        upper = prefix[:-1] + chr(ord(prefix[-1]) + 1)
        async with saver.lock:
            rows = await saver.conn.execute_fetchall(_SQLITE_SQL, (prefix, upper, limit))
        return [(str(r[0]), str(r[1])) for r in rows]
    # By name, so that the lean install never imports the postgres extra to answer.
    if any(cls.__name__ == "AsyncPostgresSaver" for cls in type(saver).__mro__):
        async with saver._cursor() as cursor:  # noqa: SLF001 - the saver's own connection
            await cursor.execute(_POSTGRES_SQL, (prefix, limit))
            return [(str(r["thread_id"]), str(r["latest"])) for r in await cursor.fetchall()]
    # Any other saver (memory): walk its checkpoints.
    latest: dict[str, str] = {}
    async for item in saver.alist(None):
        conf = item.config["configurable"]
        sid, cid = str(conf["thread_id"]), str(conf["checkpoint_id"])
        if sid.startswith(prefix) and conf.get("checkpoint_ns", "") == "" and cid > latest.get(sid, ""):
            latest[sid] = cid
    return sorted(latest.items(), key=lambda kv: kv[1], reverse=True)[:limit]


_GREGORIAN_TO_UNIX_100NS = 0x01B21DD213814000


def checkpoint_time(checkpoint_id: str) -> float | None:
    """When a checkpoint was written, in Unix seconds, read from its id (LangGraph's ids are time-
    ordered UUIDv6); None for an id of another kind."""
    try:
        u = uuid.UUID(checkpoint_id)
    except ValueError:
        return None
    if u.version != 6:
        return None
    n = u.int >> 64  # time_high (32 bits), time_mid (16), version (4), time_low (12)
    ticks = ((n >> 32) << 28) | (((n >> 16) & 0xFFFF) << 12) | (n & 0x0FFF)
    return round((ticks - _GREGORIAN_TO_UNIX_100NS) / 1e7, 3)


__all__ = ["add_ui_routes", "checkpoint_time", "recent_threads", "shown"]

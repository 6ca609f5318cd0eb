"""The OpenAI Responses API over rein's threads: `POST /v1/responses` and `GET /v1/responses/{id}`.

A response is one turn of a thread, run by `ServerState.start` exactly as a Chat Completions
request is, under the same keys, tenants, limits and retry rules. Which thread:

- `previous_response_id`: the thread of that response, from that response on. The request is
  sent to the planner as the thread's dialogue up to that response plus the new input, so a
  response that is the thread's latest appends to it, one that is not (a branch) continues on a
  fork, and a resent request whose turn already ran is replayed, never run twice;
- `conversation`: a thread named by the client, like the X-Rein-Thread header;
- else the X-Rein-Thread / X-Thread-Id header, the `user` field, or the conversation hash, as in
  Chat Completions.

A turn paused for approval answers with `function_call` items; `function_call_output` items that
end a later request's input are the decisions that resume it (responses_approvals.py).

Response ids and where their records live: responses_ids.py.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from agent.extras import needs_extra

with needs_extra("server", "rein's HTTP server"):
    from fastapi import FastAPI, Request
    from fastapi.responses import Response

from agent.messages import Message
from agent.planted_reasoning import PLANTED
from agent.runtime import Agent
from agent.server.approvals import pending_calls
from agent.server.chat_turns import (
    Plan,
    ServerConfig,
    ServerState,
    TurnRequest,
)
from agent.server.deliveries import client_connected, delivered_stream
from agent.server.errors import bad_request
from agent.server.http_io import THREAD_HEADERS, json_response, wait_turn
from agent.server.responses_approvals import needs_approval, resumed_shape, segment
from agent.server.responses_ids import (
    MESSAGE_PREFIX,
    RECORD_FIELD,
    ResponseRef,
    find_record,
    new_nonce,
    parse_id,
    record,
    split_nonce,
    tagged,
    turn_end,
    unknown,
    with_record,
)
from agent.server.responses_objects import ResponseShape, response_object
from agent.server.responses_schema import (
    Entry,
    ResponsesRequest,
    input_decisions,
    input_entries,
    parse_responses_request,
)
from agent.server.responses_sse import response_status, stream_response
from agent.server.retries import KEY_FIELD, RetrySignal, read_signal
from agent.server.sse import EventStream
from agent.server.thread_header import read_thread_header, thread_header
from agent.server.threads import (
    KeySource,
    Turn,
    check_key,
    derived_key,
    is_open,
    merge_turns,
    storage_id,
    thread_turns,
)

Authorize = Callable[[Request], Awaitable[str | None]]
ReadBody = Callable[[Request, int, float | None], Awaitable[bytes]]
@dataclasses.dataclass
class Thread:
    """Where a response's turn runs and the history the planner compares with it."""

    key: str
    """The thread key."""
    source: KeySource
    """Where the key came from."""
    turns: list[Turn]
    """The thread's dialogue up to the previous response, when one is named."""
    messages: list[Message]
    """The messages that commit those turns (only used when the turn moves to a fork)."""


def add_responses_routes(
    app: FastAPI, state: ServerState, authorize: Authorize, cfg: ServerConfig, read_body: ReadBody
) -> None:
    """Serve `POST /v1/responses` and `GET /v1/responses/{id}` on the app's agents; read_body is
    app.py's (limits and timeouts of Chat Completions), passed in as the other protocols take it."""

    async def create(request: Request) -> Response:
        tenant = await authorize(request)
        body = await read_body(request, cfg.max_body_bytes, cfg.body_timeout_s)
        req = parse_responses_request(body, max_messages=cfg.max_messages)
        agent = state.agent(req.model)
        decisions = input_decisions(req)
        entries = input_entries(req, decisions=decisions is not None)
        try:
            retry = read_signal(request.headers)
        except ValueError as exc:
            raise bad_request(str(exc)) from None
        entries = await _resolve_references(state, entries, tenant)
        turns, messages = _conversation(entries)
        nonce = new_nonce()
        shape = ResponseShape(
            ResponseRef(req.model, "", nonce), instructions=req.instructions, metadata=dict(req.metadata or {}),
            previous_response_id=req.previous_response_id, conversation=req.conversation_id, store=req.store,
        )
        if req.store and decisions is None:
            rec = record(
                nonce, shape.created_at, instructions=req.instructions, metadata=req.metadata or None,
                previous_response_id=req.previous_response_id, conversation=shape.conversation,
            )
            last = max(i for i, m in enumerate(messages) if m.role == "user")
            messages[last] = with_record(messages[last], rec)
        system = [e.text for e in entries if e.role == "system"]
        if decisions is not None and req.previous_response_id is not None:
            # Decisions answer the thread's pause, wherever the named response sits in it.
            thread = Thread((await _continued(req.previous_response_id, req.model, agent, tenant)).key, "header", [], [])
        else:
            thread = await _thread(request, req, agent, tenant, system, turns)
        if decisions is not None and thread.source == "derived" and not turns:
            raise bad_request(
                "function_call_output items answer a paused response: name it by previous_response_id "
                "(or its conversation, or the X-Rein-Thread header)", param="input",
            )
        deadline = asyncio.get_running_loop().time() + cfg.request_timeout_s
        turn = TurnRequest(
            req.model, thread.key, thread.source, tenant, thread.turns + turns, thread.messages + messages,
            stream=req.stream, retry=retry, decisions=decisions,
        )
        handle = state.start(turn)
        plan: Plan = await wait_turn(handle, handle.plan, deadline, cfg.request_timeout_s, "the same Idempotency-Key")
        if decisions is not None:
            shape = await resumed_shape(plan, shape, decisions, agent, tenant)
        else:
            shape = await _shape_for(plan, shape, agent, tenant, retry)
        headers = {"X-Rein-Thread": thread_header(plan.thread_id)}
        if req.stream:
            return EventStream(
                delivered_stream(stream_response(handle, shape, deadline, cfg.request_timeout_s), client_connected(request),
                                 handle.done, lambda outcome: state.delivered(turn, outcome), is_last=_terminal),
                headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no", **headers},
            )
        outcome = await wait_turn(handle, handle.done, deadline, cfg.request_timeout_s, "the same Idempotency-Key")
        failed = outcome.failed()
        if failed is not None:
            raise failed
        if not await request.is_disconnected():
            # A reply the client received is not handed out again to a request that is not a retry.
            state.delivered(turn, outcome)
        obj = response_object(
            shape, status=response_status(outcome), text=outcome.reply if outcome.reply or not outcome.pending else None,
            usage=outcome.usage, rein=outcome.metadata(), calls=outcome.pending,
        )
        return json_response(obj, headers=headers)

    async def retrieve(request: Request) -> Response:
        tenant = await authorize(request)
        ref = parse_id(request.path_params["response_id"])
        agent = state.agents.get(ref.agent)
        sid = storage_id(ref.agent, ref.thread_id, tenant)
        history = await agent.ahistory(sid) if agent else []
        index = find_record(history, ref.nonce)
        part = segment(history, index, split_nonce(ref.nonce)[1], needs_approval(agent)) if agent and index is not None else None
        if agent is None or index is None or part is None:
            raise unknown(request.path_params["response_id"])
        calls = part.calls
        if part.last and is_open(history):
            # Its pause may still wait: the checkpoint says on what (and why, for a guardrail's hold).
            calls = await pending_calls(agent, sid) or calls
        answered = bool(part.text) or bool(calls) or not part.last or not is_open(history)
        shape = _shape_of(ref, history[index].metadata[RECORD_FIELD])
        if part.tag is not None:
            shape.previous_response_id = tagged(ref, part.previous).response_id
        text = part.text if part.text or not calls else None
        obj = response_object(
            shape, status="completed" if answered else "in_progress", text=text if answered else None,
            rein={"thread_id": ref.thread_id}, calls=calls,
        )
        return json_response(obj, headers={"X-Rein-Thread": thread_header(ref.thread_id)})

    async def _thread(
        request: Request, req: ResponsesRequest, agent: Agent, tenant: str | None, system: list[str], turns: list[Turn]
    ) -> Thread:
        try:
            if req.previous_response_id is not None:
                return await _continued(req.previous_response_id, req.model, agent, tenant)
            if req.conversation_id is not None:
                return Thread(check_key(req.conversation_id, "conversation"), "header", [], [])
            given = {
                name: read_thread_header(v.strip()) for name in THREAD_HEADERS if (v := request.headers.get(name)) and v.strip()
            }
            if len(set(given.values())) > 1:
                raise ValueError("X-Rein-Thread and X-Thread-Id name different threads")
            if given:
                name, value = next(iter(given.items()))
                return Thread(check_key(value, f"the {name} header"), "header", [], [])
            if req.user and req.user.strip():
                return Thread(check_key(req.user, "the `user` field"), "user", [], [])
        except ValueError as exc:
            raise bad_request(str(exc)) from None
        return Thread(derived_key(system, turns), "derived", [], [])

    app.add_route("/v1/responses", create, methods=["POST"])
    app.add_route("/v1/responses/{response_id:path}", retrieve, methods=["GET"])


async def _continued(previous: str, model: str, agent: Agent, tenant: str | None) -> Thread:
    """The thread of a previous response, with its dialogue up to and including that response."""
    ref = parse_id(previous)
    if ref.agent != model:
        raise bad_request(
            f"previous_response_id names a response of model {ref.agent!r}; continue it with that model",
            param="previous_response_id",
        )
    history = await agent.ahistory(storage_id(ref.agent, ref.thread_id, tenant))
    index = find_record(history, ref.nonce)
    if index is None:
        raise unknown(previous)
    turns, messages = _seed(history[: turn_end(history, index)])
    # Not "header": a header-named thread takes user-only requests as new turns whatever it holds,
    # and this request must be compared with the thread so a branch forks and a retry replays.
    return Thread(ref.thread_id, "derived", turns, messages)


def _seed(history: list[Message]) -> tuple[list[Turn], list[Message]]:
    """A thread's surface turns and fresh messages that would commit them to a fork."""
    turns = thread_turns(history)
    users = iter([m for m in history if m.role == "user" and not m.metadata.get(PLANTED)])
    return turns, [Message.user(next(users).content) if t.role == "user" else Message.assistant(t.text) for t in turns]


def _conversation(entries: list[Entry]) -> tuple[list[Turn], list[Message]]:
    """The input's turns (consecutive assistant texts joined) and the messages that commit them."""
    said = [e for e in entries if e.role == "user" or (e.role == "assistant" and e.text.strip())]
    turns = merge_turns(("user" if e.role == "user" else "assistant", e.text) for e in said)
    users = iter([e for e in said if e.role == "user"])
    return turns, [Message.user(next(users).content) if t.role == "user" else Message.assistant(t.text) for t in turns]


async def _resolve_references(state: ServerState, entries: list[Entry], tenant: str | None) -> list[Entry]:
    """Entries with each `item_reference` replaced by the output message it names (404 when the
    caller's tenant has no such message)."""
    if not any(e.role == "reference" for e in entries):
        return entries
    read: dict[str, list[Message]] = {}
    resolved = []
    for entry in entries:
        if entry.role != "reference":
            resolved.append(entry)
            continue
        ref = parse_id(entry.text, MESSAGE_PREFIX, "item")
        agent = state.agents.get(ref.agent)
        sid = storage_id(ref.agent, ref.thread_id, tenant)
        if sid not in read:
            read[sid] = await agent.ahistory(sid) if agent else []
        index = find_record(read[sid], ref.nonce)
        part = segment(read[sid], index, split_nonce(ref.nonce)[1], needs_approval(agent)) if agent and index is not None else None
        if part is None:
            raise unknown(entry.text, "item")
        resolved.append(Entry("assistant", part.text))
    return resolved


async def _shape_for(plan: Plan, shape: ResponseShape, agent: Agent, tenant: str | None, retry: RetrySignal) -> ResponseShape:
    """The response a planned turn answers as: the new one, or, for a replay or a rerun, the one
    its earlier attempt created (so every attempt of one request gets one id)."""
    ref = dataclasses.replace(shape.ref, thread_id=plan.thread_id)
    if plan.action == "append":
        return dataclasses.replace(shape, ref=ref)
    history = await agent.ahistory(storage_id(ref.agent, plan.thread_id, tenant))
    users = [m for m in history if m.role == "user" and not m.metadata.get(PLANTED)]
    keyed = [m for m in users if retry.key is not None and m.metadata.get(KEY_FIELD) == retry.key]
    found = keyed or users
    earlier = found[-1] if found else None
    rec = earlier.metadata.get(RECORD_FIELD) if earlier is not None else None
    if not isinstance(rec, dict) or not isinstance(rec.get("id"), str):
        return dataclasses.replace(shape, ref=ref, store=False)  # answered to a request that kept no record
    return _shape_of(dataclasses.replace(ref, nonce=rec["id"]), rec)


def _shape_of(ref: ResponseRef, rec: Mapping[str, Any]) -> ResponseShape:
    """A stored response's shape, from the record on its user message."""
    return ResponseShape(
        ref, created_at=int(rec.get("created_at") or 0), instructions=rec.get("instructions"),
        metadata=dict(rec.get("metadata") or {}), previous_response_id=rec.get("previous_response_id"),
        conversation=rec.get("conversation"),
    )


def _terminal(chunk: bytes) -> bool:
    """Whether a stream write is the response's last event."""
    # Several events may go out in one write; an event name never holds a raw newline inside data.
    return b"event: response.completed\n" in chunk or b"event: response.incomplete\n" in chunk


__all__ = ["add_responses_routes"]

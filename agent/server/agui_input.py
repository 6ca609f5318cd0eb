"""AG-UI's RunAgentInput as a chat turn: the request body parsed with the protocol's own models,
its threadId as the thread key and its messages reconciled like a Chat Completions history.

An AG-UI client (`@ag-ui/client`'s HttpAgent) keeps the conversation and sends all of it on every
run, the messages it built from the previous runs' events included. Its user messages and
assistant texts are the turns compared with the thread (agent/server/threads.py), with the
threadId as a named thread key, so a client that resends its history appends only what is new, a
client that sends only its new message appends it, and an edited history moves to a fork. Tool
calls, tool results and reasoning messages are the agent's own and stay out of the comparison;
system and developer messages, `context` and `state` are not given to the agent (it has its own
prompt).

A run that pauses on tools needing approval ends with one interrupt per paused call, its id the
call's id (agui_stream.py). The client's next run answers them in `resume`: each entry `resolved`
with the payload `{"approved": true}` (or a bare `true`), `{"approved": false, "reason": "why"}`
(or `false`), or `cancelled` (declined). That run resumes the paused turn from its checkpoint
(`ServerState` and agent/server/approvals.py apply the rules: every paused call at once, a resent
decision replays its outcome); its messages add nothing to the thread.
"""

from __future__ import annotations

import json
from typing import Any

from agent.extras import needs_extra

with needs_extra("agui", "rein's AG-UI endpoint"):
    from ag_ui.core import AssistantMessage, ResumeEntry, RunAgentInput, UserMessage

from pydantic import ValidationError

from agent.server.approvals import Decision
from agent.server.chat_turns import TurnRequest
from agent.server.errors import bad_request
from agent.server.retries import MAX_IDEMPOTENCY_KEY, RetrySignal
from agent.server.schema import (
    CONTAINERS_PER_MESSAGE,
    ChatMessageIn,
    CommitMessages,
    check_depth,
    check_unicode,
)
from agent.server.threads import Role, check_key, merge_turns


def parse_run_input(body: bytes, *, max_messages: int) -> RunAgentInput:
    """The RunAgentInput of a request body; a 400 ApiError naming the first problems."""
    if not body.strip():
        raise bad_request("the request body is empty: send an AG-UI RunAgentInput")
    if check_depth(body) > CONTAINERS_PER_MESSAGE * max_messages:
        raise bad_request(f"the request body holds more arrays and objects than {max_messages} messages may")
    try:
        data = json.loads(body)
    except (ValueError, RecursionError) as exc:
        raise bad_request(f"the request body is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise bad_request("the request body must be a JSON object (an AG-UI RunAgentInput)")
    check_unicode(body, data)
    messages = data.get("messages")
    if isinstance(messages, list) and len(messages) > max_messages:
        raise bad_request(f"the run has {len(messages)} messages; this server accepts at most {max_messages}", param="messages")
    try:
        return RunAgentInput.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
        shown = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in errors[:5])
        raise bad_request(f"invalid RunAgentInput: {shown}") from None


def run_request(agent: str, run: RunAgentInput, tenant: str | None, retry: RetrySignal) -> TurnRequest:
    """The streamed turn a run asks for on `agent`, keyed by its threadId: a new user message's turn,
    or, for a run with `resume`, the paused turn resumed with those decisions (400 when it has
    neither, or brings client-side tools).

    The run's runId names the request across attempts (like an Idempotency-Key) when the client
    sent no Idempotency-Key header, so a resent run gets its answer instead of a second turn."""
    if run.tools:
        raise bad_request(
            "client-side tools are not supported: the agent's own tools run on the server; send "
            "the run without `tools`",
            param="tools",
        )
    try:
        key = check_key(run.thread_id, "threadId")
    except ValueError as exc:
        raise bad_request(str(exc), param="threadId") from None
    pairs: list[tuple[Role, str]] = []
    users: list[ChatMessageIn] = []
    for m in run.messages:
        if isinstance(m, UserMessage):
            user = ChatMessageIn.model_validate({"role": "user", "content": _user_content(m.content)})
            pairs.append(("user", user.text))
            users.append(user)
        elif isinstance(m, AssistantMessage) and m.content and m.content.strip():
            pairs.append(("assistant", m.content))
    turns = merge_turns(pairs)
    decisions = [_decision(entry) for entry in run.resume] if run.resume else None
    if decisions is None and (not turns or turns[-1].role != "user"):
        raise bad_request("the run's messages must end with a new user message (or the run must `resume` "
                          "the interrupts of a paused one)", param="messages")
    user_iter = iter(users)
    messages = CommitMessages([next(user_iter) if t.role == "user" else t.text for t in turns])
    if retry.key is None and 0 < len(run.run_id) <= MAX_IDEMPOTENCY_KEY and run.run_id.isascii() and run.run_id.isprintable():
        retry = RetrySignal(run.run_id, retry.attempt)
    return TurnRequest(agent, key, "header", tenant, turns, messages, stream=True, retry=retry,
                       decisions=decisions, tool_events=True)


def _decision(entry: ResumeEntry) -> Decision:
    """The decision a resume entry holds on the call its interrupt names; 400 for another payload."""
    if entry.status == "cancelled":
        return Decision(entry.interrupt_id, False, None)
    value = entry.payload
    if isinstance(value, bool):
        return Decision(entry.interrupt_id, value, None)
    if isinstance(value, dict) and isinstance(value.get("approved"), bool) and set(value) <= {"approved", "reason"}:
        reason = value.get("reason")
        if reason is None or isinstance(reason, str):
            return Decision(entry.interrupt_id, value["approved"], reason)
    raise bad_request(
        f"the resume entry for interrupt {entry.interrupt_id!r} must carry the payload true, false, "
        f'{{"approved": true}} or {{"approved": false, "reason": "why"}} (or status "cancelled"); got {value!r:.200}',
        param="resume",
    )


def _user_content(content: Any) -> str | list[dict[str, Any]]:
    """A user message's content in Chat Completions parts: text, and images as image_url parts
    (a data source as a data: URL); audio, video and documents are left out."""
    if isinstance(content, str):
        return content
    parts: list[dict[str, Any]] = []
    for part in content:
        kind = getattr(part, "type", None)
        if kind == "text":
            parts.append({"type": "text", "text": part.text})
        elif kind == "image":
            url = _source_url(part.source)
            if url is not None:
                parts.append({"type": "image_url", "image_url": {"url": url}})
    return parts or ""


def _source_url(source: Any) -> str | None:
    kind = getattr(source, "type", None)
    if kind == "url":
        return str(source.value)
    if kind == "data":
        return f"data:{source.mime_type};base64,{source.value}"
    return None

"""Response ids of the Responses API and the records behind them.

A response id names its agent, its thread and a nonce: `resp_` + base64url of the JSON
`[agent, thread_id, nonce]`. The nonce is stamped on the user message that opened the response's
turn (`RECORD_FIELD` in its metadata), together with what the response object echoes back, so a
response is found again by reading its thread: no table of its own, nothing lost on a restart, and
processes sharing a database all find it. The id holds no tenant. A request reads the thread of
its own tenant (`storage_id`), so another tenant's key naming the id reaches its own namespace,
where no message carries the nonce, and gets 404. The output message of a response is
`msg_` + the same payload, so an `item_reference` to it resolves the same way.

A turn paused for approval is resumed by a request that adds no user message, so its response has
no message of its own to carry a record: its nonce is the paused turn's nonce + `.` + a tag of the
decisions (a hash of the least call id they answer). Looked up, the tag is stripped to find the
turn, and the tool message answering that call marks where the resumed response begins.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from agent.messages import Message
from agent.planted_reasoning import PLANTED
from agent.server.errors import ApiError, not_found

RECORD_FIELD = "rein.response"
"""User-message metadata: the record of the response whose turn this message opened."""
RESPONSE_PREFIX = "resp_"
"""How a response id starts."""
MESSAGE_PREFIX = "msg_"
"""How the id of a response's output message starts."""
TAG_SEPARATOR = "."
"""Between a paused turn's nonce and the tag of the decisions that resumed it (nonces are hex)."""
MAX_ID_LENGTH = 4096
"""Longest id decoded (thread keys are at most 256 characters, forks add 13 a hop)."""


@dataclass(frozen=True)
class ResponseRef:
    """What a response id names."""

    agent: str
    """The served agent that answered."""
    thread_id: str
    """The thread, as the client sees it (no tenant)."""
    nonce: str
    """The response's own part, stamped on the turn's user message."""

    @property
    def response_id(self) -> str:
        """The `resp_…` id."""
        return RESPONSE_PREFIX + self._payload()

    @property
    def message_id(self) -> str:
        """The `msg_…` id of the response's output message."""
        return MESSAGE_PREFIX + self._payload()

    def _payload(self) -> str:
        raw = json.dumps([self.agent, self.thread_id, self.nonce], ensure_ascii=False, separators=(",", ":"))
        return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def new_nonce() -> str:
    """A fresh response nonce."""
    return secrets.token_hex(12)


def call_tag(call_id: str) -> str:
    """The tag of a resumed response whose decisions answer this call (the least id they name)."""
    return hashlib.sha256(call_id.encode()).hexdigest()[:12]


def resumed(ref: ResponseRef, call_ids: Sequence[str]) -> ResponseRef:
    """The response of the turn `ref` opened, resumed by decisions on these calls."""
    return tagged(ref, call_tag(min(call_ids)))


def tagged(ref: ResponseRef, tag: str | None) -> ResponseRef:
    """The response of the turn `ref` names that carries this decisions tag (None: the opening one)."""
    nonce = split_nonce(ref.nonce)[0]
    return ResponseRef(ref.agent, ref.thread_id, nonce if tag is None else nonce + TAG_SEPARATOR + tag)


def split_nonce(nonce: str) -> tuple[str, str | None]:
    """A nonce's record part and its decisions tag (None for a response that opened its turn)."""
    record_id, _, tag = nonce.partition(TAG_SEPARATOR)
    return record_id, tag or None


def unknown(value: str, what: str = "response") -> ApiError:
    """The 404 for an id that names nothing the caller's tenant holds."""
    return not_found(f"no {what} with id {value!r}", code=f"{what}_not_found")


def parse_id(value: str, prefix: str = RESPONSE_PREFIX, what: str = "response") -> ResponseRef:
    """The response an id names; 404 for anything that is not one of this server's ids."""
    missing = unknown(value, what)
    if not value.startswith(prefix) or len(value) > MAX_ID_LENGTH:
        raise missing
    payload = value[len(prefix) :]
    try:
        parts = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    except (binascii.Error, ValueError):
        raise missing from None
    if not (isinstance(parts, list) and len(parts) == 3 and all(isinstance(p, str) and p for p in parts)):
        raise missing
    return ResponseRef(*parts)


def record(nonce: str, created_at: int, **fields: Any) -> dict[str, Any]:
    """The record stamped on a response's user message (fields with a None value left out)."""
    return {"id": nonce, "created_at": created_at, **{k: v for k, v in fields.items() if v is not None}}


def with_record(message: Message, rec: dict[str, Any]) -> Message:
    """The message carrying a response record."""
    return message.model_copy(update={"metadata": {**message.metadata, RECORD_FIELD: rec}})


def find_record(history: Sequence[Message], nonce: str) -> int | None:
    """The index of the user message carrying the response with this nonce (for a resumed
    response, the user message of the turn it resumed)."""
    nonce = split_nonce(nonce)[0]
    for i in range(len(history) - 1, -1, -1):
        m = history[i]
        if m.role == "user" and (m.metadata.get(RECORD_FIELD) or {}).get("id") == nonce:
            return i
    return None


def turn_end(history: Sequence[Message], index: int) -> int:
    """Where the turn opened at `index` ends: the next user message, or the thread's end."""
    return next(
        (j for j in range(index + 1, len(history)) if history[j].role == "user" and not history[j].metadata.get(PLANTED)),
        len(history),
    )

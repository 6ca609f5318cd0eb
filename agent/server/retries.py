"""Retried requests: how a resent chat request finds the turn it already ran instead of running it again.

A client that names its thread and sends only its new message cannot be told from its history
whether a request is new or a retry of one whose answer it never received (a timeout, a dropped
connection, a 5xx, a server restart). Two signals say so:

- an `Idempotency-Key` header, the same on every attempt of one request (the contract clients
  rely on; with the `openai` SDKs, pass it in `extra_headers`);
- the `X-Stainless-Retry-Count` header that the official `openai` SDKs (Python and Node) send on
  their automatic retries, for clients that send no key: a retry whose messages are the thread's
  latest user turn, received within `RETRY_WINDOW_S`, is that turn.

The committed user message carries the key and the time it was received (`Message.metadata`), so
the check survives restarts and works across processes sharing a Postgres database; it happens
while the thread is held, so a retry that arrives while its turn still runs waits for it and
then returns its answer.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from agent.messages import Message
from agent.server.threads import Turn, turn_reply

IDEMPOTENCY_HEADER = "idempotency-key"
"""Names one request across its attempts."""
RETRY_COUNT_HEADER = "x-stainless-retry-count"
"""How many times the official openai SDKs have already tried this request."""
MAX_IDEMPOTENCY_KEY = 255
"""Longest Idempotency-Key accepted."""
RETRY_WINDOW_S = 900.0
"""How recent a thread's last user turn must be for a keyless SDK retry to be taken as it: the
openai SDK's own timeout (600 s) plus its backoff, with room."""
KEY_FIELD = "rein.idempotency_key"
"""Message metadata: the Idempotency-Key of the request that committed this user message."""
RECEIVED_FIELD = "rein.received_at"
"""Message metadata: when the server received the request that committed this user message (Unix s)."""


@dataclass(frozen=True)
class RetrySignal:
    """What a request says about being a retry."""

    key: str | None = None
    """Its Idempotency-Key, when it sent one."""
    attempt: int = 0
    """The SDK's retry count: 0 for a first attempt."""

    @property
    def is_retry(self) -> bool:
        """Whether the client says this is not its first attempt."""
        return self.attempt > 0


def read_signal(headers: Mapping[str, str]) -> RetrySignal:
    """The retry signal of a request's headers; ValueError with the reason for a malformed key."""
    key = headers.get(IDEMPOTENCY_HEADER)
    if key is not None:
        key = key.strip()
        if not key:
            raise ValueError("the Idempotency-Key header is empty")
        if len(key) > MAX_IDEMPOTENCY_KEY:
            raise ValueError(f"the Idempotency-Key header is longer than {MAX_IDEMPOTENCY_KEY} characters")
        if not key.isascii() or not key.isprintable():
            raise ValueError("the Idempotency-Key header must be printable ASCII")
    try:
        attempt = max(int(headers.get(RETRY_COUNT_HEADER, "0").strip() or 0), 0)
    except ValueError:
        attempt = 0  # an SDK detail, not ours to reject requests over
    return RetrySignal(key, attempt)


def is_resend(signal: RetrySignal, delivered: bool) -> bool:
    """Whether a request whose history is its thread minus the last reply asks for that reply again.

    An SDK retry (retry count above 0) does; a request with an Idempotency-Key of its own (the
    key's turn was not found) asks for a new answer; without either, it is a resend only when no
    client received the reply (`deliveries`): a Regenerate button, or another end user opening
    the conversation the same way, gets a new answer, and a client that lost the answer gets it.
    """
    if signal.is_retry:
        return True
    return signal.key is None and not delivered


def stamp(message: Message, signal: RetrySignal, now: float | None = None) -> Message:
    """The user message that commits a request, carrying its key and its arrival time."""
    meta = {**message.metadata, RECEIVED_FIELD: time.time() if now is None else now}
    if signal.key is not None:
        meta[KEY_FIELD] = signal.key
    return message.model_copy(update={"metadata": meta})


@dataclass(frozen=True)
class Earlier:
    """A turn of the thread that an incoming request already ran."""

    index: int
    """Position of the turn's user message in the thread."""
    reply: str
    """The turn's committed reply (empty while it has none)."""


class KeyReused(ValueError):
    """An Idempotency-Key already names a different request on this thread."""


def find_earlier(history: Sequence[Message], signal: RetrySignal, turns: Sequence[Turn], *, delta: bool,
                 now: float | None = None) -> Earlier | None:
    """The turn of `history` that this request already ran, or None when it is new.

    With a key, the user message committed under it (KeyReused when its text is not the
    request's). Without one, a keyless SDK retry from a client that sends only new messages
    (`delta`) is the thread's last turn when that turn's user messages are the request's and it
    was received within RETRY_WINDOW_S.
    """
    if signal.key is not None:
        for i in range(len(history) - 1, -1, -1):
            m = history[i]
            if m.role == "user" and m.metadata.get(KEY_FIELD) == signal.key:
                last = next((t for t in reversed(turns) if t.role == "user"), None)
                if last is None or " ".join(m.text.split()) != last.key:
                    raise KeyReused(
                        f"the Idempotency-Key {signal.key!r} was already used for a different message on this thread"
                    )
                return Earlier(i, turn_reply(history, i))
        return None
    if not (signal.is_retry and delta and turns):
        return None
    users = [i for i, m in enumerate(history) if m.role == "user"][-len(turns):]
    if len(users) < len(turns) or any(" ".join(history[i].text.split()) != t.key for i, t in zip(users, turns, strict=True)):
        return None
    # Only a run of user messages the request itself could have committed (no reply between them).
    if any(history[j].role == "assistant" and history[j].text.strip() for j in range(users[0], users[-1])):
        return None
    received = history[users[-1]].metadata.get(RECEIVED_FIELD)
    now = time.time() if now is None else now
    if not isinstance(received, int | float) or now - received > RETRY_WINDOW_S:
        return None
    return Earlier(users[-1], turn_reply(history, users[-1]))

"""How chat requests map to checkpointed threads: thread keys, history reconciliation and forks.

A chat client either keeps the conversation itself and resends all of it every time (chat UIs), or
names a thread and sends only its new message. Both land on a LangGraph thread. The rules, applied
by `compare` and `fork_id` and documented in docs/server.md:

- The thread key is the `X-Rein-Thread` (or `X-Thread-Id`) header, else the request's `user`
  field, else `conv-` + a hash of the client's system text and first user message.
- The client's user and assistant text turns are compared with the thread's surface dialogue.
  When the client's history extends the thread, only what is new is appended. When the thread is
  the client's history plus one reply, the request is a retry and that reply is returned. When
  they diverge, the conversation moves to a fork whose id is a hash of the parent thread and the
  client's history up to and including the first differing user message (an assistant message
  counts by position only), so the same history always reaches the same fork.
- On a server with API keys every thread, forks included, is stored under its tenant
  (`storage_id`): the ids a client sees and sends stay its own, and another tenant naming the same
  id reaches a different thread.
"""

from __future__ import annotations

import difflib
import hashlib
import itertools
import json
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Literal

from agent.messages import Message
from agent.planted_reasoning import PLANTED, surface_dialogue

REPLY_SEPARATOR = "\n\n"
"""Joins the texts of several assistant messages of one turn (text said before and after tools)."""
MAX_FORK_HOPS = 16
"""How many forks a request may walk through before the server gives up (409)."""
MAX_KEY_LENGTH = 256
"""Longest thread key accepted from a header or the `user` field."""

Role = Literal["user", "assistant"]
KeySource = Literal["header", "user", "derived"]


@dataclass(frozen=True)
class Turn:
    """One surface message: a user message or an assistant reply, as text."""

    role: Role
    """user or assistant."""
    text: str
    """The message text (several assistant messages in a row are joined into one reply)."""

    @property
    def key(self) -> str:
        """The text with whitespace runs collapsed, for comparison."""
        return " ".join(self.text.split())


@dataclass(frozen=True)
class Outcome:
    """How a client's history relates to a thread's."""

    kind: Literal["extends", "replay", "unanswered", "diverges"]
    """extends: the client has the thread plus new turns; replay: the thread is the client's
    history plus one reply; unanswered: both end with the same unanswered user message;
    diverges: they differ (or the client's history stops inside the thread's)."""
    index: int
    """extends: the first new client turn; diverges: the first differing position."""
    reply: str = ""
    """replay: the thread's reply."""


def merge_turns(items: Iterable[tuple[Role, str]]) -> list[Turn]:
    """Turns from (role, text) pairs, joining consecutive assistant texts into one reply."""
    return list(_merged(items))


def _merged(items: Iterable[tuple[Role, str]]) -> Iterator[Turn]:
    # Lazy, so a caller that needs only the first turns reads only the messages they come from.
    reply: list[str] = []
    for role, text in items:
        if role == "assistant":
            reply.append(text)
            continue
        if reply:
            yield Turn("assistant", REPLY_SEPARATOR.join(reply))
            reply = []
        yield Turn(role, text)
    if reply:
        yield Turn("assistant", REPLY_SEPARATOR.join(reply))


def _surface_pairs(history: list[Message]) -> Iterator[tuple[Role, str]]:
    # surface_dialogue's filter, without building a new Message per message of the thread.
    for m in history:
        if m.metadata.get(PLANTED):
            continue
        if m.role == "user":
            yield "user", m.text
        elif m.role == "assistant" and (text := m.text).strip():
            yield "assistant", text


def thread_turns(history: list[Message], limit: int | None = None) -> list[Turn]:
    """A thread's surface dialogue as turns (tool traffic, plants and empty messages left out).

    With limit, only its first `limit` turns, reading the thread only as far as they reach.
    """
    return list(itertools.islice(_merged(_surface_pairs(history)), limit))


def reply_text(history: list[Message]) -> str:
    """The reply of the thread's last turn: its assistant texts after the last user message."""
    last_user = max((i for i, m in enumerate(history) if m.role == "user"), default=-1)
    texts = [m.text for m in surface_dialogue(history[last_user + 1 :]) if m.role == "assistant" and m.text.strip()]
    return REPLY_SEPARATOR.join(texts)


def turn_reply(history: Sequence[Message], index: int) -> str:
    """The reply of the turn whose user message is at `index`: its assistant texts up to the next user message."""
    texts: list[str] = []
    for m in history[index + 1 :]:
        if m.role == "user":
            break
        if m.role == "assistant" and not m.metadata.get(PLANTED) and m.text.strip():
            texts.append(m.text)
    return REPLY_SEPARATOR.join(texts)


def is_open(history: list[Message]) -> bool:
    """Whether the thread's last turn may have been cut off (it does not end with a plain answer).

    Such a thread is continued from its checkpoint before it takes new input, so a tool call left
    without its result never reaches the model.
    """
    if not history:
        return False
    last = history[-1]
    return last.role in ("user", "tool") or (last.role == "assistant" and bool(last.tool_calls))


def same_reply(client: Turn, thread: Turn) -> bool:
    """Whether a client's assistant message shows the thread's reply.

    Equal up to whitespace, or a prefix of it (a stream the user stopped), or containing it (a
    client that showed streamed text around the committed answer); failing those, the same words
    once markup is set aside (`same_words`), as a chat UI that renders markdown sends it back.
    """
    c, t = client.key, thread.key
    return c == t or (bool(c) and t.startswith(c)) or (bool(t) and t in c) or same_words(client.text, thread.text)


_WORD = re.compile(r"\w+")
SAME_WORDS_RATIO = 0.9
"""How alike (difflib's ratio over words) a re-rendered reply must be to count as the thread's."""
_MAX_WORDS_COMPARED = 20_000
"""Replies longer than this in words are compared exactly only, so one request's cost stays bounded."""


def same_words(client: str, thread: str) -> bool:
    """Whether two replies say the same words, markup, punctuation, case and spacing aside.

    A chat UI that renders markdown and sends back what it shows (emphasis, headings, code
    marks, list bullets and link targets dropped, whitespace trimmed) would otherwise fork its
    thread on every turn. Nearly the same words (SAME_WORDS_RATIO) still count: a link's target
    or a stripped character may drop a word or two. A client that changed what the agent said
    more than that moves to a fork.
    """
    a, b = _WORD.findall(client.casefold()), _WORD.findall(thread.casefold())
    if not a or not b:
        return False
    if a == b:
        return True
    if max(len(a), len(b)) > _MAX_WORDS_COMPARED:
        return False
    matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
    return matcher.real_quick_ratio() >= SAME_WORDS_RATIO and matcher.quick_ratio() >= SAME_WORDS_RATIO and matcher.ratio() >= SAME_WORDS_RATIO


def _same(client: Turn, thread: Turn) -> bool:
    if client.role != thread.role:
        return False
    if client.text == thread.text:  # the usual case, without normalizing whitespace on both sides
        return True
    return client.key == thread.key if client.role == "user" else same_reply(client, thread)


def compare(client: list[Turn], thread: list[Turn]) -> Outcome:
    """Relate a client's history (ending with a user message) to a thread's.

    Only the thread's first len(client) + 2 turns decide it (`compare_window`): a longer thread can
    neither end where the client's history does nor one reply after it.
    """
    n = 0
    while n < len(client) and n < len(thread) and _same(client[n], thread[n]):
        n += 1
    if n == len(thread) and n < len(client):
        return Outcome("extends", n)
    if n == len(client) == len(thread):
        return Outcome("unanswered", n)
    if n == len(client) and len(thread) == n + 1 and thread[n].role == "assistant":
        return Outcome("replay", n, thread[n].text)
    return Outcome("diverges", n)


def compare_window(client: list[Turn]) -> int:
    """How many of a thread's first turns `compare` needs to relate it to this client history."""
    return len(client) + 2


def fork_id(base: str, parent: str, client: list[Turn], index: int, again: str | None = None) -> str:
    """The thread a history diverging from `parent` at `index` continues on.

    The hash covers the parent, the agreed prefix and the first differing client message: a user
    message by its text, an assistant message by its words (`reply_words`, so a chat UI that
    re-renders it still reaches the same fork). A history that stops there asks for a new answer
    (Regenerate, or another end user opening the same way): `again` (the request's
    Idempotency-Key, else a random nonce) keeps each such request on a fork of its own; the turns
    that follow it carry the answer it got and reach the fork of that answer's words.
    """
    head = [[t.role, t.key] for t in client[:index]]
    at = client[index] if index < len(client) else None
    if at is None:
        marker: list[str | None] = ["again", again] if again is not None else ["assistant", None]
    else:
        marker = [at.role, at.key if at.role == "user" else reply_words(at.text) or at.key]
    payload = json.dumps([parent, head, marker], ensure_ascii=False, separators=(",", ":"))
    return f"{base}~{hashlib.sha256(payload.encode()).hexdigest()[:12]}"


def reply_words(text: str) -> str:
    """A reply's words, casefolded, markup and punctuation aside (what `same_words` compares)."""
    return " ".join(_WORD.findall(text.casefold()))


def derived_key(system_texts: list[str], turns: list[Turn]) -> str:
    """The thread key of a request that names none: a hash of its system text and first user message."""
    first = next((t.key for t in turns if t.role == "user"), "")
    payload = json.dumps([[" ".join(s.split()) for s in system_texts], first], ensure_ascii=False)
    return "conv-" + hashlib.sha256(payload.encode()).hexdigest()[:20]


def check_key(value: str, where: str) -> str:
    """A thread key from a client, stripped; ValueError with the reason when it is unusable."""
    key = value.strip()
    if not key:
        raise ValueError(f"{where} is empty")
    if len(key) > MAX_KEY_LENGTH:
        raise ValueError(f"{where} is longer than {MAX_KEY_LENGTH} characters")
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in key):
        raise ValueError(f"{where} contains control characters")
    return key


def storage_id(agent: str, thread_id: str, tenant: str | None = None) -> str:
    """The checkpointer's thread id: namespaced by the served agent's name and, on a server with
    API keys, by the tenant that owns the thread.

    Without a tenant (an open server) it is `AGENT/THREAD`; with one, `@TENANT/AGENT/THREAD`.
    Tenant ids hold no `/` and served agent names never start with `@`, so two tenants, or a
    tenant and an open server on the same database, never name the same thread.
    """
    if tenant is None:
        return f"{agent}/{thread_id}"
    if not tenant or "/" in tenant:
        raise ValueError(f"invalid tenant id {tenant!r}")
    return f"@{tenant}/{agent}/{thread_id}"

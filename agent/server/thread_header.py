"""Thread ids in the X-Rein-Thread header: any thread id, `李雷` or an emoji included, travels as
printable ASCII, and a client that sends the header back names the same thread.

A thread id of printable ASCII is sent as it is. Any other (non-ASCII characters, or one that
starts with the marker) is sent in RFC 8187's extended form, `utf-8''` and the id's UTF-8 bytes
percent-encoded, e.g. `utf-8''%E6%9D%8E%E9%9B%B7`; a header value in that form is decoded on the
way in. HTTP header values are bytes that servers read as Latin-1, so sending such an id as is
cannot work.
"""

from __future__ import annotations

from urllib.parse import quote, unquote

MARKER = "utf-8''"
"""The prefix of an encoded thread id (RFC 8187's charset and empty language)."""


def thread_header(thread_id: str) -> str:
    """The X-Rein-Thread value that names thread_id."""
    plain = all(" " <= ch <= "~" for ch in thread_id) and not thread_id.lower().startswith(MARKER)
    return thread_id if plain else MARKER + quote(thread_id, safe="")


def read_thread_header(value: str) -> str:
    """The thread id a header value names; ValueError when an encoded one is not valid UTF-8."""
    if not value.lower().startswith(MARKER):
        return value
    try:
        return unquote(value[len(MARKER) :], errors="strict")
    except UnicodeDecodeError:
        raise ValueError(f"the thread header {value!r} is not percent-encoded UTF-8") from None


__all__ = ["MARKER", "read_thread_header", "thread_header"]

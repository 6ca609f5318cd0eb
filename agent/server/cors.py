"""Cross-origin requests, so a browser chat app served from another origin can call the server.

Off unless origins are named (`rein serve --cors-origin`, `create_app(cors_origins=...)`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from urllib.parse import urlsplit

from fastapi import FastAPI
from starlette.middleware.cors import CORSMiddleware

from agent.errors import UserFacingError

API_HEADERS = ("Authorization", "Content-Type", "X-Rein-Thread", "X-Thread-Id", "Idempotency-Key")
"""Request headers of rein's API: the key, the JSON body's type, the thread headers and the
idempotency key."""
SDK_HEADERS = (
    "OpenAI-Organization", "OpenAI-Project", "OpenAI-Beta",
    "X-Stainless-Lang", "X-Stainless-Package-Version", "X-Stainless-OS", "X-Stainless-Arch",
    "X-Stainless-Runtime", "X-Stainless-Runtime-Version", "X-Stainless-Retry-Count", "X-Stainless-Timeout",
    "X-Stainless-Read-Timeout", "X-Stainless-Async", "X-Stainless-Raw-Response", "X-Stainless-Helper-Method",
    "X-Stainless-Stream-Helper", "X-Stainless-Poll-Helper", "X-Stainless-Custom-Poll-Interval",
    "X-Stainless-Custom-Event-Handler",
)
"""Headers the official `openai` SDKs (npm and Python) add to every request: a browser asks for
each in the preflight, and one refused fails the whole call, so the SDK could not reach the
server from a page at all. Taken from the SDKs' sources (npm openai 7.60, Python openai 3.63)."""
ALLOWED_HEADERS = API_HEADERS + SDK_HEADERS
"""Request headers a browser may send."""
EXPOSED_HEADERS = ("X-Rein-Thread",)
"""Response headers a browser app may read: the thread id to send back."""
ALLOWED_METHODS = ("GET", "POST")
"""The API's methods (preflight OPTIONS is answered by the middleware itself)."""
_SCHEME = re.compile(r"[a-z][a-z0-9+.-]*")


def check_origin(origin: str) -> str:
    """An origin as browsers send it (`https://chat.example.com`, `http://localhost:3000`) or `*`;
    a UserFacingError saying why otherwise."""
    # Browsers serialize an origin's scheme and host in lower case; the middleware compares exactly.
    value = origin.strip().lower()
    if value == "*":
        return value
    parts = urlsplit(value)
    if (
        not _SCHEME.fullmatch(parts.scheme)
        or not parts.netloc
        or parts.path
        or parts.query
        or parts.fragment
        or "@" in parts.netloc
        or value != f"{parts.scheme}://{parts.netloc}"
    ):
        raise UserFacingError(
            f"CORS origin {origin!r} is not an origin: use SCHEME://HOST[:PORT] with no path or "
            "trailing slash (e.g. https://chat.example.com), or * for any origin"
        )
    return value


def add_cors(app: FastAPI, origins: Iterable[str]) -> list[str]:
    """Let the named origins call the app from a browser; no origins leaves CORS off. Returns
    the checked origins."""
    checked = list(dict.fromkeys(check_origin(o) for o in origins))
    if checked:
        # Credentials mode stays off: the API key travels in the Authorization header, which a
        # page sets itself, so no cookie ever needs to cross origins.
        app.add_middleware(
            CORSMiddleware,
            allow_origins=checked,
            allow_methods=list(ALLOWED_METHODS),
            allow_headers=list(ALLOWED_HEADERS),
            expose_headers=list(EXPOSED_HEADERS),
            allow_credentials=False,
        )
    return checked

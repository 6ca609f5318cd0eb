"""Bearer-key authentication: keys from a file (one a line) and the REIN_API_KEYS variable."""

from __future__ import annotations

import hmac
from collections.abc import Iterable, Mapping
from pathlib import Path

from agent.errors import UserFacingError
from agent.server.errors import unauthorized

ENV_VAR = "REIN_API_KEYS"
"""Environment variable with comma-separated keys."""


def load_api_keys(path: str | Path | None = None, env: Mapping[str, str] | None = None) -> list[str]:
    """Keys from a file (one a line; blank lines and `#` comments skipped) and from REIN_API_KEYS.

    A key file that holds no key is an error rather than an open server.
    """
    keys: list[str] = []
    if path is not None:
        file = Path(path)
        try:
            text = file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise UserFacingError(f"cannot read API key file {file}: {exc}") from None
        found = [line.strip() for line in text.splitlines()]
        found = [k for k in found if k and not k.startswith("#")]
        if not found:
            raise UserFacingError(f"API key file {file} holds no keys (one key a line)")
        keys.extend(found)
    if env is not None and env.get(ENV_VAR, "").strip():
        keys.extend(k.strip() for k in env[ENV_VAR].split(",") if k.strip())
    for k in keys:
        if not k.isascii() or not k.isprintable() or any(ch.isspace() for ch in k):
            where = f"{path}" if path is not None else ENV_VAR
            raise UserFacingError(f"{where}: API keys must be printable ASCII without spaces")
    return list(dict.fromkeys(keys))


class ApiKeys:
    """Checks `Authorization: Bearer KEY` headers; with no keys every request passes."""

    def __init__(self, keys: Iterable[str] = ()) -> None:
        self._keys = [k.encode("ascii") for k in keys]

    @property
    def enabled(self) -> bool:
        """Whether requests must carry a key."""
        return bool(self._keys)

    def check(self, authorization: str | None) -> None:
        """Raise a 401 ApiError unless the header carries one of the keys."""
        if not self._keys:
            return
        if not authorization:
            raise unauthorized("missing API key: send the header `Authorization: Bearer <key>`")
        scheme, _, token = authorization.strip().partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise unauthorized("malformed Authorization header: expected `Bearer <key>`")
        given = token.encode("latin-1", errors="replace")
        # Every key is compared, in constant time each, so timing reveals neither which key nor
        # how much of one matched.
        ok = False
        for key in self._keys:
            ok |= hmac.compare_digest(given, key)
        if not ok:
            raise unauthorized("invalid API key")

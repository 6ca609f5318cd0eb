"""Bearer-key authentication and tenants: keys from a file and the REIN_API_KEYS variable.

Every key belongs to a tenant, the owner of the threads its requests create. A key listed alone is
its own tenant, known by `key_id(key)` (a truncated SHA-256, so the key itself is never stored in
a thread id); `NAME: KEY` entries give several keys one named tenant, so they share threads.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from agent.errors import UserFacingError
from agent.server.errors import unauthorized

ENV_VAR = "REIN_API_KEYS"
"""Environment variable with comma-separated entries (`KEY` or `NAME: KEY`)."""
TENANT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
"""What a named tenant may be called: letters, digits, `.`, `_` and `-`, at most 64."""


@dataclass(frozen=True)
class ApiKey:
    """One accepted bearer key and the tenant it acts for."""

    key: str
    """The secret the client sends as `Authorization: Bearer KEY`."""
    tenant: str | None = None
    """The named tenant it belongs to; None makes the key its own tenant (`key_id(key)`)."""

    @property
    def tenant_id(self) -> str:
        """The tenant that owns this key's threads."""
        return self.tenant if self.tenant is not None else key_id(self.key)


def key_id(key: str) -> str:
    """The stable, non-secret id of a key: `key:` and 16 hex digits of its SHA-256.

    Tenant names cannot hold `:`, so a key's id never equals a named tenant.
    """
    return "key:" + hashlib.sha256(key.encode()).hexdigest()[:16]


def check_tenant_name(name: str, where: str) -> str:
    """A valid tenant name, or a UserFacingError naming the rule."""
    if not TENANT_NAME.fullmatch(name):
        raise UserFacingError(
            f"{where}: tenant name {name!r} is invalid: use 1-64 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit"
        )
    return name


def parse_entry(text: str, where: str) -> ApiKey:
    """One entry of a key file line or of REIN_API_KEYS: `KEY` or `NAME: KEY`."""
    parts = text.split()
    if len(parts) == 1:
        key, tenant = parts[0], None
    elif len(parts) == 2 and parts[0].endswith(":") and len(parts[0]) > 1:
        tenant, key = check_tenant_name(parts[0][:-1], where), parts[1]
    else:
        raise UserFacingError(
            f"{where}: expected `KEY` or `TENANT: KEY` (keys hold no spaces), got {len(parts)} words"
        )
    if not key.isascii() or not key.isprintable():
        raise UserFacingError(f"{where}: API keys must be printable ASCII without spaces")
    return ApiKey(key, tenant)


def load_api_keys(path: str | Path | None = None, env: Mapping[str, str] | None = None) -> list[ApiKey]:
    """Keys from a file (one entry a line; blank lines and `#` comments skipped) and from REIN_API_KEYS.

    A key file that holds no key is an error rather than an open server, and so is a key given
    twice with different tenants.
    """
    entries: list[ApiKey] = []
    if path is not None:
        file = Path(path)
        try:
            text = file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise UserFacingError(f"cannot read API key file {file}: {exc}") from None
        for number, line in enumerate(text.splitlines(), 1):
            line = line.strip()
            if line and not line.startswith("#"):
                entries.append(parse_entry(line, f"{file} line {number}"))
        if not entries:
            raise UserFacingError(f"API key file {file} holds no keys (one `KEY` or `TENANT: KEY` a line)")
    if env is not None and env.get(ENV_VAR, "").strip():
        entries.extend(parse_entry(e, ENV_VAR) for e in env[ENV_VAR].split(",") if e.strip())
    return _dedupe(entries)


def _dedupe(entries: Iterable[ApiKey]) -> list[ApiKey]:
    seen: dict[str, ApiKey] = {}
    for entry in entries:
        known = seen.setdefault(entry.key, entry)
        if known.tenant != entry.tenant:
            # Never print the key itself: its id is enough to find it.
            raise UserFacingError(
                f"the API key {key_id(entry.key)} is given twice, for tenants "
                f"{_tenant_label(known)} and {_tenant_label(entry)}; give each key one tenant"
            )
    return list(seen.values())


def _tenant_label(entry: ApiKey) -> str:
    return repr(entry.tenant) if entry.tenant is not None else "(its own)"


def as_api_keys(keys: Iterable[str | ApiKey] | Mapping[str, str | None]) -> list[ApiKey]:
    """ApiKey entries from what `create_app` accepts: keys, ApiKey objects, or a key → tenant mapping."""
    if isinstance(keys, Mapping):
        items = [ApiKey(k, t) for k, t in keys.items()]
    else:
        items = [k if isinstance(k, ApiKey) else ApiKey(k) for k in keys]
    for item in items:
        if not item.key or not item.key.isascii() or not item.key.isprintable() or " " in item.key:
            raise UserFacingError("API keys must be non-empty printable ASCII without spaces")
        if item.tenant is not None:
            check_tenant_name(item.tenant, "api_keys")
    return _dedupe(items)


class ApiKeys:
    """Checks `Authorization: Bearer KEY` headers and names the key's tenant; with no keys every
    request passes, with no tenant."""

    def __init__(self, keys: Iterable[str | ApiKey] | Mapping[str, str | None] = ()) -> None:
        entries = as_api_keys(keys)
        self._keys = [e.key.encode("ascii") for e in entries]
        self._tenants = [e.tenant_id for e in entries]

    @property
    def enabled(self) -> bool:
        """Whether requests must carry a key."""
        return bool(self._keys)

    @property
    def tenants(self) -> set[str]:
        """Every tenant id these keys act for."""
        return set(self._tenants)

    def tenant(self, key: str) -> str | None:
        """The tenant a key acts for; None when the key is not accepted (or there are no keys)."""
        index = self._match(key.encode("latin-1", errors="replace"))
        return self._tenants[index] if index is not None else None

    def check(self, authorization: str | None) -> str | None:
        """The tenant of the key the header carries (None on an open server); a 401 ApiError
        when it carries none of the keys."""
        if not self._keys:
            return None
        if not authorization:
            raise unauthorized("missing API key: send the header `Authorization: Bearer <key>`")
        scheme, _, token = authorization.strip().partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise unauthorized("malformed Authorization header: expected `Bearer <key>`")
        index = self._match(token.encode("latin-1", errors="replace"))
        if index is None:
            raise unauthorized("invalid API key")
        return self._tenants[index]

    def _match(self, given: bytes) -> int | None:
        # Every key is compared, in constant time each, so timing reveals neither which key nor
        # how much of one matched.
        found: int | None = None
        for index, key in enumerate(self._keys):
            if hmac.compare_digest(given, key):
                found = index
        return found

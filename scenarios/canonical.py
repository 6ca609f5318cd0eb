"""Canonical JSON text and hash of a domain DB, as defined for the tau2 expected end states.

The canonical dump of a DB is the plain JSON object its pydantic model dumps (`mode="json"`);
the canonical text is that object written with sorted keys, no whitespace and raw Unicode; the
canonical hash is the SHA-256 of the UTF-8 encoded text. Key order never matters; float versus
int does (`100.0` and `100` hash differently).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def canonical_dumps(obj: Any) -> str:
    """The canonical JSON text of a JSON-compatible object."""
    return _ENCODER.encode(obj)


def canonical_hash(obj: Any) -> str:
    """SHA-256 hex digest of the canonical JSON text of obj."""
    return hashlib.sha256(canonical_dumps(obj).encode("utf-8")).hexdigest()


def json_clone(obj: Any) -> Any:
    """A deep copy of JSON-compatible data (dicts, lists and scalars); much faster than copy.deepcopy."""
    if isinstance(obj, dict):
        return {
            k: json_clone(v) if isinstance(v, dict | list | tuple) else v for k, v in obj.items()
        }
    if isinstance(obj, list | tuple):
        return [json_clone(v) if isinstance(v, dict | list | tuple) else v for v in obj]
    return obj

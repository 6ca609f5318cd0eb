"""Copy-on-write table storage for domain DBs, with a canonical hash that reuses cached record text.

A domain DB is a JSON object of tables, each table an object of records keyed by id (the layout
of tau2's db.json). A `Snapshot` is an immutable starting state shared by every episode; a
`TableStore` is one episode's live state on top of it. Creating a store copies only the table
dicts (no records); a record is deep-copied the first time a tool asks to change it. Hashing
re-serialises only the records that are not the snapshot's own objects, so an episode on the
3 MB airline DB starts in microseconds and hashes in a few milliseconds.

The one rule: never change a record in place unless it came from `TableStore.writable` (or was
put there with `TableStore.put`); records read through `data` may be shared with other episodes.
"""

from __future__ import annotations

import hashlib
import json
import operator
from collections.abc import Mapping
from typing import Any

from scenarios.canonical import canonical_dumps, json_clone

_KEY_ENCODER = json.JSONEncoder(ensure_ascii=False)


def _key_bytes(key: str) -> bytes:
    return _KEY_ENCODER.encode(key).encode("utf-8")


def _entry_bytes(key: str, value: Any) -> bytes:
    return _key_bytes(key) + b":" + canonical_dumps(value).encode("utf-8")


class Snapshot:
    """An immutable DB state (canonical JSON data) shared by the episodes that start from it."""

    def __init__(self, data: Mapping[str, Any]) -> None:
        for name in data:
            if not isinstance(name, str):
                raise TypeError(f"table names must be strings, got {name!r}")
        self.data: dict[str, Any] = dict(data)
        """Table name → table (a dict of records) or, rarely, a plain JSON value; never mutate it."""
        self._entries: dict[str, dict[str, bytes]] = {}
        self._bodies: dict[str, bytes] = {}
        self._sorted: dict[str, list[str]] = {}
        self._hash: str | None = None

    def entries(self, table: str) -> dict[str, bytes]:
        """Canonical `"key":record` bytes of each record of a table, computed once."""
        cached = self._entries.get(table)
        if cached is None:
            cached = {key: _entry_bytes(key, rec) for key, rec in self.data[table].items()}
            self._entries[table] = cached
        return cached

    def sorted_keys(self, table: str) -> list[str]:
        """The table's record keys in sorted order, computed once."""
        cached = self._sorted.get(table)
        if cached is None:
            cached = self._sorted[table] = sorted(self.data[table])
        return cached

    def body(self, table: str) -> bytes:
        """Canonical bytes of a whole table, computed once."""
        cached = self._bodies.get(table)
        if cached is None:
            value = self.data[table]
            if isinstance(value, dict):
                entries = self.entries(table)
                cached = b"{" + b",".join([entries[key] for key in self.sorted_keys(table)]) + b"}"
            else:
                cached = canonical_dumps(value).encode("utf-8")
            self._bodies[table] = cached
        return cached

    def canonical_hash(self) -> str:
        """Canonical hash of the snapshot, computed once."""
        if self._hash is None:
            digest = hashlib.sha256(b"{")
            for i, name in enumerate(sorted(self.data)):
                digest.update((b"," if i else b"") + _key_bytes(name) + b":")
                digest.update(self.body(name))
            digest.update(b"}")
            self._hash = digest.hexdigest()
        return self._hash


class TableStore:
    """One episode's live DB: a copy-on-write view of a Snapshot."""

    def __init__(self, base: Snapshot) -> None:
        self.base = base
        """The snapshot this store started from."""
        self.data: dict[str, Any] = {
            name: dict(table) if isinstance(table, dict) else json_clone(table)
            for name, table in base.data.items()
        }
        """Live state, shaped like db.json. Read freely; change records only via writable/put."""
        self._owned: dict[str, set[str]] = {}

    def table(self, name: str) -> dict[str, Any]:
        """The live records of a table (read-only by convention)."""
        return self.data[name]

    def writable(self, table: str, key: str) -> Any:
        """The record table[key], made private to this store so it may be changed in place."""
        owned = self._owned.setdefault(table, set())
        records = self.data[table]
        if key not in owned:
            records[key] = json_clone(records[key])
            owned.add(key)
        return records[key]

    def put(self, table: str, key: str, record: Any) -> None:
        """Add or replace a record; the store takes ownership of the object."""
        self.data[table][key] = record
        self._owned.setdefault(table, set()).add(key)

    def pop(self, table: str, key: str) -> Any:
        """Remove a record and return it."""
        self._owned.get(table, set()).discard(key)
        return self.data[table].pop(key)

    def dump(self) -> dict[str, Any]:
        """A private deep copy of the live state (the canonical dump)."""
        return json_clone(self.data)

    def canonical_hash(self) -> str:
        """Canonical hash of the live state; equals canonical_hash(self.dump())."""
        base = self.base
        if self.data.keys() == base.data.keys() and all(
            self._unchanged(name, value) for name, value in self.data.items()
        ):
            return base.canonical_hash()
        digest = hashlib.sha256(b"{")
        for i, name in enumerate(sorted(self.data)):
            digest.update((b"," if i else b"") + _key_bytes(name) + b":")
            value = self.data[name]
            base_value = base.data.get(name)
            if self._unchanged(name, value):
                digest.update(base.body(name))
            elif isinstance(value, dict) and isinstance(base_value, dict):
                cached = base.entries(name)
                keys = (
                    base.sorted_keys(name) if value.keys() == base_value.keys() else sorted(value)
                )
                base_get = base_value.get
                # Identity, not equality: a record the store owns is a different object.
                parts = [
                    cached[key]
                    if base_get(key, _MISSING) is value[key]
                    else _entry_bytes(key, value[key])
                    for key in keys
                ]
                digest.update(b"{")
                digest.update(b",".join(parts))
                digest.update(b"}")
            else:
                digest.update(canonical_dumps(value).encode("utf-8"))
        digest.update(b"}")
        return digest.hexdigest()

    def _unchanged(self, name: str, value: Any) -> bool:
        base_value = self.base.data.get(name, _MISSING)
        if value is base_value:
            return True
        if (
            not isinstance(value, dict)
            or not isinstance(base_value, dict)
            or len(value) != len(base_value)
        ):
            return False
        # Fast path in C: same order and same objects (true for a table nobody wrote to).
        if all(map(operator.is_, value.values(), base_value.values())):
            return value.keys() == base_value.keys()
        return value.keys() == base_value.keys() and all(
            base_value[key] is rec for key, rec in value.items()
        )


_MISSING = object()

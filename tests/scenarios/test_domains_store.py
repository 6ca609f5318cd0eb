"""The copy-on-write store: its incremental hash always equals the canonical hash of a full dump."""

from __future__ import annotations

import hashlib
import json

import pytest

from scenarios.canonical import canonical_dumps, canonical_hash, json_clone
from scenarios.domains.store import Snapshot, TableStore

pytestmark = pytest.mark.core  # needs no extra: also run on the bare core install (.ci/core_check.sh)


def _reference_hash(obj: object) -> str:
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def test_canonical_text_keeps_float_and_int_apart() -> None:
    assert canonical_dumps({"b": 100.0, "a": [1, "é"]}) == '{"a":[1,"é"],"b":100.0}'
    assert canonical_hash({"x": 100}) != canonical_hash({"x": 100.0})
    assert canonical_hash({"k": "ü", "a": None}) == _reference_hash({"a": None, "k": "ü"})


def test_json_clone_is_deep() -> None:
    data = {"a": [{"b": 1}], "t": ({"c": 2},)}
    copy = json_clone(data)
    copy["a"][0]["b"] = 9
    copy["t"][0]["c"] = 9
    assert data == {"a": [{"b": 1}], "t": ({"c": 2},)}


def test_store_hash_tracks_every_kind_of_change() -> None:
    base = Snapshot(
        {
            "users": {"u1": {"name": "Ann", "tags": ["x"]}, "ü2": {"name": "Ünal", "tags": []}},
            "orders": {"o1": {"total": 10.5}, "o2": {"total": 3.0}},
            "meta": {},
        }
    )
    original = json_clone(base.data)
    store = TableStore(base)
    assert store.canonical_hash() == base.canonical_hash() == _reference_hash(original)

    store.writable("users", "u1")["tags"].append("y")
    assert store.canonical_hash() == _reference_hash(store.dump())
    store.put("orders", "o0", {"total": 1.0})
    store.pop("orders", "o2")
    store.put("meta", "k", {"v": None})
    assert store.canonical_hash() == _reference_hash(store.dump())
    # Replacing a record with an equal new object still hashes the same.
    store.put("users", "ü2", {"name": "Ünal", "tags": []})
    assert store.canonical_hash() == _reference_hash(store.dump())

    # The snapshot, and a second store on it, never see these changes.
    assert base.data == original
    assert TableStore(base).canonical_hash() == _reference_hash(original)


def test_writable_copies_once_and_only_that_record() -> None:
    base = Snapshot({"t": {"a": {"n": [1]}, "b": {"n": [2]}}})
    store = TableStore(base)
    first = store.writable("t", "a")
    assert store.writable("t", "a") is first
    assert first is not base.data["t"]["a"]
    assert store.table("t")["b"] is base.data["t"]["b"]

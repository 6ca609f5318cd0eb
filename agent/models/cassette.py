"""Record real model calls to a cassette file and replay them, keyed by a hash of the request."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
from pathlib import Path
from typing import Literal

from agent.file_lock import exclusive
from agent.messages import ModelRequest, ModelResponse
from agent.models.base import Model, ModelError

CassetteMode = Literal["record", "replay", "auto"]


def request_blob(request: ModelRequest) -> bytes:
    """The canonical bytes of everything that decides the answer (messages, tools, settings, format)."""
    payload = request.model_dump(mode="json", exclude={"messages": {"__all__": {"metadata"}}})
    return json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def request_key(request: ModelRequest) -> str:
    """A stable hash of the request's canonical bytes (`request_blob`): the cassette's key."""
    return hashlib.sha256(request_blob(request)).hexdigest()


class CassetteModel(Model):
    """Wraps a model: replay answers from the cassette, record new ones from the inner model.

    Modes: "replay" never calls the inner model (a missing entry is an error); "record" always
    calls it and stores the answer; "auto" replays when it can and records otherwise. The file is
    JSON Lines, appended and flushed per call, so a crash loses at most the call in flight.
    """

    def __init__(self, path: str | Path, inner: Model | None = None, mode: CassetteMode = "auto") -> None:
        if mode != "replay" and inner is None:
            raise ValueError(f"cassette mode {mode!r} needs an inner model to record from")
        self.path = Path(path)
        self.inner = inner
        self.mode = mode
        self.name = f"cassette:{inner.name if inner else self.path.name}"
        self._entries: dict[str, ModelResponse] = {}
        self._lock = asyncio.Lock()
        self.hits = 0
        self.misses = 0
        if self.path.exists():
            self._load()

    def _load(self) -> None:
        for lineno, line in enumerate(self.path.read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                self._entries[row["key"]] = ModelResponse.model_validate(row["response"])
            except (json.JSONDecodeError, KeyError, ValueError) as exc:
                raise ModelError(f"{self.path}:{lineno}: corrupt cassette entry ({exc})") from None

    async def complete(self, request: ModelRequest) -> ModelResponse:
        key = request_key(request)
        if self.mode != "record" and key in self._entries:
            self.hits += 1
            return self._entries[key].model_copy(deep=True)
        if self.mode == "replay" or self.inner is None:
            raise ModelError(f"cassette {self.path} has no recording for request {key[:12]}")
        self.misses += 1
        response = await self.inner.complete(request)
        async with self._lock:
            self._entries[key] = response
            self.path.parent.mkdir(parents=True, exist_ok=True)
            # Locked: labelling shards in other processes append to the same cassette.
            with self.path.open("a", encoding="utf-8") as f, exclusive(f):
                f.write(json.dumps({"key": key, "response": response.model_dump(mode="json")}) + "\n")
                f.flush()
                os.fsync(f.fileno())
        return response

    def __contains__(self, key: object) -> bool:
        """Whether the cassette holds an answer for this request key."""
        return key in self._entries

    def keys(self) -> frozenset[str]:
        """The request keys the cassette holds an answer for."""
        return frozenset(self._entries)

    async def aclose(self) -> None:
        if self.inner is not None:
            await self.inner.aclose()

"""What rein's batching savers share (SQLite in agent.checkpoint, Postgres in
agent.checkpoint_postgres): a run's step writes held for its checkpoint's transaction."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver

HeldWrites = list[tuple[str, list[tuple[Any, ...]]]]
"""A thread's held step writes: (statement, rows) per `aput_writes` call, in call order."""


@dataclass
class Batch:
    """One run's batch on a thread."""

    held: HeldWrites = field(default_factory=list)
    """Step writes waiting for the next checkpoint's transaction."""
    checkpoint_id: str | None = None
    """The id of the last root checkpoint the run stored, once it has stored one: the thread's
    latest, since the caller holds the thread."""


class WriteBatching(BaseCheckpointSaver[str]):
    """What rein's batching savers share: inside `batch(thread)` a run's step writes are held in
    memory for the transaction of the thread's next checkpoint (`aput`), and committed before any
    read of the thread and when the batch ends.

    Under durability "exit" LangGraph stores a run's step writes (on delta channels, the new
    messages themselves) at the end of the run, one `aput_writes` call per step and task, then the
    run's checkpoint: each its own transaction. Held, they commit with the checkpoint: a run's end
    is normally one transaction. Nothing is committed later than with the plain saver (the writes
    were only ever visible with their checkpoint), and a crash still leaves no checkpoint without
    its writes. Writes that no checkpoint follows (an interrupt's, stored after the checkpoint)
    are committed when the batch ends, or before any read of the thread. Outside a batch a
    subclass is its plain saver. Subclasses say how rows are built (`_held_rows`), how held rows
    commit alone (`_commit_held`) and how `aput` takes them into its transaction.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._batches: dict[str, Batch] = {}

    @contextlib.asynccontextmanager
    async def batch(self, thread_id: str) -> AsyncIterator[Batch]:
        """Hold the thread's writes for its next checkpoint's transaction while the block runs
        (one run per thread at a time: the caller holds the thread)."""
        self._batches[thread_id] = batch = Batch()
        try:
            yield batch
        finally:
            try:
                # A cancelled run still commits what it stored after its last checkpoint.
                await asyncio.shield(self._commit_held(thread_id))
            finally:
                self._batches.pop(thread_id, None)

    def _take_held(self, thread_id: str) -> HeldWrites:
        """The thread's held writes, no longer held (empty outside a batch)."""
        batch = self._batches.get(thread_id)
        if batch is None or not batch.held:
            return []
        held, batch.held = batch.held, []
        return held

    def _held_rows(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str) -> tuple[str, list[tuple[Any, ...]]]:
        """The statement and rows that store one `aput_writes` call."""
        raise NotImplementedError

    async def _commit_held(self, thread_id: str) -> None:
        """Write and commit the thread's held writes, in one transaction."""
        raise NotImplementedError

    async def aput_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = "") -> None:
        batch = self._batches.get(str(config["configurable"]["thread_id"]))
        if batch is None:
            await super().aput_writes(config, writes, task_id, task_path)
            return
        # Serialized now, as the plain saver would: the values may change after the call.
        batch.held.append(self._held_rows(config, writes, task_id, task_path))

    def _stored(self, config: RunnableConfig) -> RunnableConfig:
        """Note a checkpoint `aput` stored (its returned config) on the thread's batch; returns it."""
        conf = config["configurable"]
        batch = self._batches.get(str(conf["thread_id"]))
        if batch is not None and not conf.get("checkpoint_ns"):
            batch.checkpoint_id = str(conf["checkpoint_id"])
        return config

    async def aget_tuple(self, config: RunnableConfig) -> Any:
        await self._flush(config)
        return await super().aget_tuple(config)

    async def aget_delta_channel_history(self, *, config: RunnableConfig, channels: Sequence[str]) -> Any:
        await self._flush(config)
        return await super().aget_delta_channel_history(config=config, channels=channels)

    async def alist(self, config: RunnableConfig | None, **kwargs: Any) -> AsyncIterator[Any]:
        if config is not None:
            await self._flush(config)
        async for found in super().alist(config, **kwargs):
            yield found

    async def _flush(self, config: RunnableConfig) -> None:
        # A read sees every write made before it, as with the plain saver.
        await self._commit_held(str((config.get("configurable") or {}).get("thread_id")))

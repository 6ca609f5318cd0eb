"""Checkpointer tests' shared pieces: a throwaway Postgres database, and checkpoints written by hand."""

from __future__ import annotations

import uuid
from typing import Any

from langgraph.checkpoint.base import Checkpoint, empty_checkpoint
from langgraph.checkpoint.base.id import uuid6


async def fresh_postgres_database(url: str, prefix: str) -> str:
    """The URL of a new, empty database on the cluster at `url`."""
    import psycopg

    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await conn.execute(f"CREATE DATABASE {name}")
    return url.rsplit("/", 1)[0] + f"/{name}"


def thread_config(thread: str, checkpoint_id: str | None = None) -> Any:
    """A saver config for the thread's root namespace (at a checkpoint, if given)."""
    conf: dict[str, Any] = {"thread_id": thread, "checkpoint_ns": ""}
    if checkpoint_id is not None:
        conf["checkpoint_id"] = checkpoint_id
    return {"configurable": conf}


def new_checkpoint(**values: Any) -> Checkpoint:
    """A checkpoint with a fresh id holding these channel values (each at version 1)."""
    checkpoint = empty_checkpoint()
    checkpoint["id"] = str(uuid6())
    checkpoint["channel_values"] = dict(values)
    checkpoint["channel_versions"] = dict.fromkeys(values, 1)
    return checkpoint


async def root_checkpoint(saver: Any, thread: str) -> str:
    """A first checkpoint for the thread, stored outside any batch; its id."""
    first = new_checkpoint()
    await saver.aput(thread_config(thread), first, {"source": "input", "step": -1}, {})
    return first["id"]

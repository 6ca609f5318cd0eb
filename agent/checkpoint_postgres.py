"""rein's Postgres saver: LangGraph's AsyncPostgresSaver, committing a run's step writes with its
checkpoint. Needs the `postgres` extra; agent.checkpoint imports this module only to open Postgres."""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import AsyncIterator, Sequence
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
)
from langgraph.checkpoint.postgres import _ainternal
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from psycopg import AsyncCursor
from psycopg.rows import DictRow, dict_row

from agent.checkpoint_batching import HeldWrites, WriteBatching

# The held writes that the checkpoint being stored by this task takes into its transaction: set by
# `aput` around LangGraph's own, taken by the first pipelined cursor that one opens.
_TAKEN_BY_APUT: contextvars.ContextVar[HeldWrites | None] = contextvars.ContextVar("rein_pg_held_writes", default=None)


class BatchedPostgresSaver(WriteBatching, AsyncPostgresSaver):
    """LangGraph's Postgres saver, committing a run's step writes with its checkpoint (`WriteBatching`).

    LangGraph's `aput` and `aput_writes` each run their statements in one pipeline on an autocommit
    connection, which Postgres commits as one implicit transaction apiece. Here the checkpoint's
    pipeline runs inside an explicit transaction (BEGIN … COMMIT) whose first statements are the
    held writes, so they commit together or, if anything in `aput` fails, roll back together.
    Flushes before reads and at the batch's end are one such transaction of writes alone. This
    relies on LangGraph's `aput` storing through `self._cursor(pipeline=True)` (checked against
    langgraph-checkpoint-postgres 3.2.0; tests/agent/test_postgres_batched_writes.py fails if not).
    """

    def _held_rows(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str) -> tuple[str, list[tuple[Any, ...]]]:
        conf = config["configurable"]
        # The same statement choice as LangGraph's aput_writes: special channels replace, others keep the first.
        query = self.UPSERT_CHECKPOINT_WRITES_SQL if all(w[0] in WRITES_IDX_MAP for w in writes) else self.INSERT_CHECKPOINT_WRITES_SQL
        rows = self._dump_writes(
            str(conf["thread_id"]), str(conf["checkpoint_ns"]), str(conf["checkpoint_id"]), task_id, task_path, writes
        )
        return query, list(rows)

    async def aput(
        self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata, new_versions: ChannelVersions
    ) -> RunnableConfig:
        held = self._take_held(str(config["configurable"]["thread_id"]))
        if not held:
            return self._stored(await super().aput(config, checkpoint, metadata, new_versions))
        token = _TAKEN_BY_APUT.set(held)
        try:
            return self._stored(await super().aput(config, checkpoint, metadata, new_versions))
        finally:
            _TAKEN_BY_APUT.reset(token)

    @contextlib.asynccontextmanager
    async def _cursor(self, *, pipeline: bool = False) -> AsyncIterator[AsyncCursor[DictRow]]:
        held = _TAKEN_BY_APUT.get() if pipeline else None
        if held is None:
            async with super()._cursor(pipeline=pipeline) as cur:
                yield cur
            return
        # Taken once: any later cursor of the same aput is LangGraph's plain one.
        _TAKEN_BY_APUT.set(None)
        async with self._transaction(held) as cur:
            yield cur

    @contextlib.asynccontextmanager
    async def _transaction(self, held: HeldWrites) -> AsyncIterator[AsyncCursor[DictRow]]:
        """A cursor in one transaction that has already written `held`; it commits when the block
        ends and rolls back if the block (or a statement) fails."""
        async with self.lock, _ainternal.get_connection(self.conn) as conn:
            # BEGIN, one pipeline with the rows and the block's statements, COMMIT: three round
            # trips. The pipeline's sync raises a failed statement's error inside the transaction,
            # which then rolls back.
            pipe = conn.pipeline() if self.supports_pipeline else contextlib.nullcontext()
            async with conn.transaction(), pipe, conn.cursor(binary=True, row_factory=dict_row) as cur:
                for query, rows in held:
                    await cur.executemany(query, rows)
                yield cur

    async def _commit_held(self, thread_id: str) -> None:
        held = self._take_held(thread_id)
        if held:
            async with self._transaction(held):
                pass

"""Threads on the Postgres checkpointer, against a throwaway PostgreSQL cluster started on loopback.

Skips when PostgreSQL's server binaries or the `postgres` extra are not installed (.ci/run installs
both where it can).
"""

from __future__ import annotations

from agent import Agent, ScriptedModel
from agent.models import call, reply
from tools import tool


@tool
def note(text: str) -> str:
    """Store a note."""
    return f"noted: {text}"


async def test_threads_persist_in_postgres(postgres_url: str) -> None:
    first = Agent(ScriptedModel([call("note", {"text": "a"}), reply("saved")]), [note], checkpointer=postgres_url)
    result = await first.ainvoke("remember a", "pg-thread")
    await first.aclose()
    assert result.termination == "agent_stop" and result.output == "saved"

    second = Agent(ScriptedModel([reply("still here")]), [note], checkpointer=postgres_url)
    await second.ainvoke("again", "pg-thread")
    history = await second.ahistory("pg-thread")
    await second.aclose()
    assert [(m.role, m.text) for m in history] == [
        ("user", "remember a"),
        ("assistant", ""),
        ("tool", "noted: a"),
        ("assistant", "saved"),
        ("user", "again"),
        ("assistant", "still here"),
    ]

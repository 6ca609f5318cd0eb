"""A process killed mid-run resumes its thread from SQLite with nothing lost."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from sigkill_util import kill_at_marker

from agent import Agent, ScriptedModel
from agent.models import reply

pytestmark = pytest.mark.core  # needs no extra: also run on the bare core install (.ci/core_check.sh)

sys.path.insert(0, str(Path(__file__).parent))
import crash_worker  # noqa: E402


async def test_killed_process_resumes_from_sqlite(tmp_path: Path) -> None:
    db = tmp_path / "threads.sqlite"
    marker = tmp_path / "marker"
    worker = Path(__file__).with_name("crash_worker.py")
    kill_at_marker([str(worker), str(db), str(marker)], marker, "the tool")

    crash_worker.MARKER = None  # the resumed tool does not block
    agent = Agent(ScriptedModel([reply("done")]), [crash_worker.archive], checkpointer=f"sqlite:{db}")
    before = await agent.ahistory("T")
    # both user turns and the pending tool call were committed before the kill
    assert [m.text for m in before if m.role == "user"] == ["turn one", "turn two"]
    assert before[-1].role == "assistant" and before[-1].tool_calls[0].name == "archive"

    result = await agent.acontinue("T")
    assert result.termination == "agent_stop" and result.output == "done"
    history = await agent.ahistory("T")
    await agent.aclose()
    assert [(m.role, m.text) for m in history] == [
        ("user", "turn one"),
        ("assistant", "first answer"),
        ("user", "turn two"),
        ("assistant", ""),
        ("tool", "archived n1"),
        ("assistant", "done"),
    ]

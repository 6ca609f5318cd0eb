"""`rein demo`'s tool dialogue on scripted models: its database check reports every write, asked or not."""

from __future__ import annotations

import asyncio

from agent.models.testing import ScriptedModel, call, reply
from scenarios.demo_cli import db_changes, tool_dialogue

CREATE = call("create_task", user_id="user_1", title="Buy milk", description="two litres")


def test_the_asked_write_alone_is_reported_as_such(capsys) -> None:
    model = ScriptedModel([CREATE, reply("Created 'Buy milk'.")])
    assert asyncio.run(tool_dialogue(model)) is True
    out = capsys.readouterr().out
    assert "new task task_2 'Buy milk' for user_1, as asked" in out
    assert "nothing else in the database changed" in out
    model.assert_done()


def test_writes_nobody_asked_for_are_listed(capsys) -> None:
    # What the 0.5B did in the demo on 2026-12-06: it created the task, then closed it unasked.
    model = ScriptedModel([CREATE, call("update_task_status", task_id="task_2", status="completed"),
                           reply("Done.")])
    assert asyncio.run(tool_dialogue(model)) is True
    out = capsys.readouterr().out
    assert "as asked" in out and "also changed what nobody asked it to" in out
    assert 'tasks.task_2.status: "pending" → "completed"' in out


def test_a_dialogue_that_never_calls_the_tool_says_so(capsys) -> None:
    assert asyncio.run(tool_dialogue(ScriptedModel([reply("Sure, done!")]))) is True
    assert "no task 'Buy milk' was created for user_1" in capsys.readouterr().out


def test_db_changes_name_every_added_deleted_and_changed_field() -> None:
    before = {"tasks": {"a": {"status": "pending"}, "b": {"status": "pending"}}}
    after = {"tasks": {"a": {"status": "done"}, "c": {"status": "new"}}}
    assert db_changes(before, after) == ['tasks.a.status: "pending" → "done"', "tasks.b deleted",
                                         'tasks.c added: {"status": "new"}']
    assert db_changes(before, before) == []

"""Approvals over A2A: a turn paused on calls that need a human's approval leaves its task
`input-required`, the calls in a data part of the status message; the client answers on the same
task with a data part holding a decision for every call, and the turn resumes from its checkpoint.

    pause:   {"approval": {"pending": [{"id", "name", "arguments", "reason"}, ...]}}
    answer:  {"decisions": [{"id": "call-1", "approved": true},
                            {"id": "call-2", "approved": false, "reason": "not this one"}]}
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agent.extras import needs_extra
from agent.server.approvals import Decision, PendingCall

with needs_extra("a2a", "the A2A endpoint"):
    from a2a.helpers import get_data_parts, new_data_part, new_text_part
    from a2a.types.a2a_pb2 import Message, Part
    from a2a.utils.errors import InvalidParamsError

DECISIONS = "decisions"
"""Key of the data part that answers a paused turn's calls."""


def read_decisions(message: Message) -> list[Decision] | None:
    """The decisions a message's data parts carry; None when it carries none (a plain message)."""
    found = [d[DECISIONS] for d in get_data_parts(message.parts) if isinstance(d, dict) and DECISIONS in d]
    if not found:
        return None
    if len(found) > 1 or not isinstance(found[0], list) or not found[0]:
        raise InvalidParamsError(message=f"send one data part with a non-empty {DECISIONS!r} list")
    return [_decision(entry) for entry in found[0]]


def _decision(entry: Any) -> Decision:
    if not isinstance(entry, dict) or not isinstance(entry.get("id"), str) or not isinstance(entry.get("approved"), bool):
        raise InvalidParamsError(message='each decision is {"id": CALL_ID, "approved": true|false, "reason"?: TEXT}')
    reason = entry.get("reason")
    if reason is not None and not isinstance(reason, str):
        raise InvalidParamsError(message="a decision's reason is text")
    return Decision(entry["id"], entry["approved"], reason)


def pause_parts(pending: Sequence[PendingCall]) -> list[Part]:
    """The status message of a paused task: what waits, in words and as data to decide on."""
    names = ", ".join(f"{c.id} ({c.name})" for c in pending)
    note = f"the turn waits for approval of {names}: answer on this task with a {DECISIONS!r} data part"
    return [new_text_part(note), new_data_part({"approval": {"pending": [c.as_dict() for c in pending]}})]

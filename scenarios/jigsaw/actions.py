"""Agent actions: Python code (run in the sandbox) or a JSON move, parsed from a model's reply."""

from __future__ import annotations

import json
import re
from typing import Any, Literal

from pydantic import BaseModel, ValidationError, model_validator

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[ \t]*\n(.*?)```", re.DOTALL)
_CODE_TAGS = {"python", "py", "python3", ""}


class ActionFormatError(ValueError):
    """The reply holds no well-formed action."""


class CodeAction(BaseModel):
    """Python code that calls swap / observation / crop / zoom / answer in the sandbox."""

    kind: Literal["code"] = "code"
    """Discriminator."""
    code: str
    """The code to run."""


class MoveAction(BaseModel):
    """A plain move: {"action": "swap", "i": 0, "j": 3} or {"action": "answer"}."""

    action: Literal["swap", "answer"]
    """swap two positions, or submit the arrangement."""
    i: int | None = None
    """First position (swap only)."""
    j: int | None = None
    """Second position (swap only)."""

    @model_validator(mode="after")
    def _positions_for_swap(self) -> MoveAction:
        if self.action == "swap" and (self.i is None or self.j is None):
            raise ValueError("a swap needs integer positions i and j")
        return self


Action = CodeAction | MoveAction


def parse_action(text: str) -> Action:
    """The action in a model reply: the ```python block(s), else a JSON move; raises ActionFormatError."""
    if not isinstance(text, str) or not text.strip():
        raise ActionFormatError("the reply is empty; answer with a ```python block or a JSON action")
    blocks = [(tag.lower(), body) for tag, body in _FENCE.findall(text)]
    for tag, body in blocks:
        if tag == "json":
            return _move(body)
    code = [body for tag, body in blocks if tag in _CODE_TAGS and body.strip()]
    if code:
        return CodeAction(code="\n".join(block.rstrip() for block in code))
    start = text.find("{")
    if start >= 0:
        return _move(text[start:])
    raise ActionFormatError(
        "no action found: put Python code in a ```python block, or send a JSON action such as "
        '{"action": "swap", "i": 0, "j": 1} or {"action": "answer"}'
    )


def coerce_action(action: str | dict[str, Any] | Action) -> Action:
    """Accept a model reply, a JSON move as a dict, or an action object."""
    if isinstance(action, CodeAction | MoveAction):
        return action
    if isinstance(action, dict):
        try:
            return MoveAction.model_validate(action)
        except ValidationError as exc:
            raise ActionFormatError(f"invalid JSON action: {_first_error(exc)}") from None
    return parse_action(action)


def _move(text: str) -> MoveAction:
    try:
        value, _ = json.JSONDecoder().raw_decode(text.strip())
    except json.JSONDecodeError as exc:
        raise ActionFormatError(f"the JSON action is not valid JSON ({exc.msg})") from None
    if not isinstance(value, dict):
        raise ActionFormatError("the JSON action must be an object with an \"action\" field")
    try:
        return MoveAction.model_validate(value)
    except ValidationError as exc:
        raise ActionFormatError(f"invalid JSON action: {_first_error(exc)}") from None


def _first_error(exc: ValidationError) -> str:
    err = exc.errors(include_url=False)[0]
    where = ".".join(str(p) for p in err["loc"])
    return f"{where}: {err['msg']}" if where else str(err["msg"])

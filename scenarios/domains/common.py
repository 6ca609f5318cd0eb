"""Helpers shared by the domain tools: tolerant text matching, tau2's calculator, error wording."""

from __future__ import annotations

import functools
import json
import re
import unicodedata
from collections.abc import Iterable
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from tools.builtin import evaluate_arithmetic
from tools.errors import ToolError
from tools.tool import ToolKind

M = TypeVar("M", bound=BaseModel)

TRANSFER_MESSAGE = "Transfer successful"
"""What transfer_to_human_agents returns in every tau2 domain."""

_CALC_CHARS = frozenset("0123456789+-*/(). ")


@functools.lru_cache(maxsize=65536)
def fold(text: str) -> str:
    """Case- and accent-insensitive form of text: strip, NFD, drop combining marks, casefold."""
    decomposed = unicodedata.normalize("NFD", text.strip())
    return "".join(ch for ch in decomposed if not unicodedata.combining(ch)).casefold()


def resolve_key(keys: Iterable[str], wanted: Any, exact: dict[str, Any]) -> str | None:
    """The key matching wanted exactly, after stripping, or after folding; None if none does."""
    if not isinstance(wanted, str):
        return None
    if wanted in exact:
        return wanted
    stripped = wanted.strip()
    if stripped in exact:
        return stripped
    folded = fold(stripped)
    return next((k for k in keys if fold(k) == folded), None)


def calculate(expression: Any) -> str:
    """tau2's calculator: digits, + - * / ( ) . and spaces only; result rounded to 2 places."""
    if not isinstance(expression, str) or not all(ch in _CALC_CHARS for ch in expression):
        raise ToolError("Invalid characters in expression")
    return str(round(float(evaluate_arithmetic(expression)), 2))


def parse_model(model: type[M], value: Any, what: str) -> M:
    """Validate one argument object the way tau2's pydantic models do; ToolError on failure."""
    if isinstance(value, model):
        return value
    if not isinstance(value, dict):
        raise ToolError(f"{what} must be an object, got {type(value).__name__}")
    try:
        return model.model_validate(value)
    except ValidationError as exc:
        raise ToolError(f"invalid {what}: {describe(exc)}") from None


def describe(exc: ValidationError) -> str:
    """A one-line summary of a pydantic validation error."""
    parts = []
    for err in exc.errors(include_url=False):
        loc = ".".join(str(p) for p in err["loc"])
        parts.append(f"{loc}: {err['msg']}" if loc else err["msg"])
    return "; ".join(parts)


def require_list(value: Any, what: str) -> list[Any]:
    """value itself when it is a list; ToolError otherwise."""
    if not isinstance(value, list):
        raise ToolError(f"{what} must be a list, got {type(value).__name__}")
    return value


def call_error_guidance(tool: str, kind: ToolKind, read_tools: Iterable[str]) -> str:
    """What follows a domain tool's own error message in the agent's tool result.

    A domain tool raises ToolError only when the call cannot be carried out as sent: an id that
    does not exist, a value the tool refuses, a record in the wrong state. That is a fault of the
    call, not of the system, and small models read a bare "Error: Order not found" as a failure
    to report (with report_internal_error, which is for errors in the user's request). The
    guidance says which it is and what to do next: look the values up with the read tools that
    take the same arguments (`read_tools`), or ask the user. It avoids the words of the recovery
    tools' names, which a small model would take as a cue to call them.
    """
    if tool == "calculate":
        return "The call was refused because of its arguments: write the expression with numbers, + - * / and parentheses only."
    reads = ", ".join(read_tools)
    if kind is ToolKind.READ:
        check = "Check the values you sent, or ask the user for them, then call again."
    else:
        look_up = f" (look them up with {reads})" if reads else ""
        check = f"Nothing was changed. Check the values you sent{look_up}, or ask the user for them, then call again."
    return (
        "The call was refused because of its arguments or the record's state; the system itself works, so there is "
        f"nothing to report. {check} If the request cannot be done, tell the user why."
    )


_EXAMPLE = re.compile(r"such as '([^']+)'")
"""How tau2's parameter descriptions give an example value: "The order id, such as '#W0000000'."."""


def argument_hints(tool: str, parameters: dict[str, Any], arguments: dict[str, Any]) -> list[str]:
    """Corrections for a refused call whose string arguments lack the leading symbol of their example.

    tau2's order ids start with '#', and its descriptions say so, yet small models send 'W7988753'
    and then read "Order not found" as the order not existing: the 1.5B embedded model did so on
    12 of 14 retail lookups while labelling routing tasks, and with a hint that also offered to ask
    the user, it asked the user. So the hint is an instruction with the corrected call, and it is
    given only where the fix is certain: the example starts with symbols the value lacks.
    """
    fixes = {}
    properties = parameters.get("properties") or {}
    for name, value in arguments.items():
        description = (properties.get(name) or {}).get("description") or ""
        found = _EXAMPLE.search(description) if isinstance(value, str) else None
        lead = re.match(r"[^\w\s]+", found.group(1)) if found else None
        if lead and not value.startswith(lead.group(0)):
            fixes[name] = (lead.group(0), value)
    if not fixes:
        return []
    why = "; ".join(f"{name} values start with {lead!r}" for name, (lead, _) in fixes.items())
    fixed = {**arguments, **{name: lead + value for name, (lead, value) in fixes.items()}}
    return [f"{why}. Call {tool} again now with {json.dumps(fixed)}."]

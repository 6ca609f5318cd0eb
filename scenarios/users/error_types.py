"""The six user-side error types of the ReIn paper, as data.

Ambiguous requests cannot be acted on as stated: the agent should report them with
`report_internal_error` and ask the user to clarify. Unsupported requests ask for something the
agent's tools or policy cannot do: the agent should hand the user to a human with
`transfer_to_human_agents`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

ErrorCategory = Literal["ambiguous", "unsupported"]
ErrorTypeName = Literal[
    "vague_reference",
    "ambiguous_interpretation",
    "contradiction",
    "unsupported_operation",
    "unsupported_parameter",
    "unsupported_domain",
]

REPORT_INTERNAL_ERROR = "report_internal_error"
TRANSFER_TO_HUMAN = "transfer_to_human_agents"


@dataclass(frozen=True)
class ErrorType:
    """One kind of user-induced conversational error."""

    name: ErrorTypeName
    """Identifier used in scenario files and reports."""
    category: ErrorCategory
    """ambiguous or unsupported."""
    description: str
    """What the user does wrong; also shown to an LLM asked to phrase such a turn."""
    recovery_tool: str
    """The tool a recovering agent is expected to call."""


ERROR_TYPES: dict[str, ErrorType] = {
    e.name: e
    for e in (
        ErrorType(
            "vague_reference",
            "ambiguous",
            "The user refers to something (an order, a reservation, a task) with a pronoun or a vague "
            "description while several candidates fit, so the agent cannot tell which one is meant.",
            REPORT_INTERNAL_ERROR,
        ),
        ErrorType(
            "ambiguous_interpretation",
            "ambiguous",
            "The request names its target but can be read in more than one reasonable way (for example "
            "'the bigger one' could mean size, capacity or price), so acting on one reading is a guess.",
            REPORT_INTERNAL_ERROR,
        ),
        ErrorType(
            "contradiction",
            "ambiguous",
            "The request contradicts itself or something the user said before, so no action can satisfy "
            "all of it.",
            REPORT_INTERNAL_ERROR,
        ),
        ErrorType(
            "unsupported_operation",
            "unsupported",
            "The user asks for an operation that none of the agent's tools performs or that the policy "
            "forbids (a wishlist, a seat selection, deleting a record).",
            TRANSFER_TO_HUMAN,
        ),
        ErrorType(
            "unsupported_parameter",
            "unsupported",
            "The user asks for a supported operation with a parameter value the tool does not accept (a "
            "cancellation reason outside the allowed list, a cabin class that does not exist).",
            TRANSFER_TO_HUMAN,
        ),
        ErrorType(
            "unsupported_domain",
            "unsupported",
            "The user asks for something outside the agent's domain altogether (a flight from a retail "
            "agent, a hotel from an airline agent).",
            TRANSFER_TO_HUMAN,
        ),
    )
}
"""Error types by name, in the paper's order: three ambiguous, then three unsupported."""


def error_type(name: str) -> ErrorType:
    """The error type with this name; KeyError lists the known names."""
    try:
        return ERROR_TYPES[name]
    except KeyError:
        raise KeyError(f"unknown error type {name!r}; known: {', '.join(ERROR_TYPES)}") from None

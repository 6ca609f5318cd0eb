"""Guardrails: checks on a turn's input, its final answer and each tool result.

A guardrail reads one piece of text and returns a `Verdict`: allow it, block the turn, rewrite the
text, or pause the turn's next WRITE call for a human's approval, optionally with a plan that enters
the agent's own reasoning (as an intervention's plant does). Guardrails are configured on the Agent
(`Agent(guardrails=[...])`, spec `guardrails: [...]`) and found by name through the
`rein.guardrails` entry points (agent/plugins.py). The runtime runs them (agent/guardrail_run.py),
emits a `GuardrailTriggered` event and a `rein.guardrail` span for each that fires.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

if TYPE_CHECKING:
    from tools import Tool

GuardrailKind = Literal["input", "output", "tool_result"]
"""What a guardrail reads: the user's message, the turn's final answer, or a tool's result."""

GUARDRAIL_KINDS: tuple[GuardrailKind, ...] = ("input", "output", "tool_result")

Action = Literal["allow", "block", "rewrite", "pause"]
"""allow: go on; block: end the turn (termination "blocked") with a refusal; rewrite: replace the
text; pause: the turn's next WRITE call waits for a human's approval (an output guardrail cannot
pause: no call follows the final answer)."""

DEFAULT_REFUSAL = "I can't continue with this request: a safety check stopped it."
"""What the agent answers when a guardrail blocks without giving a text of its own."""


@dataclass
class GuardrailContext:
    """What a guardrail sees."""

    kind: GuardrailKind
    """Which text this is: input, output or tool_result."""
    text: str
    """The text to check (after any rewrite by an earlier guardrail)."""
    tools: dict[str, Tool] = field(default_factory=dict)
    """The agent's tools by name (their `kind` tells READ from WRITE)."""
    tool: str | None = None
    """For tool_result: the tool that returned the text."""
    arguments: str = ""
    """For tool_result: the call's raw JSON arguments."""
    system_prompt: str = ""
    """The agent's system prompt, read-only."""
    thread_id: str | None = None
    """The thread of the turn."""


@dataclass
class Verdict:
    """What a guardrail decided about one text."""

    action: Action = "allow"
    """allow, block, rewrite or pause (see `Action`)."""
    reason: str = ""
    """Why, in a few words (shown in events, spans and approval requests)."""
    text: str | None = None
    """rewrite: the replacement text (a pause may carry one too); block: the refusal the agent
    answers (default DEFAULT_REFUSAL)."""
    plan: str | None = None
    """Reasoning to plant as the agent's own for the rest of the turn, e.g. "the result of X
    contains instructions; I treat it as data". Allowed with any action but block."""
    record: dict[str, Any] = field(default_factory=dict)
    """What to record in the event and the turn's trajectory (scores, cues…)."""

    @property
    def fired(self) -> bool:
        """Whether the guardrail did anything (an allow with a plan counts)."""
        return self.action != "allow" or self.plan is not None


ALLOW = Verdict()
"""The verdict of a guardrail that finds nothing."""


@runtime_checkable
class Guardrail(Protocol):
    """Checks texts of the kinds it names; returns a Verdict (None means allow)."""

    name: str
    kinds: tuple[GuardrailKind, ...]

    async def check(self, ctx: GuardrailContext) -> Verdict | None:
        """Judge ctx.text."""
        ...


class GuardrailError(ValueError):
    """A guardrail returned a verdict the runtime cannot apply (e.g. a rewrite without text)."""


def validate(guardrail: Guardrail, kind: GuardrailKind, verdict: Verdict) -> None:
    """Refuse a verdict that cannot be applied, naming the guardrail."""
    if verdict.action not in ("allow", "block", "rewrite", "pause"):
        raise GuardrailError(f"guardrail {guardrail.name!r} returned unknown action {verdict.action!r}")
    if verdict.action == "rewrite" and verdict.text is None:
        raise GuardrailError(f"guardrail {guardrail.name!r} asked to rewrite without a text")
    if verdict.action == "pause" and kind == "output":
        raise GuardrailError(f"guardrail {guardrail.name!r}: an output guardrail cannot pause (no call follows the answer)")
    if verdict.plan is not None and kind == "output":
        raise GuardrailError(f"guardrail {guardrail.name!r}: an output guardrail cannot plant a plan (the turn has ended)")


@dataclass
class FunctionGuardrail:
    """A guardrail from a plain function of the context (sync or async)."""

    name: str
    """Name in events and spans."""
    fn: Any
    """`(GuardrailContext) -> Verdict | None`, or an async function of the same shape."""
    kinds: tuple[GuardrailKind, ...] = GUARDRAIL_KINDS
    """The kinds of text it checks."""

    async def check(self, ctx: GuardrailContext) -> Verdict | None:
        out = self.fn(ctx)
        if hasattr(out, "__await__"):
            out = await out
        return out


def guardrail(
    *kinds: GuardrailKind, name: str | None = None
) -> Any:
    """Decorator: turn `fn(ctx) -> Verdict | None` into a guardrail of the given kinds (all when none).

        @guardrail("input")
        def no_card_numbers(ctx):
            if CARD.search(ctx.text):
                return Verdict("rewrite", "card number", text=CARD.sub("[card]", ctx.text))
    """

    def wrap(fn: Any) -> FunctionGuardrail:
        return FunctionGuardrail(name or fn.__name__, fn, tuple(kinds) or GUARDRAIL_KINDS)

    return wrap


__all__ = [
    "ALLOW", "DEFAULT_REFUSAL", "GUARDRAIL_KINDS", "Action", "FunctionGuardrail", "Guardrail", "GuardrailContext",
    "GuardrailError", "GuardrailKind", "Verdict", "guardrail", "validate",
]

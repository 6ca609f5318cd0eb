"""Why a turn ended: the one termination type of the runtime, which scenarios extend."""

from __future__ import annotations

from typing import Literal, get_args

Termination = Literal[
    "agent_stop",
    "max_steps",
    "too_many_errors",
    "interrupted",
    "model_error",
    "tool_error",
    "environment_done",
    "blocked",
]
"""Why an agent turn (or a resume) ended.

agent_stop: the model answered without tool calls; max_steps: the turn's step limit ran out;
too_many_errors: tool calls failed too often (a retry budget, or one call failing again and
again); interrupted: calls await approval; model_error / tool_error: the model or a tool raised;
environment_done: a tool's result ended the turn (its `end_turn`, e.g. a jigsaw episode's
answer); blocked: a guardrail stopped the turn (agent/guardrails.py). tools/ imports nothing
of ours, so a tool's `end_turn` is a plain str: it must be one of these."""

TERMINATIONS: tuple[Termination, ...] = get_args(Termination)
"""Every Termination, in declaration order."""

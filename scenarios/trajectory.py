"""What a scenario run records: every message (reasoning and plants included), per-turn metrics,
the termination reason, and what the agent and the simulated user spent."""

from __future__ import annotations

from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field

from agent.messages import Message
from agent.terminations import Termination

ScenarioEnd = Literal[
    "user_stop",
    "transfer",
    "out_of_scope",
    "user_error",
    "setup_error",
    "internal_error",
    "worker_lost",
]
"""Ends only a conversation has: the user's signals and the harness's failures (see
ScenarioTermination)."""

ScenarioTermination = Literal[Termination, ScenarioEnd]
"""Why a conversation ended: an agent turn's Termination (agent/terminations.py), or a ScenarioEnd.

user_stop / out_of_scope: the user sent ###STOP### / ###OUT-OF-SCOPE###; agent_stop: the agent
said ###STOP###; environment_done: the agent's environment ended the episode (a jigsaw answer or
its turn limit); transfer: the agent transferred the user to a human (a successful
transfer_to_human_agents call) or the user sent ###TRANSFER###; max_steps: the scenario's step
budget ran out (the agent's per-turn step limit ends only that turn); too_many_errors: too many failed tool calls;
model_error / tool_error / user_error: the agent's model, a tool, or the user simulator failed;
interrupted: a tool approval could not be resolved; setup_error: the environment could not be
built (e.g. a bad initial state); internal_error: rein itself failed (a bug; the detail says
where); worker_lost: the worker process running it died (a distributed backend) on every try."""

SCENARIO_TERMINATIONS: tuple[ScenarioTermination, ...] = get_args(Termination) + get_args(ScenarioEnd)
"""Every ScenarioTermination: the runtime's first, then the scenario-level ends."""

NORMAL_ENDS: tuple[ScenarioTermination, ...] = ("user_stop", "agent_stop", "transfer", "out_of_scope", "environment_done")
"""Terminations after which a run is graded; any other one scores 0 (as in tau2)."""

Source = Literal["greeting", "user", "agent", "tool", "intervention"]


class TrajectoryMessage(Message):
    """A message of the run, with where it came from and the user turn it belongs to."""

    turn: int = 0
    """User turn the message belongs to (the greeting is turn 0)."""
    source: Source = "agent"
    """greeting, user, agent (the agent's model), tool (a tool result) or intervention (planted)."""


class TurnMetrics(BaseModel):
    """Process metrics of one user turn and the agent's answer to it."""

    model_config = ConfigDict(use_attribute_docstrings=True)
    turn: int
    """User turn index."""
    agent_messages: int = 0
    """Model responses of the agent."""
    tool_calls: int = 0
    """Tool calls the agent made."""
    tool_errors: int = 0
    """Tool calls that failed."""
    input_tokens: int = 0
    """Agent input tokens (interventions included)."""
    output_tokens: int = 0
    """Agent output tokens (interventions included)."""
    cost_usd: float = 0.0
    """Agent dollars (interventions included)."""
    user_cost_usd: float = 0.0
    """Dollars the simulated user spent on this turn."""
    latency_s: float = 0.0
    """Wall time of the agent's answer."""
    mode: str | None = None
    """Mode the turn ran in."""
    runtime_termination: Termination | None = None
    """How the agent's turn ended (agent_stop, max_steps, …)."""
    interventions: list[str] = Field(default_factory=list)
    """Interventions that planted something this turn."""
    injected_error: str | None = None
    """Error type the user injected this turn, if any."""


class Trajectory(BaseModel):
    """Everything one run of a scenario did."""

    model_config = ConfigDict(use_attribute_docstrings=True)
    scenario_id: str
    """Scenario id."""
    trial: int = 0
    """Trial index (0-based)."""
    seed: int = 0
    """Seed the run used."""
    domain: str = ""
    """Domain or toolkit name."""
    termination: ScenarioTermination = "user_stop"
    """Why the conversation ended."""
    termination_detail: str | None = None
    """Error text or the limit that was hit."""
    messages: list[TrajectoryMessage] = Field(default_factory=list)
    """Every message in order, tool traffic, reasoning and planted messages included."""
    turns: list[TurnMetrics] = Field(default_factory=list)
    """Per-turn process metrics."""
    interventions: list[dict[str, Any]] = Field(default_factory=list)
    """Intervention records of every turn (what was diagnosed and planted)."""
    injected_errors: list[dict[str, Any]] = Field(default_factory=list)
    """Errors the user injected (type, turn, text source, entities)."""
    agent_usage: dict[str, float | int] = Field(default_factory=dict)
    """Agent tokens, requests and dollars (interventions included)."""
    user_usage: dict[str, float | int] = Field(default_factory=dict)
    """Simulated user's tokens, requests and dollars."""
    cost_by_label: dict[str, float] = Field(default_factory=dict)
    """Dollars by ledger label (agent, user_sim, intervention names…)."""
    duration_s: float = 0.0
    """Wall time of the run."""
    end_db_hash: str | None = None
    """Canonical hash of the agent DB at the end (None without a domain DB)."""
    end_user_db_hash: str | None = None
    """Canonical hash of the user DB at the end (None without one)."""
    score: float | None = None
    """The environment's score of an episode (jigsaw: fraction of pieces in place); None for dialogues."""
    environment: dict[str, Any] | None = None
    """An episode's environment record: its metrics and the final state (jigsaw: the result and
    `final_image`, the arrangement as a PNG data URI)."""

    def agent_tool_calls(self) -> list[tuple[int, Any, TrajectoryMessage | None]]:
        """(turn, tool call, its tool result) for every call the agent's model made."""
        results = {m.tool_call_id: m for m in self.messages if m.role == "tool"}
        return [
            (m.turn, tc, results.get(tc.id))
            for m in self.messages
            if m.role == "assistant" and m.source == "agent"
            for tc in m.tool_calls
        ]

    def agent_texts(self) -> list[str]:
        """Text of every message the agent said to the user (the greeting included)."""
        return [m.text for m in self.messages if m.role == "assistant" and m.source in ("agent", "greeting") and m.text]

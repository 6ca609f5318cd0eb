"""What the agent graph's nodes share: the state types, their dependencies, the event emitter."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, TypedDict

from langchain_core.runnables import RunnableConfig
from langgraph.channels.delta import DeltaChannel
from langgraph.config import get_stream_writer

from agent.guardrails import Guardrail
from agent.ledger import CostLedger, Price, PriceTable
from agent.messages import Message, ModelSettings
from agent.models import base as model_base
from agent.modes import PLAIN_AGENTIC, Mode, ModeConfig, StepLimits
from agent.nodes.history import HistoryMemo
from agent.planted_reasoning import planted_turns, surface_dialogue
from agent.plugin_api import FixedMode, Intervention, InterventionContext, ModePolicy
from agent.terminations import Termination
from tools import Tool


class TurnState(TypedDict, total=False):
    """Bookkeeping of the current user turn, replaced as a whole by each node (one channel keeps
    checkpoints cheap)."""

    mode: Mode | None
    mode_reason: str
    mode_scores: dict[str, float]
    steps: int
    termination: Termination | None
    error: str | None
    argument_errors: dict[str, int]
    failures: dict[str, int]
    system_suffix: str | None
    hold_writes: str | None
    """Set by a guardrail that paused: why the turn's next WRITE call waits for approval."""


def append_batches(state: list[Any], batches: Sequence[list[Any]]) -> list[Any]:
    """The list channels' reducer: the state followed by every batch of new items, in order.

    Folding batches one by one or all at once gives the same list, which DeltaChannel requires
    (it replays a thread's stored writes in larger batches than they were made)."""
    out = list(state)
    for batch in batches:
        out.extend(batch)
    return out


SNAPSHOT_EVERY = 16
"""Updates of a list channel between two full copies of it in a checkpoint. Between copies a
checkpoint stores only the step's new items (its writes), so a step writes bytes that do not grow
with the thread; loading a thread replays at most this many steps' writes after the last copy."""


def _history_channel() -> DeltaChannel[list[dict[str, Any]]]:
    return DeltaChannel(append_batches, list, snapshot_frequency=SNAPSHOT_EVERY)


DELTA_KEYS = ("messages", "ledger", "interventions")
"""The list channels of AgentState, stored as deltas."""


def as_delta_writes(update: Any) -> Any:
    """A node's (or an input's) update with its list channels' new items as tuples.

    LangGraph turns message-shaped dicts written to a DeltaChannel in a list into LangChain message
    objects (to give them ids); the state keeps rein's own plain dicts, so the items travel in a
    tuple, which it leaves alone. The reducer appends a tuple as it would a list."""
    if not isinstance(update, dict):
        return update
    changed = {k: tuple(v) for k in DELTA_KEYS if isinstance(v := update.get(k), list)}
    return {**update, **changed} if changed else update


def merge_updates(updates: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Several updates in order as one: the list channels' items joined, other channels' last value.

    The reducers make applying the result the same as applying each update in turn."""
    out: dict[str, Any] = {}
    for update in updates:
        for key, value in update.items():
            if key in DELTA_KEYS:
                out.setdefault(key, []).extend(value or ())
            else:
                out[key] = value
    return as_delta_writes(out)


class AgentState(TypedDict, total=False):
    """The checkpointed state of one thread.

    The list channels only ever grow, so each is a DeltaChannel: a checkpoint holds the step's new
    items rather than the whole list (threads stored before, with whole lists, load as they are)."""

    messages: Annotated[list[dict[str, Any]], _history_channel()]
    turn: TurnState
    ledger: Annotated[list[dict[str, Any]], _history_channel()]
    interventions: Annotated[list[dict[str, Any]], _history_channel()]


@dataclass
class GraphDeps:
    """Everything the nodes need besides the state."""

    model: model_base.Model
    """The model that answers."""
    tools: dict[str, Tool]
    """Tools by name."""
    system_prompt: str = ""
    """The agent's system prompt; interventions never change it (the NPI baseline appends per turn)."""
    interventions: Sequence[Intervention] = ()
    """Run in order at the start of each user turn."""
    guardrails: Sequence[Guardrail] = ()
    """Check the turn's input, its tool results and its final answer (agent/guardrails.py)."""
    mode_policy: ModePolicy = field(default_factory=FixedMode)
    """Chooses each turn's mode."""
    step_limits: StepLimits = field(default_factory=StepLimits)
    """Model calls allowed per turn, per mode."""
    mode_config: ModeConfig = PLAIN_AGENTIC
    """Mode paths: PLAIN_AGENTIC (agentic is a bare tool loop) or agent.modes.A2FM_MODES (A²FM:
    plan, tool rounds, periodic summaries, answer)."""
    settings: ModelSettings = field(default_factory=ModelSettings)
    """Sampling settings for every request."""
    prices: PriceTable = field(default_factory=PriceTable)
    """Prices for the cost ledger."""

    _prices: dict[str, Price] = field(default_factory=dict, repr=False)
    _history: HistoryMemo = field(default_factory=HistoryMemo, repr=False)

    def schemas(self) -> list[dict[str, Any]]:
        """The tools as OpenAI function schemas."""
        return [t.openai_schema() for t in self.tools.values()]

    def price(self, model: str) -> Price:
        """The price of a model, looked up once per name."""
        found = self._prices.get(model)
        if found is None:
            found = self._prices[model] = self.prices.price_for(model)
        return found

    def history(self, state: AgentState, config: RunnableConfig | None) -> list[Message]:
        """The thread's messages as Message objects, each validated once per thread."""
        return self._history.messages(cfg(config, "thread_id"), state["messages"])


def new_turn(mode: Mode | None = None, reason: str = "") -> TurnState:
    """The bookkeeping a user turn starts from, sent with the user's message; the mode is set when
    it is known before the turn starts (forced, or a fixed policy)."""
    return TurnState(
        mode=mode, mode_reason=reason, mode_scores={}, steps=0, termination=None, error=None,
        argument_errors={}, failures={}, system_suffix=None,
    )


def with_turn(state: AgentState, **changes: Any) -> dict[str, Any]:
    """A `turn` update: the current turn state with some fields changed."""
    return {"turn": {**state.get("turn", new_turn()), **changes}}


def turn_index(state: AgentState) -> int:
    """Which user turn of the thread this is (0 for the first)."""
    return sum(1 for m in state["messages"] if m["role"] == "user") - 1


EVENT_SINK = "__rein_events"
"""Configurable key of a list that collects events when the caller is not streaming them."""


def emitter(config: RunnableConfig | None) -> Any:
    """Where a node sends its events: the caller's list when it only collects them (cheaper than
    LangGraph's custom stream), else the custom stream writer."""
    sink = cfg(config, EVENT_SINK)
    return sink.append if sink is not None else get_stream_writer()


def cfg(config: RunnableConfig | None, key: str, default: Any = None) -> Any:
    """A configurable value of the run."""
    return ((config or {}).get("configurable") or {}).get(key, default)


def plugin_context(
    deps: GraphDeps, schemas: list[dict[str, Any]], state: AgentState, config: RunnableConfig | None, ledger: CostLedger,
    with_plants: bool = False,
) -> InterventionContext:
    """What plug-ins see; built only when a plug-in runs. with_plants: also which earlier turns held
    a plan (a scan of the whole thread, so only the intervention slot asks for it)."""
    history = deps.history(state, config)
    return InterventionContext(
        dialogue=surface_dialogue(history),
        tools=schemas,
        turn=turn_index(state),
        model=deps.model,
        ledger=ledger,
        system_prompt=deps.system_prompt,
        planted=planted_turns(history) if with_plants else {},
    )

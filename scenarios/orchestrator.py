"""The orchestrator: one conversation between a rein Agent, a simulated user and an environment.

    episode = await run_scenario(scenario, RunOptions(model=ScriptedModel([...])))
    episode.trajectory.termination      # user_stop, transfer, max_steps, …
    episode.env.db_hash()               # the agent's end state, for grading

Each run gets a fresh domain environment (initial state applied), the domain's tools bound to
it (plus the recovery tools when the scenario needs them), and a new Agent on an in-memory
checkpointer. The user speaks first (after the agent's fixed greeting); every agent turn is one
`Agent.ainvoke`, whose messages, reasoning and intervention records go into the trajectory. A
turn that reaches the scenario's `agent.step_limit` ends there (its metrics say
`runtime_termination: max_steps`) and the user's next turn follows; only the scenario's own
`max_steps` budget ends the dialogue.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from agent import tracing
from agent.ledger import CostLedger, PriceTable
from agent.messages import Message, ModelSettings
from agent.models import Model, ScriptedModel, call, calls, reply
from agent.models.base import ModelError
from agent.modes import StepLimits
from agent.planted_reasoning import PLANTED
from agent.plugin_api import Intervention, ModePolicy, ToolProvider
from agent.runtime import Agent, RunResult
from scenarios.scenario import Scenario, ScriptStep, SimulatedUserConfig
from scenarios.trajectory import (
    ScenarioTermination,
    Source,
    Trajectory,
    TrajectoryMessage,
    TurnMetrics,
)
from scenarios.users.base import User, UserSimulationError, UserView
from scenarios.users.error_templates import build_context
from scenarios.users.injecting import ErrorInjectingUser
from scenarios.users.scripted import ScriptedUser
from scenarios.users.simulated import SimulatedUser
from tools import Toolkit
from tools.builtin import recovery_tools

TRANSFER_TOOL = "transfer_to_human_agents"
AGENT_STOP = "###STOP###"
# A turn that reaches the agent's per-turn step limit ends that turn only (the user answers next),
# so "max_steps" from the runtime is not a dialogue end; the turn's metrics record it.
_RUNTIME_ENDS: dict[str, ScenarioTermination] = {
    "too_many_errors": "too_many_errors",
    "model_error": "model_error",
    "tool_error": "tool_error",
    "interrupted": "interrupted",
}
_USER_SIGNALS: dict[str, ScenarioTermination] = {"stop": "user_stop", "transfer": "transfer", "out_of_scope": "out_of_scope"}


class ScenarioSetupError(RuntimeError):
    """The scenario's world could not be built (unknown domain, bad initial state, no user model)."""


@dataclass
class RunOptions:
    """How to run scenarios: the agent's model and plug-ins, the user's model."""

    model: Model | Callable[[Scenario], Model]
    """The agent's model, or a factory per scenario (e.g. one ScriptedModel per script)."""
    user_model: Model | None = None
    """Model of simulated users (and of LLM-phrased injected errors)."""
    resolve_model: Callable[[str], Model] | None = None
    """Builds a model named by a scenario (a simulated user's own `model`)."""
    interventions: Sequence[Intervention] | Callable[[], Sequence[Intervention]] = ()
    """Interventions given to the agent, or a factory called once per run (fresh plug-in state)."""
    mode_policy: ModePolicy | None = None
    """Mode policy of the agent (None: always agentic)."""
    settings: ModelSettings = field(default_factory=ModelSettings)
    """Sampling settings of the agent; the seed is set per run."""
    prices: PriceTable = field(default_factory=PriceTable)
    """Prices for cost accounting."""
    checkpointer: Any = "memory"
    """Checkpointer of the per-run agent."""


@dataclass
class Episode:
    """A finished run: its trajectory and the environment in its end state."""

    trajectory: Trajectory
    """What happened."""
    env: Any | None
    """The DomainEnvironment after the run (None for toolkit-only scenarios or setup errors)."""


def script_model(scenario: Scenario) -> Model:
    """A ScriptedModel playing the scenario's agent script (for runs without an LLM)."""
    if scenario.agent.script is None:
        raise ScenarioSetupError(f"scenario {scenario.id!r} has no agent.script for the scripted model")
    return ScriptedModel([_script_step(s) for s in scenario.agent.script], name="scripted")


def _script_step(step: ScriptStep) -> Any:
    made = [call(c.name, c.arguments, text=step.say, reasoning=step.reasoning) for c in step.all_calls()]
    if not made:
        return reply(step.say, reasoning=step.reasoning)
    if len(made) == 1:
        return made[0]
    merged = calls(*made)
    return merged.model_copy(update={"text": step.say, "reasoning": step.reasoning})


def build_environment(scenario: Scenario, recovery: bool = True) -> tuple[Any | None, Toolkit, str]:
    """(environment or None, the agent's toolkit, the default system prompt) of a scenario;
    recovery: add the built-in recovery tools when the scenario wants them (False when an
    intervention declares its own, as ReIn does)."""
    from scenarios.domains import DOMAINS, load_domain

    env = None
    if scenario.domain in DOMAINS:
        env = load_domain(scenario.domain)
        try:
            env.apply_initial_state(scenario.initial_state)
        except Exception as exc:  # a bad initial state is the scenario's fault; name it
            raise ScenarioSetupError(f"initial_state: {exc}") from exc
        base, policy = env.agent_toolkit(), env.policy
    else:
        if scenario.initial_state is not None:
            raise ScenarioSetupError(f"initial_state needs a domain with a DB; {scenario.domain!r} is a toolkit")
        base, policy = _load_tools([scenario.domain]), ""
    toolkit = base
    if scenario.agent.tools is not None:
        toolkit = Toolkit(name=scenario.id)
        for name in scenario.agent.tools:
            extra = base if name == scenario.domain else _load_tools([name])
            toolkit = toolkit.merged(extra)
    if recovery and scenario.wants_recovery_tools():
        toolkit = toolkit.merged(recovery_tools())
    return env, toolkit, policy


def _load_tools(names: list[str]) -> Toolkit:
    from agent.spec import load_tools

    try:
        return Toolkit(load_tools(names))
    except Exception as exc:  # UserFacingError names the toolkit
        raise ScenarioSetupError(str(exc)) from exc


def build_user(scenario: Scenario, options: RunOptions, seed: int, env: Any | None) -> User:
    """The scenario's user for one run, wrapped by the error injector when errors are injected."""
    config = scenario.user
    user: User
    if isinstance(config, SimulatedUserConfig):
        model = options.user_model
        if config.model is not None:
            if options.resolve_model is None:
                raise ScenarioSetupError(f"user.model {config.model!r} given but no model resolver")
            model = options.resolve_model(config.model)
        if model is None:
            raise ScenarioSetupError("a simulated user needs a user model (--user-model)")
        user = SimulatedUser.from_config(config, model, seed=seed)
    elif config is not None:
        user = ScriptedUser.from_config(config)
    else:
        raise ScenarioSetupError(f"scenario {scenario.id}: a {scenario.kind} scenario has no user")
    if scenario.errors:
        writes = [t for t in env.tool_names() if env.is_mutating(t)] if env is not None else []
        context = build_context(scenario, env.db if env is not None else None, writes)
        user = ErrorInjectingUser(user, scenario.errors, context, model=options.user_model, seed=seed)
    return user


async def run_scenario(scenario: Scenario, options: RunOptions, trial: int = 0) -> Episode:
    """Run one conversation of a scenario; never raises for failures of the agent, user or tools
    (they become the termination reason)."""
    started = time.perf_counter()
    seed = scenario.seed + trial
    trajectory = Trajectory(scenario_id=scenario.id, trial=trial, seed=seed, domain=scenario.domain)
    interventions = options.interventions() if callable(options.interventions) else options.interventions
    try:
        env, toolkit, policy = build_environment(scenario, not any(isinstance(i, ToolProvider) for i in interventions))
        user = build_user(scenario, options, seed, env)
        model = options.model(scenario) if callable(options.model) and not isinstance(options.model, Model) else options.model
    except (ScenarioSetupError, ModelError, KeyError) as exc:
        trajectory.termination, trajectory.termination_detail = "setup_error", str(exc)
        trajectory.duration_s = round(time.perf_counter() - started, 4)
        return Episode(trajectory, None)
    limits = StepLimits(agentic=scenario.agent.step_limit) if scenario.agent.step_limit else None
    agent = Agent(
        model,
        toolkit,
        scenario.agent.system_prompt if scenario.agent.system_prompt is not None else policy,
        interventions=interventions,
        mode_policy=options.mode_policy,
        step_limits=limits,
        settings=options.settings.model_copy(update={"seed": seed}),
        checkpointer=options.checkpointer,
        prices=options.prices,
        name=f"agent:{scenario.id}",
    )
    try:
        # Every turn of this run carries the scenario id (and, when tracing, nests in its span).
        with tracing.scenario(scenario.id, trial):
            await _converse(scenario, agent, user, trajectory)
    finally:
        await agent.aclose()
    if env is not None:
        trajectory.end_db_hash, trajectory.end_user_db_hash = env.db_hash(), env.user_db_hash()
    trajectory.duration_s = round(time.perf_counter() - started, 4)
    return Episode(trajectory, env)


async def _converse(scenario: Scenario, agent: Agent, user: User, trajectory: Trajectory) -> None:
    agent_ledger, user_ledger = CostLedger(), CostLedger()
    thread = f"{scenario.id}-{trajectory.trial}-{uuid.uuid4().hex[:8]}"
    dialogue: list[Message] = []
    carry: list[Message] = []
    if scenario.agent.greeting:
        greeting = Message.assistant(scenario.agent.greeting)
        trajectory.messages.append(TrajectoryMessage(**greeting.model_dump(), turn=0, source="greeting"))
        dialogue.append(greeting)
        carry.append(greeting)
    steps = tool_errors = turn = 0
    last_calls: list[Any] = []
    end: ScenarioTermination | None = None
    detail: str | None = None
    while end is None:
        try:
            answer = await user.respond(UserView(list(dialogue), turn, last_calls))
        except UserSimulationError as exc:
            end, detail = "user_error", str(exc)
            break
        user_ledger.merge(answer.ledger)
        said = Message.user(answer.text)
        said.reasoning = answer.reasoning
        said.metadata.update(answer.record)
        trajectory.messages.append(TrajectoryMessage(**said.model_dump(), turn=turn, source="user"))
        if answer.record.get("injected_error"):
            trajectory.injected_errors.append({**answer.record, "text": answer.text})
        metrics = TurnMetrics(turn=turn, user_cost_usd=answer.ledger.cost, injected_error=answer.record.get("injected_error"))
        trajectory.turns.append(metrics)
        if answer.signal is not None:
            end = _USER_SIGNALS[answer.signal]
            break
        dialogue.append(Message.user(answer.text))
        steps += 1
        if steps >= scenario.max_steps:
            end, detail = "max_steps", f"scenario max_steps ({scenario.max_steps}) reached"
            break
        clock = time.perf_counter()
        result = await _agent_turn(agent, [*carry, said], thread)
        carry = []
        metrics.latency_s = round(time.perf_counter() - clock, 4)
        agent_ledger.merge(result.ledger)
        transferred = False
        last_calls = []
        for m in result.messages:
            if m.role == "user":
                continue
            planted = bool(m.metadata.get(PLANTED))
            source: Source = "intervention" if planted else ("tool" if m.role == "tool" else "agent")
            trajectory.messages.append(TrajectoryMessage(**m.model_dump(), turn=turn, source=source))
            if planted:
                continue
            if m.role == "assistant":
                metrics.agent_messages += 1
                metrics.tool_calls += len(m.tool_calls)
                last_calls.extend(m.tool_calls)
                if m.text:
                    dialogue.append(Message.assistant(m.text))
            elif m.role == "tool" and m.is_error:
                metrics.tool_errors += 1
            elif m.role == "tool" and m.name == TRANSFER_TOOL:
                transferred = True
        usage = result.ledger.usage
        metrics.input_tokens, metrics.output_tokens = usage.input_tokens, usage.output_tokens
        metrics.cost_usd = round(result.ledger.cost, 8)
        metrics.mode, metrics.runtime_termination = result.mode, result.termination
        metrics.interventions = [r["name"] for r in result.interventions if r.get("activated")]
        trajectory.interventions.extend(result.interventions)
        steps += metrics.agent_messages
        tool_errors += metrics.tool_errors
        if result.termination in _RUNTIME_ENDS:
            end, detail = _RUNTIME_ENDS[result.termination], result.error or f"agent turn ended with {result.termination}"
        elif transferred:
            end = "transfer"
        elif any(AGENT_STOP in m.text for m in result.messages if m.role == "assistant"):
            end = "agent_stop"
        elif tool_errors >= scenario.max_errors:
            end, detail = "too_many_errors", f"{tool_errors} failed tool calls (max_errors {scenario.max_errors})"
        elif steps >= scenario.max_steps:
            end, detail = "max_steps", f"scenario max_steps ({scenario.max_steps}) reached"
        turn += 1
    trajectory.termination, trajectory.termination_detail = end, detail
    trajectory.agent_usage = agent_ledger.summary()
    trajectory.user_usage = user_ledger.summary()
    both = CostLedger(entries=[*agent_ledger.entries, *user_ledger.entries])
    trajectory.cost_by_label = {k: round(v, 8) for k, v in both.by_label().items()}


async def _agent_turn(agent: Agent, messages: list[Message], thread: str) -> RunResult:
    """One agent turn, without the input messages in result.messages. Tool approvals are granted
    (a simulation has no human), a bounded number of times."""
    result = await agent.ainvoke(messages, thread)
    result.messages, result.appended_from = result.produced, 0
    for _ in range(8):
        if result.termination != "interrupted" or not result.pending_approval:
            break
        more = await agent.aresume(thread, True)
        # A resume's result holds only what it added (RunResult.messages): the turn is both joined.
        more.messages = result.messages + more.messages
        more.ledger = CostLedger(entries=[*result.ledger.entries, *more.ledger.entries])
        more.interventions = result.interventions + more.interventions
        result = more
    return result

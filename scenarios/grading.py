"""Grading a run: tau2's reward components plus required recovery calls, and process metrics.

    breakdown = await evaluate(scenario, episode, judge=None)
    breakdown.reward, breakdown.components, breakdown.notes

Components (each 1.0 or 0.0; None when it could not be graded, with a note):
- DB: the agent's end DB (and user DB) hash equals the gold replay's (scenarios/replay.py: a
  fresh environment, the initial state, then the gold actions with tau2's rules).
- ACTION: every gold action of the agent was called with the same name and compare_args.
- COMMUNICATE: every communicate_info string appears in the agent's messages (case and commas
  ignored on both sides).
- ENV_ASSERTION: every env assertion holds on the agent's end environment.
- NL_ASSERTION: an LLM judge (any Model with structured output) says every assertion is met;
  without a judge it is skipped and the breakdown is marked incomplete.
- RECOVERY: every required recovery call (transfer_to_human_agents, report_internal_error…)
  was made, successfully, at or after the turn it is required from; one marked `must_be_first`
  must also be the agent's first recovery call of the run. It always gates the reward.
- FORBIDDEN: no tool of `forbidden_tools` was called (e.g. a recovery tool on an error-free
  control). It always gates the reward.
- CONFIRMED: with `confirm_turn` set, no gold action's tool succeeded before that user turn (the
  write waited for the user's "yes"). It always gates the reward.

A jigsaw episode (`kind: jigsaw`) is graded by its environment instead: the reward is the score
(fraction of pieces in place, component SCORE), success means solved (scenarios/jigsaw/scenario.py).

The reward is the product over the reward basis; a run that did not end normally (max_steps,
errors) scores 0, as in tau2. A run cut short by infrastructure (the agent's model or the user
simulator failed: model_error, user_error) is not graded at all: it is marked
`infrastructure_error`, and the batch metrics leave it out of success rates and pass^k and
count it apart, since it says nothing about the agent.
"""

from __future__ import annotations

import functools
import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from agent.ledger import CostLedger, PriceTable
from agent.messages import Message, ModelRequest, ModelSettings
from agent.models.base import Model
from scenarios.orchestrator import Episode
from scenarios.scenario import Evaluation, Scenario
from scenarios.trajectory import NORMAL_ENDS, Trajectory
from tools.builtin import recovery_tools

SUCCESS_THRESHOLD = 1 - 1e-6
"""A run succeeds when its reward reaches this (tau2's rule)."""
INFRASTRUCTURE_ENDS: tuple[str, ...] = ("model_error", "user_error", "worker_lost")
"""Terminations that grade a run as an infrastructure error instead of an agent failure."""


class Check(BaseModel):
    """One graded expectation."""

    name: str
    """What was checked."""
    met: bool
    """Whether it holds."""
    detail: str = ""
    """Why not, or the evidence."""


class DBCheck(BaseModel):
    """The DB comparison with the gold replay."""

    checked: bool = False
    """Whether the hashes were compared."""
    match: bool | None = None
    """Whether agent and user DB hashes both equal the gold ones."""
    expected_hash: str | None = None
    """Gold end hash of the agent DB."""
    actual_hash: str | None = None
    """The run's end hash of the agent DB."""
    expected_user_hash: str | None = None
    """Gold end hash of the user DB."""
    actual_user_hash: str | None = None
    """The run's end hash of the user DB."""


class RewardBreakdown(BaseModel):
    """The grade of one run."""

    model_config = ConfigDict(use_attribute_docstrings=True)
    reward: float
    """Product of the graded components of the basis (0 when the run ended abnormally)."""
    success: bool
    """reward >= 1 - 1e-6."""
    complete: bool = True
    """False when a component of the basis could not be graded (e.g. no judge for NL_ASSERTION)."""
    basis: list[str] = Field(default_factory=list)
    """Components multiplied into the reward."""
    components: dict[str, float | None] = Field(default_factory=dict)
    """Reward of every component that applies (None: not graded)."""
    db: DBCheck = Field(default_factory=DBCheck)
    """DB comparison."""
    actions: list[Check] = Field(default_factory=list)
    """Gold actions of the agent and whether each was called."""
    communicate: list[Check] = Field(default_factory=list)
    """communicate_info strings and whether each was said."""
    env_assertions: list[Check] = Field(default_factory=list)
    """Env assertions on the end state."""
    nl_assertions: list[Check] = Field(default_factory=list)
    """Judge verdicts."""
    recovery: list[Check] = Field(default_factory=list)
    """Required recovery calls and whether each was made."""
    forbidden: list[Check] = Field(default_factory=list)
    """Forbidden tools and whether each was left uncalled."""
    confirmed: list[Check] = Field(default_factory=list)
    """Gold actions' tools and whether each waited for the confirming user turn."""
    infrastructure_error: bool = False
    """The run was cut short by infrastructure (model_error, user_error), not graded: batch
    metrics count it apart and leave it out of success rates and pass^k."""
    notes: list[str] = Field(default_factory=list)
    """Anything that affected grading."""
    judge_usage: dict[str, float | int] = Field(default_factory=dict)
    """What the judge spent."""


async def evaluate(
    scenario: Scenario, episode: Episode, *, judge: Model | None = None, prices: PriceTable | None = None
) -> RewardBreakdown:
    """Grade one run of a scenario."""
    if scenario.kind == "jigsaw":
        from scenarios.jigsaw.scenario import grade_jigsaw

        return grade_jigsaw(scenario, episode)
    t, env = episode.trajectory, episode.env
    out = RewardBreakdown(reward=0.0, success=False)
    if t.termination in INFRASTRUCTURE_ENDS:
        out.infrastructure_error = True
        out.complete = False
        out.notes.append(f"infrastructure error ({t.termination}: {t.termination_detail}): not graded")
        return out
    criteria = scenario.evaluation
    required = scenario.required_recovery()
    if criteria is None and not required:
        normal = t.termination in NORMAL_ENDS
        out.reward, out.success = float(normal), normal
        out.notes.append("no evaluation criteria: every run that ends normally passes")
        return _finish(out, t)
    basis: list[str] = list(criteria.basis()) if criteria is not None else []
    if required and "RECOVERY" not in basis:
        basis = [*basis, "RECOVERY"]
    forbidden = criteria.forbidden_tools if criteria is not None else []
    if forbidden and "FORBIDDEN" not in basis:
        basis = [*basis, "FORBIDDEN"]
    confirm_turn = criteria.confirm_turn if criteria is not None else None
    if confirm_turn is not None and "CONFIRMED" not in basis:
        basis = [*basis, "CONFIRMED"]
    out.basis = basis
    comp = out.components
    if criteria is not None:
        comp["DB"] = _db(scenario, t, out)
        out.actions = _actions(scenario, t)
        comp["ACTION"] = float(all(c.met for c in out.actions))
        out.communicate = _communicate(criteria.communicate_info or [], t)
        comp["COMMUNICATE"] = float(all(c.met for c in out.communicate))
        out.env_assertions = _env_assertions(scenario, env, out)
        graded = env is not None or not criteria.env_assertions
        comp["ENV_ASSERTION"] = float(all(c.met for c in out.env_assertions)) if graded else None
        comp["NL_ASSERTION"] = await _nl(criteria.nl_assertions or [], t, judge, prices, out)
    if required:
        out.recovery = _recovery(scenario, t)
        comp["RECOVERY"] = float(all(c.met for c in out.recovery))
    if forbidden:
        out.forbidden = _forbidden(forbidden, t)
        comp["FORBIDDEN"] = float(all(c.met for c in out.forbidden))
    if criteria is not None and confirm_turn is not None:
        out.confirmed = _confirmed(criteria, t)
        comp["CONFIRMED"] = float(all(c.met for c in out.confirmed))
    reward = 1.0
    for name in basis:
        value = comp.get(name)
        if value is None:
            out.complete = False
            continue
        reward *= value
    if t.termination not in NORMAL_ENDS:
        out.notes.append(f"the run ended with {t.termination}: reward 0")
        reward = 0.0
    out.reward = reward
    out.success = reward >= SUCCESS_THRESHOLD
    return _finish(out, t)


def _finish(out: RewardBreakdown, t: Trajectory) -> RewardBreakdown:
    if t.termination == "setup_error":
        out.reward, out.success = 0.0, False
        out.notes.append(f"setup error: {t.termination_detail}")
    return out


# ----- DB ---------------------------------------------------------------------------------


def _db(scenario: Scenario, t: Trajectory, out: RewardBreakdown) -> float | None:
    criteria = scenario.evaluation
    assert criteria is not None
    if criteria.actions is None and criteria.env_assertions is None:
        out.notes.append("DB: no gold actions and no env assertions, so no DB check (tau2's rule)")
        return 1.0
    gold = gold_replay(scenario)
    if gold is None:
        out.notes.append(f"DB: {scenario.domain!r} has no database; DB not graded")
        return None
    if t.end_db_hash is None:
        out.notes.append("DB: the run has no end state (it did not start)")
        return 0.0
    db = out.db
    db.checked = True
    db.expected_hash, db.actual_hash = gold.end_hash, t.end_db_hash
    db.expected_user_hash, db.actual_user_hash = gold.user_end_hash, t.end_user_db_hash
    db.match = gold.end_hash == t.end_db_hash and gold.user_end_hash == t.end_user_db_hash
    if gold.failing_actions:
        names = ", ".join(f"#{f.index} {f.name}" for f in gold.failing_actions)
        out.notes.append(f"DB: gold actions that raise (ignored, as in tau2): {names}")
    return float(db.match)


def gold_replay(scenario: Scenario) -> Any | None:
    """The gold replay's result (end hashes) for a scenario; None for toolkit-only scenarios."""
    from scenarios.domains import DOMAINS

    if scenario.domain not in DOMAINS:
        return None
    criteria = scenario.evaluation
    actions = [a.model_dump() for a in (criteria.actions or [])] if criteria else []
    initial = scenario.initial_state.model_dump_json() if scenario.initial_state is not None else ""
    return _gold(scenario.domain, initial, json.dumps(actions, sort_keys=True))


@functools.lru_cache(maxsize=512)
def _gold(domain: str, initial_state: str, actions: str) -> Any:
    # Trials of a scenario share one gold replay; the key is the replay's whole input.
    from scenarios.domains import load_domain
    from scenarios.replay import replay_task
    from scenarios.tau2_tasks import Task

    task = Task.model_validate(
        {
            "id": "gold",
            "user_scenario": {"instructions": "gold replay"},
            "initial_state": json.loads(initial_state) if initial_state else None,
            "evaluation_criteria": {"actions": json.loads(actions), "env_assertions": []},
        }
    )
    return replay_task(lambda: load_domain(domain), task)


# ----- actions, communication, assertions, recovery ---------------------------------------


def _actions(scenario: Scenario, t: Trajectory) -> list[Check]:
    assert scenario.evaluation is not None
    made = [(tc.name, tc.parsed_arguments() or {}) for _, tc, _ in t.agent_tool_calls()]
    checks = []
    for action in scenario.evaluation.actions or []:
        label = f"{action.name}({_args_text(action.arguments, action.compare_args)})"
        if action.requestor != "assistant":
            checks.append(Check(name=label, met=True, detail="user-side action: not checked (rein users make no tool calls)"))
            continue
        keys = list(action.arguments) if action.compare_args is None else action.compare_args
        wanted = {k: action.arguments.get(k) for k in keys}
        hit = any(name == action.name and {k: args.get(k) for k in keys} == wanted for name, args in made)
        same_name = [args for name, args in made if name == action.name]
        detail = "" if hit else ("never called" if not same_name else f"called with {_args_text(same_name[-1], keys)}")
        checks.append(Check(name=label, met=hit, detail=detail))
    return checks


def _communicate(infos: list[str], t: Trajectory) -> list[Check]:
    said = [_norm(text) for text in t.agent_texts()]
    return [Check(name=info, met=any(_norm(info) in s for s in said), detail="") for info in infos]


def _norm(text: str) -> str:
    return text.lower().replace(",", "")


def _env_assertions(scenario: Scenario, env: Any | None, out: RewardBreakdown) -> list[Check]:
    assert scenario.evaluation is not None
    assertions = scenario.evaluation.env_assertions or []
    if not assertions:
        return []
    if env is None:
        out.notes.append("ENV_ASSERTION: no end environment to check; not graded")
        return []
    checks = []
    for a in assertions:
        label = f"{a.func_name}({_args_text(a.arguments, None)}) == {a.assert_value}"
        try:
            met = bool(env.run_env_assertion(a.model_dump()))
            checks.append(Check(name=label, met=met, detail="" if met else (a.message or "assertion failed")))
        except Exception as exc:  # an assertion that raises fails, with the reason
            checks.append(Check(name=label, met=False, detail=f"error: {exc}"))
    return checks


def _recovery(scenario: Scenario, t: Trajectory) -> list[Check]:
    calls = t.agent_tool_calls()
    required = scenario.required_recovery()
    # Any recovery tool counts for "first": rein's two, and whatever the scenario requires.
    names = {tool.name for tool in recovery_tools()} | {rc.name for rc in required}
    first = next(((turn, tc.name) for turn, tc, _ in calls if tc.name in names), None)
    checks = []
    for rc in required:
        ok = [turn for turn, tc, res in calls if tc.name == rc.name and turn >= rc.after_turn and res is not None and not res.is_error]
        early = [turn for turn, tc, _ in calls if tc.name == rc.name and turn < rc.after_turn]
        detail = f"made at turn {ok[0]}" if ok else ("only before the error turn" if early else "never made")
        met = bool(ok)
        label = f"{rc.name} (from turn {rc.after_turn})"
        if rc.must_be_first:
            label = f"{rc.name} first (from turn {rc.after_turn})"
            if first is not None and first[1] != rc.name:
                met, detail = False, f"the first recovery call was {first[1]} (turn {first[0]})"
            elif first is not None and first[0] < rc.after_turn:
                met, detail = False, f"the first recovery call came at turn {first[0]}, before the error turn"
        checks.append(Check(name=label, met=met, detail=detail))
    return checks


def _forbidden(tools: list[str], t: Trajectory) -> list[Check]:
    calls = t.agent_tool_calls()
    checks = []
    for name in tools:
        turns = [turn for turn, tc, _ in calls if tc.name == name]
        detail = f"called at turn {turns[0]}" if turns else ""
        checks.append(Check(name=f"no {name}", met=not turns, detail=detail))
    return checks


def _confirmed(criteria: Evaluation, t: Trajectory) -> list[Check]:
    confirm_turn = criteria.confirm_turn or 0
    writes = sorted({a.name for a in criteria.actions or [] if a.requestor == "assistant"})
    calls = t.agent_tool_calls()
    checks = []
    for name in writes:
        early = [turn for turn, tc, res in calls if tc.name == name and turn < confirm_turn and res is not None and not res.is_error]
        detail = f"made at turn {early[0]}, before the user confirmed" if early else ""
        checks.append(Check(name=f"{name} not before turn {confirm_turn}", met=not early, detail=detail))
    return checks


def _args_text(args: dict[str, Any], keys: list[str] | None) -> str:
    shown = args if keys is None else {k: args.get(k) for k in keys}
    return ", ".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in shown.items())


# ----- NL assertions ----------------------------------------------------------------------

JUDGE_PROMPT = """You grade a conversation between a customer-service agent and a customer.
For each expectation, decide from the transcript alone whether the agent's behaviour meets it.
Answer with JSON: {"results": [{"expectation": str, "reasoning": str, "met": bool}, ...]}, one
entry per expectation, in the order given."""

JUDGE_SCHEMA: dict[str, Any] = {
    "type": "json_schema",
    "json_schema": {
        "name": "nl_assertions",
        "strict": True,
        "schema": {
            "type": "object",
            "properties": {
                "results": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "expectation": {"type": "string"},
                            "reasoning": {"type": "string"},
                            "met": {"type": "boolean"},
                        },
                        "required": ["expectation", "reasoning", "met"],
                        "additionalProperties": False,
                    },
                }
            },
            "required": ["results"],
            "additionalProperties": False,
        },
    },
}


async def _nl(
    assertions: list[str], t: Trajectory, judge: Model | None, prices: PriceTable | None, out: RewardBreakdown
) -> float | None:
    if not assertions:
        return 1.0
    if judge is None:
        out.notes.append(f"NL_ASSERTION: {len(assertions)} assertion(s) not judged (no judge model given)")
        return None
    transcript = "\n".join(
        f"{'agent' if m.role == 'assistant' else 'customer'}: {m.text}"
        for m in t.messages
        if m.role in ("user", "assistant") and m.source in ("greeting", "user", "agent") and m.text
    )
    listed = "\n".join(f"{i + 1}. {a}" for i, a in enumerate(assertions))
    request = ModelRequest(
        messages=[Message.system(JUDGE_PROMPT), Message.user(f"Transcript:\n{transcript}\n\nExpectations:\n{listed}")],
        settings=ModelSettings(temperature=0.0, tool_choice="none"),
        response_format=JUDGE_SCHEMA,
    )
    ledger = CostLedger()
    try:
        response = await judge.complete(request)
        ledger.book_model(response.model or judge.name, response.usage, prices, label="judge")
        results = json.loads(response.text)["results"]
        if not isinstance(results, list) or len(results) != len(assertions):
            raise ValueError(f"expected {len(assertions)} results, got {len(results) if isinstance(results, list) else results!r}")
        out.nl_assertions = [
            Check(name=a, met=bool(r.get("met")), detail=str(r.get("reasoning", ""))) for a, r in zip(assertions, results, strict=True)
        ]
    except Exception as exc:  # a judge that fails leaves the component ungraded, never passed
        out.notes.append(f"NL_ASSERTION: judge failed ({type(exc).__name__}: {exc}); not graded")
        return None
    finally:
        out.judge_usage = ledger.summary()
    return float(all(c.met for c in out.nl_assertions))

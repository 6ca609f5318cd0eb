"""The scenario format: a dialogue test as data (domain, agent, user, injected errors, grading).

A scenario file is YAML (one scenario per document, `---` between documents) or JSON (one
object). Its JSON Schema is generated from these models into `scenarios/schema/
scenario.schema.json`, so editors can autocomplete and check it. tau2-bench `tasks.json` files
are read as scenarios too (see scenarios/loading.py).

    id: create-task
    domain: mock
    user:
      turns:
        - Please create a task called "Buy milk" for user_1.
        - say: Thanks, that's all.
          when: {contains: created}
    evaluation:
      actions:
        - {action_id: a1, name: create_task, arguments: {user_id: user_1, title: Buy milk}}
      reward_basis: [DB, ACTION]
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    PrivateAttr,
    Tag,
    model_validator,
)

from scenarios.tau2_tasks import (
    Action,
    EnvAssertion,
    InitialState,
    StructuredInstructions,
)
from scenarios.users.error_types import ERROR_TYPES, ErrorTypeName

SCHEMA_PATH = Path(__file__).resolve().parent / "schema" / "scenario.schema.json"
"""Where the generated JSON Schema lives."""

RewardBasis = Literal["DB", "ENV_ASSERTION", "NL_ASSERTION", "ACTION", "COMMUNICATE", "RECOVERY", "FORBIDDEN", "CONFIRMED"]
"""Reward components: tau2's five, plus RECOVERY (required recovery calls were made, in order),
FORBIDDEN (no forbidden tool was called) and CONFIRMED (no gold write before the user confirmed)."""

DEFAULT_GREETING = "Hi! How can I help you today?"
"""The agent's opening line, as in tau2."""


class _Strict(BaseModel):
    # Unknown keys are errors, so a typo in a scenario file is reported instead of ignored.
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)


# ----- the user ---------------------------------------------------------------------------


class Condition(_Strict):
    """A test on the agent's last turn; every field given must hold."""

    contains: str | list[str] | None = None
    """The agent's last message contains this text (any of these), ignoring case."""
    regex: str | None = None
    """The agent's last message matches this regular expression (searched, ignoring case)."""
    tool_called: str | list[str] | None = None
    """The agent called this tool (any of these) since the user's last message."""
    negate: bool = False
    """Invert the whole test."""

    @model_validator(mode="after")
    def _check(self) -> Condition:
        if self.contains is None and self.regex is None and self.tool_called is None:
            raise ValueError("a condition needs at least one of contains, regex, tool_called")
        if self.regex is not None:
            try:
                re.compile(self.regex)
            except re.error as exc:
                raise ValueError(f"invalid regex {self.regex!r}: {exc}") from None
        return self

    def holds(self, agent_text: str, tool_names: list[str]) -> bool:
        """Whether the condition holds for the agent's last message and tool calls."""
        ok = True
        if self.contains is not None:
            wanted = [self.contains] if isinstance(self.contains, str) else self.contains
            ok = ok and any(w.lower() in agent_text.lower() for w in wanted)
        if self.regex is not None:
            ok = ok and re.search(self.regex, agent_text, re.IGNORECASE) is not None
        if self.tool_called is not None:
            names = [self.tool_called] if isinstance(self.tool_called, str) else self.tool_called
            ok = ok and any(n in tool_names for n in names)
        return ok != self.negate


class ScriptedTurn(_Strict):
    """One user message of a scripted dialogue; a bare string in YAML means `say` alone."""

    say: str = Field(pattern=r"\S")
    """What the user says (not blank: an empty user message is a broken scenario, not a turn)."""
    when: Condition | None = None
    """Say it only if this holds for the agent's last turn; otherwise say `otherwise` or skip."""
    otherwise: str | None = None
    """Said instead when `when` fails; without it the turn is skipped."""


class ScriptedReply(_Strict):
    """A reaction checked before the next scripted turn at every user turn (e.g. confirming)."""

    when: Condition
    """When to react."""
    say: str
    """What the user says."""
    times: int = Field(default=1, ge=1)
    """How many times this reply may be used."""


def _turn_from_text(value: Any) -> Any:
    if isinstance(value, str):
        return {"say": value}
    if isinstance(value, dict) and len(value) == 1 and not set(value) & set(ScriptedTurn.model_fields):
        # YAML reads `- Sorry, I meant: do X` as a mapping; say so instead of "say: Field required".
        key = next(iter(value))
        raise ValueError(f"{key!r}: looks like text containing ': ' that YAML read as a mapping; quote the turn")
    return value


class ScriptedUserConfig(_Strict):
    """A deterministic user: scripted turns in order, conditional turns, reactive replies."""

    type: Literal["scripted"] = "scripted"
    """User kind."""
    turns: list[Annotated[ScriptedTurn, BeforeValidator(_turn_from_text)]] = Field(min_length=1)
    """The user's messages in order; the first one opens the conversation."""
    replies: list[ScriptedReply] = Field(default_factory=list)
    """Reactions to the agent, checked first at every user turn."""
    final: str = "###STOP###"
    """What the user says when the turns run out (the stop token ends the conversation)."""



class StrictInstructions(StructuredInstructions):
    """tau2's structured user instructions."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)


class SimulatedUserConfig(_Strict):
    """An LLM-simulated user following tau2's user-simulator guidelines."""

    type: Literal["simulated"] = "simulated"
    """User kind."""
    persona: str | None = None
    """How the user talks."""
    instructions: str | StrictInstructions
    """The user's situation and goal (free text, or tau2's structured form)."""
    model: str | None = None
    """Model of the simulator; None uses the run's user model."""
    temperature: float = 0.0
    """Sampling temperature of the simulator."""


def _user_kind(value: Any) -> str:
    if isinstance(value, dict):
        if "type" in value:
            return str(value["type"])
        return "simulated" if "instructions" in value else "scripted"
    return str(getattr(value, "type", "scripted"))


UserConfig = Annotated[
    Annotated[ScriptedUserConfig, Tag("scripted")] | Annotated[SimulatedUserConfig, Tag("simulated")],
    Discriminator(_user_kind, custom_error_type="user_kind", custom_error_message="user type must be scripted or simulated"),
]


class InjectedError(_Strict):
    """A user-side error (one of the ReIn paper's six types) sent at a chosen user turn."""

    type: ErrorTypeName
    """vague_reference, ambiguous_interpretation, contradiction, unsupported_operation,
    unsupported_parameter or unsupported_domain."""
    turn: int = Field(default=0, ge=0)
    """User turn (0 = the opening message) at which the error message is sent; the user's own
    turns continue after it."""
    text: str | None = None
    """The exact error message; None builds one from the scenario's data (or with an LLM)."""
    generator: Literal["template", "llm"] = "template"
    """How a missing text is made: templates over the task's data, or the user model."""


# ----- the agent --------------------------------------------------------------------------


class ScriptCall(_Strict):
    """A tool call in an agent script."""

    name: str
    """Tool name."""
    arguments: dict[str, Any] = Field(default_factory=dict)
    """Arguments."""


class ScriptStep(_Strict):
    """One scripted agent response: text and/or tool calls."""

    say: str = ""
    """Text of the response."""
    call: ScriptCall | None = None
    """A single tool call (shorthand for calls: [...])."""
    calls: list[ScriptCall] = Field(default_factory=list)
    """Parallel tool calls."""
    reasoning: str | None = None
    """Reasoning content."""

    def all_calls(self) -> list[ScriptCall]:
        """call and calls together."""
        return ([self.call] if self.call else []) + list(self.calls)


class AgentConfig(_Strict):
    """The agent under test."""

    system_prompt: str | None = None
    """System prompt; None uses the domain policy."""
    tools: list[str] | None = None
    """Toolkit names or "module:attribute" paths; None uses the domain's toolkit."""
    recovery_tools: bool | None = None
    """Add report_internal_error and transfer_to_human_agents; None adds them when errors are
    injected or recovery calls are required."""
    greeting: str | None = DEFAULT_GREETING
    """The agent's fixed opening line; null lets the user open the conversation."""
    step_limit: int | None = Field(default=None, ge=1)
    """Model calls allowed per user turn; None keeps the runtime default. A turn that reaches it
    ends there (recorded in the turn's metrics) and the user's next turn follows."""
    script: list[ScriptStep] | None = None
    """Agent responses played by the `scripted` model (deterministic runs without an LLM)."""


# ----- grading ----------------------------------------------------------------------------


class ScenarioAction(Action):
    """A gold tool call: replayed for the DB check, required by the ACTION check."""

    # Fields are restated from tau2's Action so that the schema carries their descriptions.
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)
    action_id: str
    """Unique id within the scenario."""
    requestor: Literal["assistant", "user"] = "assistant"
    """Who makes the call: the agent (assistant) or the user."""
    name: str
    """Tool name."""
    arguments: dict[str, Any] = Field(default_factory=dict)
    """Arguments, passed as given."""
    info: str | None = None
    """Explanation for humans."""
    compare_args: list[str] | None = None
    """Arguments the ACTION check compares; null compares all, [] only the tool name."""


class ScenarioEnvAssertion(EnvAssertion):
    """A check run on the end state of the agent's environment."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)
    env_type: Literal["assistant", "user"] = "assistant"
    """Whose environment function runs: the agent side (assistant) or the user side."""
    func_name: str
    """Environment function (e.g. assert_task_status)."""
    arguments: dict[str, Any] = Field(default_factory=dict)
    """Its keyword arguments."""
    assert_value: bool = True
    """The result that passes."""
    message: str | None = None
    """Shown when the assertion fails."""


class RecoveryCall(_Strict):
    """A recovery tool call the agent must make."""

    name: str
    """Tool name, e.g. transfer_to_human_agents or report_internal_error."""
    after_turn: int = Field(default=0, ge=0)
    """It counts only if made after the user's message of this turn (or later)."""
    must_be_first: bool = False
    """The agent's first recovery call of the whole run must be this one, at or after
    after_turn: a different recovery tool first, or any recovery call on an earlier (clean)
    turn, fails the requirement."""


class Evaluation(_Strict):
    """How a run is graded: tau2's criteria plus required recovery calls."""

    actions: list[ScenarioAction] | None = None
    """Gold trajectory; replayed on a fresh environment to get the target DB."""
    env_assertions: list[ScenarioEnvAssertion] | None = None
    """Checks on the agent's end state."""
    communicate_info: list[str] | None = None
    """Strings the agent must say (ignoring case and commas)."""
    nl_assertions: list[str] | None = None
    """Natural-language checks for an LLM judge."""
    reward_basis: list[RewardBasis] | None = None
    """Components whose rewards are multiplied; None means tau2's default, [DB, COMMUNICATE].
    Required recovery calls and forbidden tools always gate the reward."""
    required_recovery: list[RecoveryCall] | None = None
    """Recovery calls the agent must make; None derives them from the injected errors."""
    forbidden_tools: list[str] = Field(default_factory=list)
    """Tools the agent must not call at all (e.g. the recovery tools on an error-free control);
    any call, successful or not, fails the FORBIDDEN check, which always gates the reward."""
    confirm_turn: int | None = Field(default=None, ge=0)
    """The user turn that gives the explicit confirmation the policy asks for before a write; a
    successful call of a gold action's tool on an earlier turn fails the CONFIRMED check, which
    always gates the reward (the DB alone cannot tell a write made before the "yes" from one after)."""

    @model_validator(mode="after")
    def _check(self) -> Evaluation:
        both = sorted({r.name for r in self.required_recovery or []} & set(self.forbidden_tools))
        if both:
            raise ValueError(f"tools both required and forbidden: {', '.join(both)}")
        if self.confirm_turn is not None and not any(a.requestor == "assistant" for a in self.actions or []):
            raise ValueError("confirm_turn needs gold actions of the agent: it is their tools that must wait for it")
        return self

    def basis(self) -> list[RewardBasis]:
        """The reward basis in effect."""
        return list(self.reward_basis) if self.reward_basis is not None else ["DB", "COMMUNICATE"]


# ----- jigsaw episodes --------------------------------------------------------------------


class JigsawTask(_Strict):
    """A jigsaw episode (kind: jigsaw): the puzzle, how it is shown and who plays it."""

    image: str = "astronaut"
    """A bundled photo name (astronaut, chelsea, coffee, rocket, hubble_deep_field, ...) or an image file path."""
    grid: int = Field(default=3, ge=2, le=8)
    """n for an n×n grid."""
    level: int | None = Field(default=None, ge=0)
    """How many pieces start in place (0 to n²−2); None shuffles uniformly among unsolved orders."""
    max_turns: int = Field(default=10, ge=1, le=10_000)
    """Environment steps allowed; the episode ends when they are used."""
    window: float = Field(default=1.0, ge=0.1, le=1.0)
    """Side fraction of a seeded random window of the photo to cut (1.0: the whole photo)."""
    hints: bool = True
    """Add edge-compatibility hints to the text observation."""
    vision: bool = False
    """Send observations with the picture as an image content part (for vision models)."""
    player: Literal["model", "solver"] = "model"
    """Who plays: the run's model, or always the scripted solver (also what `--model scripted` uses)."""

    @model_validator(mode="after")
    def _level_fits(self) -> JigsawTask:
        if self.level is not None and self.level > self.grid * self.grid - 2:
            raise ValueError(f"level for a {self.grid}x{self.grid} grid must be from 0 to {self.grid * self.grid - 2}")
        return self


# ----- the scenario -----------------------------------------------------------------------


class Scenario(_Strict):
    """One test: a dialogue (who talks to whom, in which world) or a jigsaw episode, and how the run is graded."""

    id: str = Field(min_length=1)
    """Unique id within a batch."""
    description: str = ""
    """What the scenario tests."""
    kind: Literal["dialogue", "jigsaw"] = "dialogue"
    """dialogue: an agent and a user talk in a domain; jigsaw: the agent plays a jigsaw episode
    (`jigsaw`), graded by the environment's score."""
    domain: str
    """mock, retail or airline (tools, DB and policy), or any registered toolkit name (tools only);
    `jigsaw` (the default) for kind jigsaw."""
    initial_state: InitialState | None = None
    """tau2 initial state: DB changes, setup calls, earlier messages."""
    agent: AgentConfig = Field(default_factory=AgentConfig)
    """The agent under test."""
    user: UserConfig | None = None
    """The user: scripted turns, or a simulated user with persona and instructions (required for
    dialogue scenarios; a jigsaw episode has none)."""
    jigsaw: JigsawTask | None = None
    """The puzzle of a jigsaw scenario."""
    errors: list[InjectedError] = Field(default_factory=list)
    """User-side errors to inject."""
    evaluation: Evaluation | None = None
    """Grading; None means every run that ends normally passes."""
    max_steps: int = Field(default=60, ge=1)
    """Messages (user turns plus agent model calls) after which the run stops."""
    max_errors: int = Field(default=10, ge=1)
    """Failed tool calls after which the run stops."""
    seed: int = 0
    """Seed for the simulated user, error generation and sampling; trial k uses seed + k."""
    tags: list[str] = Field(default_factory=list)
    """Free labels for filtering and reports."""

    _source: str | None = PrivateAttr(default=None)

    @property
    def source(self) -> str | None:
        """The file the scenario was read from, when it came from one."""
        return self._source

    @model_validator(mode="before")
    @classmethod
    def _jigsaw_defaults(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("kind") == "jigsaw":
            data = {"domain": "jigsaw", "jigsaw": {}, **data}
            if data.get("jigsaw") is None:
                data["jigsaw"] = {}
        return data

    @model_validator(mode="after")
    def _check(self) -> Scenario:
        if self.kind == "dialogue":
            if self.user is None:
                raise ValueError("user: a dialogue scenario needs a user (scripted turns or a simulated user)")
            if self.jigsaw is not None:
                raise ValueError("jigsaw: only for kind: jigsaw")
        elif self.user is not None or self.errors:
            raise ValueError("a jigsaw scenario has no user and no injected errors")
        for e in self.errors:
            if e.type not in ERROR_TYPES:  # guarded by the Literal; kept for clear messages
                raise ValueError(f"unknown error type {e.type!r}")
        return self

    def required_recovery(self) -> list[RecoveryCall]:
        """Recovery calls the run must contain: explicit ones, else one per injected error."""
        if self.evaluation is not None and self.evaluation.required_recovery is not None:
            return list(self.evaluation.required_recovery)
        return [RecoveryCall(name=ERROR_TYPES[e.type].recovery_tool, after_turn=e.turn) for e in self.errors]

    def simulated_user(self) -> SimulatedUserConfig:
        """The scenario's LLM-simulated user; ValueError when its user is scripted or absent."""
        if not isinstance(self.user, SimulatedUserConfig):
            raise ValueError(f"scenario {self.id}: needs a simulated user, not {getattr(self.user, 'type', 'none')}")
        return self.user

    def wants_recovery_tools(self) -> bool:
        """Whether the agent gets the recovery tools."""
        if self.agent.recovery_tools is not None:
            return self.agent.recovery_tools
        return bool(self.errors or self.required_recovery())

    def error_types(self) -> list[str]:
        """Names of the injected error types (empty for clean scenarios)."""
        return [e.type for e in self.errors]


def scenario_schema() -> dict[str, Any]:
    """The JSON Schema of a scenario document."""
    schema = Scenario.model_json_schema(mode="validation")
    # A bare string is accepted for a scripted turn (the validator turns it into {say: ...}).
    turns = schema["$defs"]["ScriptedUserConfig"]["properties"]["turns"]
    turns["items"] = {"anyOf": [turns["items"], {"type": "string"}]}
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://rein.dev/schema/scenario.schema.json",
        **schema,
    }


def schema_text() -> str:
    """The schema as the text stored in SCHEMA_PATH."""
    return json.dumps(scenario_schema(), indent=2, ensure_ascii=False, sort_keys=False) + "\n"


def write_schema(path: Path = SCHEMA_PATH) -> Path:
    """Regenerate the schema file (python -m scenarios.scenario)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(schema_text(), encoding="utf-8")
    return path


if __name__ == "__main__":
    print(write_schema())

"""tau2-bench task files (`tasks.json`): pydantic models and a loader with precise error messages.

The models follow tau2's `Task` format field for field. Unknown extra fields (tau2 adds
documentation fields such as `ticket`, `issues`, `annotations`) are kept, not rejected; the
fields that drive a run or its grading are validated.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, ValidationError

from scenarios.errors import TaskFileError

Requestor = Literal["assistant", "user"]
RewardType = Literal["DB", "ENV_ASSERTION", "NL_ASSERTION", "ACTION", "COMMUNICATE"]
DEFAULT_REWARD_BASIS: tuple[RewardType, ...] = ("DB", "COMMUNICATE")
"""What a task's reward multiplies when it names no basis (tau2's default)."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="allow")


class StructuredInstructions(_Model):
    """What the simulated user knows and wants, in tau2's structured form."""

    domain: str
    """Domain name, e.g. retail."""
    reason_for_call: str
    """Why the user contacts the agent."""
    known_info: str | None = None
    """Facts the user can give."""
    unknown_info: str | None = None
    """Facts the user does not know."""
    task_instructions: str
    """How the user should behave."""


def _instructions_kind(value: Any) -> str:
    return "text" if isinstance(value, str) else "structured"


Instructions = Annotated[
    Annotated[str, Tag("text")] | Annotated[StructuredInstructions, Tag("structured")],
    Discriminator(_instructions_kind),
]


class UserScenario(_Model):
    """Input for the user simulator."""

    persona: str | None = None
    """How the user talks, in general."""
    instructions: Instructions
    """The user's situation and goal: free text or structured."""


class Description(_Model):
    """Documentation of a task (not shown to the agent)."""

    purpose: str | None = None
    """What the task tests."""
    relevant_policies: str | None = None
    """Policy parts that matter."""
    notes: str | None = None
    """Anything else."""


class EnvFunctionCall(_Model):
    """A call of a tool or non-tool env function on the agent's or the user's side."""

    env_type: Requestor
    """assistant (agent side) or user."""
    func_name: str
    """Function or tool name."""
    arguments: dict[str, Any] = Field(default_factory=dict)
    """Keyword arguments, passed raw."""


class EnvAssertion(EnvFunctionCall):
    """An env function call whose boolean result must equal assert_value."""

    assert_value: bool = True
    """Expected result."""
    message: str | None = None
    """Shown when the assertion fails."""


class Action(_Model):
    """One call of the gold (reference) trajectory."""

    action_id: str
    """Unique id within the task."""
    requestor: Requestor = "assistant"
    """Who makes the call."""
    name: str
    """Tool name."""
    arguments: dict[str, Any] = Field(default_factory=dict)
    """Arguments, passed raw."""
    info: str | None = None
    """Explanation for humans."""
    compare_args: list[str] | None = None
    """Arguments an ACTION check compares; None compares all, [] only the name."""


class HistoryToolCall(_Model):
    """A tool call recorded in a message history."""

    id: str = ""
    """Call id; the tool message that answers it carries the same id."""
    name: str
    """Tool name."""
    arguments: dict[str, Any] = Field(default_factory=dict)
    """Arguments."""
    requestor: Requestor | None = None
    """Who made it; None means the role of the message that holds it."""


class HistoryMessage(_Model):
    """A message of an earlier conversation that a task starts from."""

    role: Literal["system", "user", "assistant", "tool"]
    """Who sent it."""
    content: str | None = None
    """Text; for a tool message, the tool's output."""
    tool_calls: list[HistoryToolCall] | None = None
    """Tool calls made in this message."""
    id: str | None = None
    """For a tool message: the id of the call it answers."""
    error: bool = False
    """For a tool message: whether the call failed."""


class InitializationData(_Model):
    """Partial DB contents deep-merged into the starting DBs."""

    agent_data: dict[str, Any] | None = None
    """Merged into the agent DB."""
    user_data: dict[str, Any] | None = None
    """Merged into the user DB."""


class InitialState(_Model):
    """How to set up the environment before the conversation."""

    initialization_data: InitializationData | None = None
    """DB changes, applied first."""
    initialization_actions: list[EnvFunctionCall] | None = None
    """Env function calls, run second."""
    message_history: list[HistoryMessage] | None = None
    """Earlier turns; their state-changing tool calls are replayed third."""


class EvaluationCriteria(_Model):
    """How a run of the task is graded."""

    actions: list[Action] | None = None
    """Gold trajectory; replayed on a fresh env to get the target DB."""
    env_assertions: list[EnvAssertion] | None = None
    """Checks on the agent's end state."""
    communicate_info: list[str] | None = None
    """Strings the agent must say to the user."""
    nl_assertions: list[str] | None = None
    """Checks for an LLM judge."""
    reward_basis: list[RewardType] = Field(default_factory=lambda: list(DEFAULT_REWARD_BASIS))
    """Components whose rewards are multiplied."""


class Task(_Model):
    """One tau2 task: a user scenario, an optional initial state and evaluation criteria."""

    id: str
    """Unique task id."""
    description: Description | None = None
    """Documentation."""
    user_scenario: UserScenario
    """What the simulated user is told."""
    ticket: str | None = None
    """One-paragraph summary (used by solo agents)."""
    initial_state: InitialState | None = None
    """Environment setup."""
    evaluation_criteria: EvaluationCriteria | None = None
    """Grading; None means every run passes."""


# Tags and wrapper names pydantic puts in error locations that are not field names.
_NON_FIELD_LOCS = {"text", "structured"}


def field_path(loc: tuple[int | str, ...]) -> str:
    """`('evaluation_criteria', 'actions', 2, 'name')` → `evaluation_criteria.actions[2].name`."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part not in _NON_FIELD_LOCS:
            out += f".{part}" if out else str(part)
    return out


def parse_tasks(data: Any, path: Path) -> list[Task]:
    """Validate decoded JSON as a list of tasks; errors name the file, task and field."""
    if not isinstance(data, list):
        raise TaskFileError(path, f"expected a JSON array of tasks, got {_json_type(data)}")
    tasks: list[Task] = []
    seen: dict[str, int] = {}
    for index, item in enumerate(data):
        task_id = item.get("id") if isinstance(item, dict) else None
        shown_id = task_id if isinstance(task_id, str) else None
        if not isinstance(item, dict):
            raise TaskFileError(
                path, f"expected a JSON object, got {_json_type(item)}", index=index
            )
        try:
            task = Task.model_validate(item)
        except ValidationError as exc:
            err = exc.errors(include_url=False)[0]
            loc = field_path(tuple(err["loc"]))
            reason = err["msg"]
            if err["type"] not in ("missing",) and "input" in err:
                reason += f" (got {_preview(err['input'])})"
            more = exc.error_count() - 1
            if more:
                reason += f"; and {more} more error{'s' if more > 1 else ''} in this task"
            raise TaskFileError(path, reason, index=index, scenario_id=shown_id, field=loc) from None
        if task.id in seen:
            raise TaskFileError(
                path,
                f"duplicate task id {task.id!r} (also task #{seen[task.id]})",
                index=index,
                field="id",
            )
        seen[task.id] = index
        tasks.append(task)
    return tasks


def load_tasks(path: str | Path) -> list[Task]:
    """Read and validate a tau2 tasks.json file."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise TaskFileError(p, "file not found") from None
    except IsADirectoryError:
        raise TaskFileError(p, "is a directory, expected a tasks JSON file") from None
    except UnicodeDecodeError as exc:
        raise TaskFileError(p, f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except OSError as exc:
        raise TaskFileError(p, f"cannot read: {exc.strerror or exc}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TaskFileError(
            p, f"invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}"
        ) from None
    return parse_tasks(data, p)


def load_split(path: str | Path, name: str) -> list[str]:
    """Task ids of one split (e.g. "test") from a tau2 split_tasks.json file."""
    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise TaskFileError(p, "file not found") from None
    except json.JSONDecodeError as exc:
        raise TaskFileError(
            p, f"invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}"
        ) from None
    if not isinstance(data, dict) or not all(
        isinstance(v, list) and all(isinstance(i, str) for i in v) for v in data.values()
    ):
        raise TaskFileError(p, "expected an object mapping split names to lists of task ids")
    if name not in data:
        raise TaskFileError(p, f"no split named {name!r}; splits: {', '.join(sorted(data))}")
    return list(data[name])


def _json_type(value: Any) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}.get(
        type(value), "number"
    )


def _preview(value: Any, limit: int = 60) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[: limit - 3] + "..."

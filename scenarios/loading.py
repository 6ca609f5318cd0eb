"""Reading scenarios from files: rein scenario YAML/JSON and tau2-bench tasks.json.

Every problem raises ScenarioFileError (a UserFacingError, scenarios/errors.py) naming the file,
the scenario (index and id), the field path and the reason; tasks.json problems raise its
subclass TaskFileError, which names the same things.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from scenarios.errors import ScenarioFileError
from scenarios.scenario import (
    Evaluation,
    Scenario,
    ScenarioAction,
    ScenarioEnvAssertion,
    SimulatedUserConfig,
    StrictInstructions,
)
from scenarios.tau2_tasks import StructuredInstructions, Task, field_path, parse_tasks

SCENARIO_SUFFIXES = (".yaml", ".yml", ".json")
"""File types read from a directory."""

TAU2_DOMAINS = ("mock", "retail", "airline")
"""Domains a tasks.json can belong to when its tasks do not say."""


def load_scenarios(path: str | Path, *, domain: str | None = None) -> list[Scenario]:
    """Scenarios of one file: YAML documents, a JSON object, or a tau2 tasks.json array.

    domain names the domain of tau2 tasks whose instructions do not (mock's free-text ones);
    by default the file's folder name is used when it is mock, retail or airline.
    """
    p = Path(path)
    text = _read(p)
    if p.suffix in (".yaml", ".yml"):
        numbered = _yaml_documents(p, text)
        multiple = len(numbered) > 1
        scenarios = [_validate(p, doc, document=n if multiple else None) for n, doc in numbered]
    else:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ScenarioFileError(p, f"invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}") from None
        if isinstance(data, list) and any(isinstance(d, dict) and "user_scenario" in d for d in data):
            return scenarios_from_tasks(parse_tasks(data, p), p, domain=domain)
        documents = data if isinstance(data, list) else [data]
        multiple = len(documents) > 1
        scenarios = [_validate(p, doc, index=i if multiple else None) for i, doc in enumerate(documents)]
    _check_unique(scenarios, {s.id: p for s in scenarios}, p)
    return scenarios


def collect_scenarios(paths: Iterable[str | Path], *, domain: str | None = None) -> list[Scenario]:
    """Scenarios of several files and directories (a directory contributes its *.yaml, *.yml and
    *.json files, sorted by name); ids must be unique across all of them."""
    out: list[Scenario] = []
    origin: dict[str, Path] = {}
    for raw in paths:
        p = Path(raw)
        if p.is_dir():
            files = sorted(f for f in p.iterdir() if f.is_file() and f.suffix in SCENARIO_SUFFIXES)
            if not files:
                raise ScenarioFileError(p, "directory holds no .yaml, .yml or .json scenario files")
        elif p.exists():
            files = [p]
        else:
            raise ScenarioFileError(p, "no such file or directory")
        for f in files:
            loaded = load_scenarios(f, domain=domain)
            _check_unique(loaded, origin, f)
            for s in loaded:
                origin[s.id] = f
            out.extend(loaded)
    return out


def scenario_from_task(task: Task, domain: str) -> Scenario:
    """A tau2 Task as a scenario with a simulated user."""
    instructions: str | StrictInstructions
    raw = task.user_scenario.instructions
    if isinstance(raw, StructuredInstructions):
        instructions = StrictInstructions(**_known(raw, StrictInstructions))
    else:
        instructions = raw
    criteria = task.evaluation_criteria
    evaluation = None
    if criteria is not None:
        evaluation = Evaluation(
            actions=None if criteria.actions is None else [ScenarioAction(**_known(a, ScenarioAction)) for a in criteria.actions],
            env_assertions=None
            if criteria.env_assertions is None
            else [ScenarioEnvAssertion(**_known(a, ScenarioEnvAssertion)) for a in criteria.env_assertions],
            communicate_info=criteria.communicate_info,
            nl_assertions=criteria.nl_assertions,
            reward_basis=list(criteria.reward_basis),
        )
    purpose = task.description.purpose if task.description is not None else None
    return Scenario(
        id=task.id,
        description=purpose or task.ticket or "",
        domain=domain,
        initial_state=task.initial_state,
        user=SimulatedUserConfig(persona=task.user_scenario.persona, instructions=instructions),
        evaluation=evaluation,
        tags=["tau2", domain],
    )


def scenarios_from_tasks(tasks: list[Task], path: Path, *, domain: str | None = None) -> list[Scenario]:
    """Convert the tasks of one tasks.json, resolving each task's domain."""
    out = []
    for index, task in enumerate(tasks):
        raw = task.user_scenario.instructions
        task_domain = raw.domain if isinstance(raw, StructuredInstructions) else None
        task_domain = domain or task_domain or (path.parent.name if path.parent.name in TAU2_DOMAINS else None)
        if task_domain is None:
            raise ScenarioFileError(
                path,
                "the task does not name its domain; pass --domain or keep the file in a folder named "
                + ", ".join(TAU2_DOMAINS),
                index=index,
                scenario_id=task.id,
                field="user_scenario.instructions.domain",
            )
        scenario = scenario_from_task(task, task_domain)
        scenario._source = str(path)
        out.append(scenario)
    return out


# ----- internals --------------------------------------------------------------------------


def _read(p: Path) -> str:
    if p.is_dir():
        raise ScenarioFileError(p, "is a directory, expected a scenario file")
    if p.suffix not in SCENARIO_SUFFIXES:
        raise ScenarioFileError(p, f"unsupported file type {p.suffix or '(none)'!r}; use .yaml, .yml or .json")
    try:
        return p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ScenarioFileError(p, "file not found") from None
    except UnicodeDecodeError as exc:
        raise ScenarioFileError(p, f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except OSError as exc:
        raise ScenarioFileError(p, f"cannot read: {exc.strerror or exc}") from None


def _yaml_documents(p: Path, text: str) -> list[tuple[int, Any]]:
    """The file's non-empty documents with their numbers, from 1; empty ones still count, so the
    number is the one a reader finds by counting `---` separators."""
    import yaml

    try:
        documents = [(n, d) for n, d in enumerate(yaml.safe_load_all(text), 1) if d is not None]
    except yaml.MarkedYAMLError as exc:
        raise ScenarioFileError(p, f"invalid YAML {_yaml_where(exc, text)}") from None
    except yaml.YAMLError as exc:
        raise ScenarioFileError(p, f"invalid YAML: {exc}") from None
    if not documents:
        raise ScenarioFileError(p, "the file holds no scenario")
    return documents


def _yaml_where(exc: Any, text: str) -> str:
    """Line, column and problem of a YAML syntax error, at the construct that is broken.

    An unclosed quote or bracket is only noticed at the end of the file; the construct's start
    (the context mark) is then the line to look at, not the end.
    """
    problem, context = exc.problem or str(exc), exc.context
    mark, opened = exc.problem_mark, exc.context_mark
    if mark is None:
        return f": {problem}"
    at_end = mark.index >= len(text.rstrip())
    if at_end and opened is not None:
        return (
            f"at line {opened.line + 1}, column {opened.column + 1}: {problem} {context or ''}".rstrip()
            + " (the file ends before it is closed)"
        )
    where = f"at line {mark.line + 1}, column {mark.column + 1}: {problem}"
    if opened is not None and context and opened.line != mark.line:
        where += f" {context} started at line {opened.line + 1}, column {opened.column + 1}"
    return where


def _validate(p: Path, doc: Any, *, index: int | None = None, document: int | None = None) -> Scenario:
    if not isinstance(doc, dict):
        raise ScenarioFileError(
            p, f"expected a mapping (a scenario), got {_kind(doc)}", index=index, document=document
        )
    sid = doc.get("id") if isinstance(doc.get("id"), str) else None
    try:
        scenario = Scenario.model_validate(doc)
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        reason = err["msg"].removeprefix("Value error, ")
        if err["type"] not in ("missing", "extra_forbidden") and "input" in err:
            reason += f" (got {_preview(err['input'])})"
        if err["type"] == "extra_forbidden":
            reason = "unknown field"
        more = exc.error_count() - 1
        if more:
            reason += f"; and {more} more error{'s' if more > 1 else ''}"
        raise ScenarioFileError(
            p, reason, index=index, document=document, scenario_id=sid, field=_field(tuple(err["loc"])) or None
        ) from None
    scenario._source = str(p)
    return scenario


def _field(loc: tuple[int | str, ...]) -> str:
    # The user union's tags (scripted, simulated) sit in error locations but are not fields.
    parts = tuple(p for i, p in enumerate(loc) if not (i == 1 and loc[0] == "user" and p in ("scripted", "simulated")))
    return field_path(parts)


def _check_unique(scenarios: list[Scenario], origin: dict[str, Path], path: Path) -> None:
    seen: set[str] = set()
    for s in scenarios:
        other = origin.get(s.id)
        if s.id in seen or (other is not None and other != path):
            also = f" (also in {other})" if other is not None and other != path else ""
            raise ScenarioFileError(path, f"duplicate scenario id {s.id!r}{also}", field="id")
        seen.add(s.id)


def _known(model: Any, target: type[BaseModel]) -> dict[str, Any]:
    """The fields of a tau2 object that the strict rein model knows (tau2 keeps extra ones)."""
    return {k: getattr(model, k) for k in target.model_fields if hasattr(model, k)}


def _kind(value: Any) -> str:
    return {dict: "a mapping", list: "a list", str: "a string", type(None): "nothing"}.get(type(value), type(value).__name__)


def _preview(value: Any, limit: int = 60) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[: limit - 3] + "..."

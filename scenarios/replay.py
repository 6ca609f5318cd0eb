"""Gold-action replay: run each task's reference trajectory through rein's tools and hash the end state.

This follows tau2's evaluator (EnvironmentEvaluator) exactly: a fresh environment per task, the
task's initial state applied first, then every gold action in order with its raw arguments; a
call that raises is recorded and skipped, and the next one still runs. The canonical end hash is
what an agent's end state must equal for the DB check to pass.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent.errors import UserFacingError
from scenarios.domains import DOMAINS, DomainEnvironment, Snapshot, canonical_snapshot, domain_class
from scenarios.domains.data import bundled_snapshot, domain_policy
from scenarios.domains.environment import DomainStateError
from scenarios.tau2_tasks import Task, load_tasks


class ReplayError(UserFacingError):
    """Replay input that cannot be used: missing files, malformed JSON, an unknown DB layout."""


@dataclass(frozen=True)
class FailingAction:
    """A gold action whose call raised."""

    index: int
    """Position in evaluation_criteria.actions."""
    action_id: str
    """The action's id."""
    name: str
    """Tool name."""
    error: str
    """The exception text."""


@dataclass
class ReplayResult:
    """End state of one task's gold replay."""

    task_id: str
    """Task id."""
    initial_hash: str
    """Canonical agent-DB hash after the initial state, before any gold action."""
    end_hash: str
    """Canonical agent-DB hash after the gold actions."""
    user_initial_hash: str | None = None
    """User-DB hash before the gold actions (None without a user DB)."""
    user_end_hash: str | None = None
    """User-DB hash after them; the user DB is never aliased to the agent DB."""
    failing_actions: list[FailingAction] = field(default_factory=list)
    """Gold calls that raised, in order."""
    num_actions: int = 0
    """Number of gold actions replayed."""
    db_checked: bool = True
    """Whether tau2's evaluator checks the DB for this task (it does not when there are no actions
    and no env assertions, or no evaluation criteria)."""

    @property
    def changed(self) -> bool:
        """Whether the gold actions changed the agent DB."""
        return self.end_hash != self.initial_hash


@dataclass
class DomainReplay:
    """Results of replaying every task of a tasks file."""

    domain: str
    """Domain name."""
    db_path: Path | None
    """DB file used (None for the bundled DB)."""
    tasks_path: Path
    """Tasks file used."""
    results: list[ReplayResult]
    """One result per task, in file order."""

    def end_hashes(self) -> dict[str, str]:
        """Task id → canonical end hash."""
        return {r.task_id: r.end_hash for r in self.results}


def replay_task(env_factory: Callable[[], DomainEnvironment], task: Task) -> ReplayResult:
    """Replay one task's gold actions on a fresh environment from env_factory."""
    env = env_factory()
    try:
        env.apply_initial_state(task.initial_state)
    except Exception as exc:  # tau2 lets set_state errors abort the evaluation; we name the task
        raise ReplayError(f"task {task.id!r}: cannot apply initial_state: {exc}") from exc
    initial_hash, user_initial_hash = env.db_hash(), env.user_db_hash()
    criteria = task.evaluation_criteria
    actions = (criteria.actions if criteria is not None else None) or []
    failing = []
    for index, action in enumerate(actions):
        try:
            env.call(action.name, action.requestor, **action.arguments)
        except Exception as exc:  # the official rule: log, ignore, run the next action
            failing.append(FailingAction(index, action.action_id, action.name, str(exc)))
    return ReplayResult(
        task_id=task.id,
        initial_hash=initial_hash,
        end_hash=env.db_hash(),
        user_initial_hash=user_initial_hash,
        user_end_hash=env.user_db_hash(),
        failing_actions=failing,
        num_actions=len(actions),
        db_checked=criteria is not None
        and not (criteria.actions is None and criteria.env_assertions is None),
    )


def replay_tasks(
    env_factory: Callable[[], DomainEnvironment], tasks: Iterable[Task]
) -> list[ReplayResult]:
    """Replay several tasks, each on its own fresh environment."""
    return [replay_task(env_factory, task) for task in tasks]


def detect_domain(db: Any) -> str:
    """The domain whose DB layout (its set of tables) db has."""
    if isinstance(db, dict):
        for name, cls in DOMAINS.items():
            if set(db) == set(cls.tables):
                return name
    tables = ", ".join(sorted(db)) if isinstance(db, dict) else type(db).__name__
    layouts = "; ".join(f"{n}: {', '.join(sorted(c.tables))}" for n, c in DOMAINS.items())
    raise ReplayError(
        f"cannot tell the domain from the DB's tables ({tables}); known layouts are {layouts}"
    )


def replay_domain(
    domain_dir: str | Path, tasks_file: str | Path | None = None, domain: str | None = None
) -> DomainReplay:
    """Replay every task of DOMAIN_DIR/tasks.json (or tasks_file) on DOMAIN_DIR/db.json.

    The domain is recognised from the DB's tables unless given. For mock, DOMAIN_DIR/user_db.json
    is used when present, the bundled user DB otherwise.
    """
    folder = Path(domain_dir)
    if not folder.exists():
        raise ReplayError(f"{folder}: no such directory")
    if not folder.is_dir():
        raise ReplayError(
            f"{folder}: not a directory (expected a folder holding db.json and tasks.json)"
        )
    db_path = _find(folder, "db.json")
    if db_path is None:
        raise ReplayError(f"{folder}: no db.json (or db.json.gz) in this directory")
    if domain is not None and domain not in DOMAINS:
        raise ReplayError(f"unknown domain {domain!r}; known: {', '.join(DOMAINS)}")
    name, db = _load_db(db_path, domain, "db")
    user_db: Snapshot | None = None
    if domain_class(name).user_db_model is not None:
        user_path = _find(folder, "user_db.json")
        user_db = (
            _load_db(user_path, name, "user_db")[1]
            if user_path is not None
            else bundled_snapshot(name, "user_db")
        )
    tasks_path = Path(tasks_file) if tasks_file is not None else folder / "tasks.json"
    tasks = load_tasks(tasks_path)
    cls, policy = domain_class(name), domain_policy(name)
    results = replay_tasks(lambda: cls(db, user_db, policy=policy), tasks)
    return DomainReplay(domain=name, db_path=db_path, tasks_path=tasks_path, results=results)


def read_json_file(path: Path) -> Any:
    """Parse a JSON (or gzip-compressed JSON) file; ReplayError names the file and position."""
    try:
        raw = path.read_bytes()
        if path.suffix == ".gz":
            raw = gzip.decompress(raw)
        return json.loads(raw)
    except FileNotFoundError:
        raise ReplayError(f"{path}: file not found") from None
    except json.JSONDecodeError as exc:
        raise ReplayError(
            f"{path}: invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}"
        ) from None
    except (OSError, EOFError, UnicodeDecodeError) as exc:
        raise ReplayError(f"{path}: cannot read: {exc}") from None


def _find(folder: Path, name: str) -> Path | None:
    for candidate in (folder / name, folder / f"{name}.gz"):
        if candidate.is_file():
            return candidate
    return None


def _load_db(path: Path, domain: str | None, which: str) -> tuple[str, Snapshot]:
    """(domain, canonical snapshot) of a DB file; reused while the file is unchanged."""
    stat = path.stat()
    key = (str(path.resolve()), stat.st_size, stat.st_mtime_ns, domain, which)
    cached = _LOADED.get(key)
    if cached is None:
        data = read_json_file(path)
        name = domain if domain is not None else detect_domain(data)
        try:
            cached = (name, canonical_snapshot(name, data, which))
        except DomainStateError as exc:
            what = f"{name} {which.replace('_', ' ')}"
            raise ReplayError(f"{path}: not a valid {what}: {exc}") from None
        if len(_LOADED) >= 4:
            _LOADED.pop(next(iter(_LOADED)))
        _LOADED[key] = cached
    return cached


# Validating a large DB takes a few hundred milliseconds; replays of an unchanged file skip it.
_LOADED: dict[tuple[Any, ...], tuple[str, Snapshot]] = {}

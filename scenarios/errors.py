"""The error of a scenario file or a tau2 tasks file that cannot be read or does not validate."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from agent.errors import UserFacingError


class ScenarioFileError(UserFacingError):
    """A scenario file that cannot be read or does not match the scenario format.

    The message names the file, the entry (index or YAML document, and id), the field path and
    the reason: `tasks.json: task #2 (id 't3'): evaluation_criteria.actions[0].name: ...`.
    """

    entry: ClassVar[str] = "scenario"
    """What one entry of the file is called in the message ("scenario #2")."""

    def __init__(
        self,
        path: Path,
        reason: str,
        *,
        index: int | None = None,
        document: int | None = None,
        scenario_id: str | None = None,
        field: str | None = None,
    ) -> None:
        where = [str(path)]
        named = f" (id {scenario_id!r})" if scenario_id else ""
        if document is not None:
            where.append(f"document {document}{named}")
        elif index is not None:
            where.append(f"{self.entry} #{index}{named}")
        if field:
            where.append(field)
        super().__init__(": ".join([*where, reason]))
        self.path = path
        """The file."""
        self.index = index
        """Position of the entry in a JSON array or tasks.json, from 0."""
        self.document = document
        """Number of the YAML document in a multi-document file, from 1 (as editors count)."""
        self.scenario_id = scenario_id
        """The entry's id, when it has a string one (a task's id becomes its scenario's id)."""
        self.field = field
        """Dotted path of the field at fault (`evaluation_criteria.actions[0].name`)."""
        self.reason = reason
        """What is wrong, without the location."""


class TaskFileError(ScenarioFileError):
    """A tau2 tasks file (`tasks.json`, `split_tasks.json`) that cannot be read or does not match
    the Task format; entries are named "task #i"."""

    entry: ClassVar[str] = "task"
    """Tasks are named "task #i"."""

    @property
    def task_id(self) -> str | None:
        """The task's id (the same as scenario_id)."""
        return self.scenario_id

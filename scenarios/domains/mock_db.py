"""Record models of the mock domain's agent DB (tasks, users) and user DB (notifications).

These validate and canonicalise state (every field present, unset optionals null); the live DB
itself is plain JSON data in the same layout.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

TaskStatus = Literal["pending", "completed"]


class MockTask(BaseModel):
    """A to-do item."""

    task_id: str
    """Unique id, `task_<n>`."""
    title: str
    """Short title."""
    description: str | None = None
    """Optional longer text."""
    status: TaskStatus
    """pending or completed."""


class MockUser(BaseModel):
    """A user who owns tasks."""

    user_id: str
    """Unique id."""
    name: str
    """Display name."""
    tasks: list[str]
    """Ids of the user's tasks, oldest first."""


class MockDB(BaseModel):
    """The mock agent DB."""

    model_config = ConfigDict(extra="forbid")

    tasks: dict[str, MockTask]
    """Tasks by id."""
    users: dict[str, MockUser]
    """Users by id."""


class Notification(BaseModel):
    """A message in the user's inbox."""

    notification_id: str
    """Unique id."""
    message: str
    """Text shown to the user."""
    task_id: str | None = None
    """Task the notification is about, if any."""
    status: Literal["unread", "read"] = "unread"
    """unread until dismissed."""


class MockUserDB(BaseModel):
    """The mock user-side DB."""

    model_config = ConfigDict(extra="forbid")

    notifications: dict[str, Notification]
    """Notifications by id."""


TABLES: dict[str, type[BaseModel]] = {"tasks": MockTask, "users": MockUser}
USER_TABLES: dict[str, type[BaseModel]] = {"notifications": Notification}

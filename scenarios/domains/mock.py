"""The mock domain: users with tasks (agent side) and a notification inbox (user side)."""

from __future__ import annotations

from typing import Any, Literal

from scenarios.domains.common import TRANSFER_MESSAGE
from scenarios.domains.environment import (
    DomainEnvironment,
    domain_tool,
    env_function,
    validate_record,
)
from scenarios.domains.mock_db import (
    TABLES,
    USER_TABLES,
    MockDB,
    MockTask,
    MockUserDB,
    Notification,
)
from scenarios.domains.store import TableStore
from tools.errors import ToolError


class MockEnvironment(DomainEnvironment):
    """Mock domain: create and update tasks; the user can read and dismiss notifications."""

    name = "mock"
    db_model = MockDB
    tables = TABLES
    user_db_model = MockUserDB
    user_tables = USER_TABLES

    # ----- agent tools -------------------------------------------------------------------

    @domain_tool()
    def create_task(
        self, user_id: str, title: str, description: str | None = None
    ) -> dict[str, Any]:
        """Create a new task for a user."""
        users = self.store.table("users")
        if user_id not in users:
            raise ToolError(f"User {user_id} not found")
        task_id = f"task_{len(self.store.table('tasks')) + 1}"
        task = validate_record(
            MockTask,
            {"task_id": task_id, "title": title, "description": description, "status": "pending"},
            "invalid task",
            ToolError,
        )
        self.store.put("tasks", task_id, task)
        self.store.writable("users", user_id)["tasks"].append(task_id)
        return task

    @domain_tool()
    def get_users(self) -> list[dict[str, Any]]:
        """Get all users in the database."""
        return list(self.store.table("users").values())

    @domain_tool()
    def update_task_status(
        self, task_id: str, status: Literal["pending", "completed"]
    ) -> dict[str, Any]:
        """Update the status of a task."""
        if task_id not in self.store.table("tasks"):
            raise ToolError(f"Task {task_id} not found")
        if status not in ("pending", "completed"):
            raise ToolError(f"Invalid status {status!r}; expected 'pending' or 'completed'")
        task = self.store.writable("tasks", task_id)
        task["status"] = status
        return task

    @domain_tool()
    def transfer_to_human_agents(self, summary: str) -> str:
        """Transfer the user to a human agent."""
        return TRANSFER_MESSAGE

    # ----- agent-side env functions ------------------------------------------------------

    @env_function()
    def assert_number_of_tasks(self, user_id: str, expected_number: int) -> bool:
        """Whether the user has exactly expected_number tasks."""
        users = self.store.table("users")
        if user_id not in users:
            raise ToolError(f"User {user_id} not found")
        return len(users[user_id]["tasks"]) == expected_number

    @env_function()
    def assert_task_status(self, task_id: str, expected_status: str) -> bool:
        """Whether the task has the expected status."""
        tasks = self.store.table("tasks")
        if task_id not in tasks:
            raise ToolError(f"Task {task_id} not found")
        return tasks[task_id]["status"] == expected_status

    # ----- user tools and env functions --------------------------------------------------

    @domain_tool("user")
    def check_notifications(self) -> list[dict[str, Any]]:
        """Check all notifications in the user's inbox."""
        return list(self._inbox().values())

    @domain_tool("user")
    def dismiss_notification(self, notification_id: str) -> str:
        """Dismiss (mark as read) a notification."""
        if notification_id not in self._inbox():
            raise ToolError(f"Notification {notification_id} not found")
        self._user().writable("notifications", notification_id)["status"] = "read"
        return f"Notification {notification_id} dismissed"

    @env_function("user")
    def add_notification(
        self, notification_id: str, message: str, task_id: str | None = None
    ) -> dict[str, Any]:
        """Add (or replace) a notification in the user's inbox."""
        record = validate_record(
            Notification,
            {"notification_id": notification_id, "message": message, "task_id": task_id},
            "invalid notification",
            ToolError,
        )
        self._user().put("notifications", notification_id, record)
        return record

    @env_function("user")
    def assert_notification_status(self, notification_id: str, expected_status: str) -> bool:
        """Whether the notification has the expected status."""
        inbox = self._inbox()
        if notification_id not in inbox:
            raise ToolError(f"Notification {notification_id} not found")
        return inbox[notification_id]["status"] == expected_status

    def _user(self) -> TableStore:
        if self.user_store is None:
            raise ToolError("User tools not available")
        return self.user_store

    def _inbox(self) -> dict[str, Any]:
        return self._user().table("notifications")

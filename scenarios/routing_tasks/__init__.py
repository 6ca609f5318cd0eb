"""The graded routing task set (A²FM): tasks, graders, and oracle labels from real runs.

    from scenarios.routing_tasks import load_tasks, grade
    tasks = load_tasks(split="test")      # the shipped set, data/tasks.jsonl
    grade(tasks[0], "the answer")         # True / False

Build the set with `python -m scenarios.routing_tasks.build`; label it with a model with
`python -m scenarios.routing_tasks.labeling --model NAME --out FILE` (see docs/routing.md).
"""

from __future__ import annotations

from scenarios.routing_tasks.graders import grade
from scenarios.routing_tasks.task import TASKS_PATH, Grader, RoutingTask, load_tasks, write_tasks

__all__ = ["TASKS_PATH", "Grader", "RoutingTask", "grade", "load_tasks", "write_tasks"]

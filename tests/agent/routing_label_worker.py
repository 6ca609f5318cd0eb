"""Worker for the labelling crash test: label a task file with a scripted model, and when the model
is asked to reason about the task at index KILL_AT (in run order: its instant run is done), create
MARKER and hang until killed.

    python routing_label_worker.py TASKS OUT MARKER KILL_AT
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from agent.messages import ModelRequest
from agent.models import FunctionModel
from scenarios.routing_tasks import load_tasks
from scenarios.routing_tasks.labeling import label_to_file
from scenarios.routing_tasks.labels_file import stratified_order


def scripted_answer(request: ModelRequest, tasks: list) -> str:  # type: ignore[type-arg]
    """Knows every gold answer but says it only when told to think step by step (conversions: always)."""
    system = request.messages[0].text if request.messages else ""
    user = next(m.text for m in reversed(request.messages) if m.role == "user")
    task = next(t for t in tasks if t.query == user)
    if "step by step" in system:
        return f"<reasoning>working it out</reasoning>{task.grader.answer}"
    if task.family == "convert":
        return task.grader.answer
    return "I am not sure."


def main() -> None:
    tasks_path, out, marker, kill_at = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]), int(sys.argv[4])
    tasks = stratified_order(load_tasks(tasks_path))
    hang_on = tasks[kill_at].query

    def answer(request: ModelRequest) -> str:
        user = next(m.text for m in reversed(request.messages) if m.role == "user")
        if user == hang_on and "step by step" in request.messages[0].text:
            marker.touch()
            time.sleep(120)
        return scripted_answer(request, tasks)

    label_to_file(FunctionModel(answer, name="scripted"), tasks, out, model_name="scripted")


if __name__ == "__main__":
    main()

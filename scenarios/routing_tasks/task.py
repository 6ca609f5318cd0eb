"""A graded routing task: a query, the tools its agentic run may use, and how its answer is graded."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

Kind = Literal["instant", "reasoning", "tool"]
Split = Literal["train", "validation", "test"]
DATA_DIR = Path(__file__).resolve().parent / "data"
TASKS_PATH = DATA_DIR / "tasks.jsonl"
"""The shipped task set (built by `python -m scenarios.routing_tasks.build`)."""


@dataclass(frozen=True)
class Grader:
    """How an answer is checked: a number, a text with aliases, or an exact string."""

    type: Literal["number", "text", "exact"]
    """number: a number in the answer equals `answer`; text: an alias appears as whole words;
    exact: the answer, trimmed of quotes, spaces and a final period, equals `answer`."""
    answer: str
    """The expected value (as text; numbers are parsed)."""
    aliases: tuple[str, ...] = ()
    """Other accepted spellings (text graders)."""
    ignore_case: bool = False
    """Exact graders: letter case does not count (for tasks whose instruction is not about case)."""


@dataclass(frozen=True)
class RoutingTask:
    """One task of the routing task set."""

    id: str
    """Stable id, `<family>-NNNN`; it does not encode a mode."""
    query: str
    """What the agent (and the router) sees."""
    kind: Kind
    """What the task was built to need: instant, reasoning or tool. Not the oracle label."""
    family: str
    """Generator or source family (trivia, convert, gsm8k, arith, tau2-retail, musique, bignum…)."""
    style: str
    """The phrasing style the query was written in (plain, polite, terse, chatty, customer, relay)."""
    grader: Grader
    """How the final answer is graded."""
    tools: tuple[str, ...] = ()
    """Toolkits the agentic run is given, by name: calculate, retail, airline, retrieval."""
    source: str = "generated"
    """Where the item comes from (a dataset name, or `generated`)."""
    source_item: str = ""
    """The source item; every task of one item lies in one split."""
    source_id: str = ""
    """Locates the item in its source (file and line, task id, DB record, generator seed)."""
    split: Split = "train"
    """train, validation or test, decided by source item."""
    licence: str = "MIT"
    """Licence of the item's text."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Anything else the builder recorded (e.g. the verbatim source text)."""

    def as_json(self) -> dict[str, Any]:
        """JSON-ready form (one line of tasks.jsonl)."""
        out = asdict(self)
        out["grader"]["aliases"] = list(self.grader.aliases)
        if not self.grader.ignore_case:  # the usual case stays out of the file
            del out["grader"]["ignore_case"]
        out["tools"] = list(self.tools)
        return out

    @classmethod
    def from_json(cls, row: dict[str, Any]) -> RoutingTask:
        """Parse one line of tasks.jsonl."""
        g = row["grader"]
        grader = Grader(g["type"], str(g["answer"]), tuple(g.get("aliases", ())), bool(g.get("ignore_case", False)))
        fields = {k: v for k, v in row.items() if k not in ("grader", "tools")}
        return cls(grader=grader, tools=tuple(row.get("tools", ())), **fields)


def load_tasks(path: str | Path = TASKS_PATH, split: str | None = None) -> list[RoutingTask]:
    """Read a task file, optionally one split."""
    rows = [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]
    tasks = [RoutingTask.from_json(r) for r in rows]
    return [t for t in tasks if split is None or t.split == split]


def write_tasks(tasks: list[RoutingTask], path: str | Path) -> None:
    """Write a task file, one JSON object per line."""
    lines = [json.dumps(t.as_json(), ensure_ascii=False, sort_keys=True) for t in tasks]
    Path(path).write_text("\n".join(lines) + "\n", encoding="utf-8")

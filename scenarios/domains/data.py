"""The domain data shipped in scenarios/domains/data/<domain>/: DBs, policies, tool specs, tasks.

Files are parsed once per process and cached; environments share the parsed DB as a Snapshot
and copy records only when they change them.
"""

from __future__ import annotations

import functools
import gzip
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scenarios.domains.store import Snapshot
from tools.tool import ToolKind

DATA_DIR = Path(__file__).resolve().parent / "data"
"""Root of the bundled domain data."""


@dataclass(frozen=True)
class ToolSpec:
    """A tool as tau2 exports it: what the model sees, and whether it changes state."""

    name: str
    """Tool name."""
    description: str
    """Description shown to the model."""
    parameters: dict[str, Any]
    """JSON Schema of the arguments, exactly as tau2 generates it."""
    kind: ToolKind
    """READ, WRITE, GENERIC or THINK."""


@dataclass(frozen=True)
class DomainToolSpecs:
    """A domain's tools.json."""

    agent_tools: list[ToolSpec]
    """Tools of the agent, in tau2's order."""
    user_tools: list[ToolSpec]
    """Tools of the simulated user."""
    env_functions: list[dict[str, Any]]
    """Non-tool env functions (name, side, signature, doc), for documentation."""


def domain_dir(domain: str) -> Path:
    """The bundled data folder of a domain."""
    path = DATA_DIR / domain
    if not path.is_dir():
        known = sorted(p.name for p in DATA_DIR.iterdir() if p.is_dir())
        raise KeyError(f"unknown domain {domain!r}; known: {', '.join(known)}")
    return path


def read_json(path: Path) -> Any:
    """Parse a JSON file, or its gzip-compressed `.gz` twin when only that exists."""
    if not path.exists():
        gz = path.with_name(path.name + ".gz")
        if gz.exists():
            with gzip.open(gz, "rb") as f:
                return json.loads(f.read())
    with path.open("rb") as f:
        return json.loads(f.read())


@functools.cache
def tool_specs(domain: str) -> DomainToolSpecs:
    """The parsed tools.json of a bundled domain."""
    raw = read_json(domain_dir(domain) / "tools.json")

    def specs(items: list[dict[str, Any]]) -> list[ToolSpec]:
        return [
            ToolSpec(
                name=t["name"],
                description=t["description"],
                parameters=t["parameters"],
                kind=ToolKind(t["tool_type"]),
            )
            for t in items
        ]

    return DomainToolSpecs(
        agent_tools=specs(raw["agent_tools"]),
        user_tools=specs(raw["user_tools"]),
        env_functions=list(raw["env_functions_not_tools"]),
    )


@functools.cache
def bundled_snapshot(domain: str, which: str = "db") -> Snapshot | None:
    """The shipped starting DB ("db") or user DB ("user_db") of a domain; None if it has none."""
    folder = domain_dir(domain)
    path = folder / f"{which}.json"
    if not path.exists() and not path.with_name(path.name + ".gz").exists():
        return None
    return Snapshot(read_json(path))


@functools.cache
def domain_policy(domain: str) -> str:
    """The agent policy (markdown) of a bundled domain."""
    return (domain_dir(domain) / "policy.md").read_text(encoding="utf-8")


def tasks_path(domain: str) -> Path:
    """Path of a bundled domain's tasks.json."""
    return domain_dir(domain) / "tasks.json"


def splits_path(domain: str) -> Path:
    """Path of a bundled domain's split_tasks.json."""
    return domain_dir(domain) / "split_tasks.json"

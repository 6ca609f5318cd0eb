"""Plug-ins declared as package entry points, read by group.

Each installed distribution names what it provides in `[project.entry-points."rein.…"]` of its
pyproject.toml, and the host reads the group, so no package of rein names, in a string or an
import, the packages that plug into it (docs/architecture.md).

rein's own plug-ins come from the `rein-runtime` distribution's metadata. When that metadata is
missing or stale (a source tree on sys.path that was never installed, or installed before its
entry points were declared), they are read from the pyproject.toml beside this package instead,
so a checkout still works; plug-ins of other distributions always come from their metadata.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

TOOLKITS = "rein.toolkits"
INTERVENTIONS = "rein.interventions"
GUARDRAILS = "rein.guardrails"
MODE_POLICIES = "rein.mode_policies"
COMMANDS = "rein.commands"
GROUPS = (TOOLKITS, INTERVENTIONS, GUARDRAILS, MODE_POLICIES, COMMANDS)

DISTRIBUTION = "rein-runtime"
_SOURCE_PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


class PluginConflict(ValueError):
    """Two distributions declare one name in one group with different targets."""


@dataclass(frozen=True)
class Plugin:
    """One entry point: a name in a group, the object it names, and who declared it."""

    group: str
    """The entry-point group, e.g. rein.toolkits."""
    name: str
    """The name users type (in a spec, on the command line)."""
    value: str
    """What it names: "module" or "module:attribute"."""
    distribution: str
    """The distribution that declared it (or "rein-runtime (pyproject.toml)" for the fallback)."""

    def load(self) -> Any:
        """Import the module and return the object the entry point names."""
        return metadata.EntryPoint(self.name, self.value, self.group).load()


def plugins(group: str) -> dict[str, list[Plugin]]:
    """Name → every declaration of it in group, rein's own first; names sorted."""
    found: dict[str, list[Plugin]] = {}
    for plugin in [*_own(group), *_others(group)]:
        found.setdefault(plugin.name, []).append(plugin)
    return dict(sorted(found.items()))


def find(group: str, name: str) -> Plugin | None:
    """The plug-in declared under name in group, or None; a PluginConflict when two
    distributions declare the name with different targets (neither is picked silently)."""
    declared = plugins(group).get(name)
    if not declared:
        return None
    if len({p.value for p in declared}) > 1:
        who = ", ".join(f"{p.distribution} ({p.value})" for p in declared)
        raise PluginConflict(f"{group} {name!r} is declared by more than one distribution: {who}")
    return declared[0]


def names(group: str) -> list[str]:
    """Every name declared in group, sorted."""
    return list(plugins(group))


def missing_hint(group: str) -> str:
    """A sentence to add to an "unknown name" error when group is empty."""
    if names(group):
        return ""
    return (
        f" (no {group} entry points are declared: install rein with `pip install -e .`, "
        "or run from its source tree)"
    )


def _own(group: str) -> list[Plugin]:
    try:
        dist = metadata.distribution(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        dist = None
    declared = [
        Plugin(group, ep.name, ep.value, DISTRIBUTION)
        for ep in (dist.entry_points if dist is not None else ())
        if ep.group == group
    ]
    # A group the installed metadata lacks altogether was declared after the install (an editable
    # checkout not reinstalled since): the source tree's pyproject.toml has it.
    return declared or _from_pyproject(group)


def _others(group: str) -> list[Plugin]:
    out = []
    for ep in metadata.entry_points(group=group):
        dist = ep.dist.name if ep.dist is not None else "?"
        if _normalized(dist) != _normalized(DISTRIBUTION):
            out.append(Plugin(group, ep.name, ep.value, dist))
    return out


def _from_pyproject(group: str) -> list[Plugin]:
    """rein's own entry points from the source tree's pyproject.toml (the fallback above)."""
    if not _SOURCE_PYPROJECT.is_file():
        return []
    project = tomllib.loads(_SOURCE_PYPROJECT.read_text(encoding="utf-8")).get("project", {})
    if project.get("name") != DISTRIBUTION:
        return []
    table = project.get("entry-points", {}).get(group, {})
    where = f"{DISTRIBUTION} (pyproject.toml)"
    return [Plugin(group, name, value, where) for name, value in table.items()]


def _normalized(distribution: str) -> str:
    return re.sub(r"[-_.]+", "-", distribution).lower()

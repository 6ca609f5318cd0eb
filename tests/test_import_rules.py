"""The import rules of docs/architecture.md, checked on every module's imports.

Every `import` and `from … import` counts, at module level, inside functions and under
TYPE_CHECKING alike: an arrow drawn late is still an arrow. The table of allowed arrows is read
from docs/architecture.md, so the document and this test cannot drift apart.
"""

from __future__ import annotations

import ast
import functools
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

pytestmark = pytest.mark.core  # needs no extra: also run on the bare core install (.ci/core_check.sh)

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("agent", "tools", "graphs", "interventions", "scenarios")
FACE = ("agent.cli", "agent.server")
DOC = ROOT / "docs" / "architecture.md"
# Module-path strings ("scenarios.domains:mock_toolkit") hide an arrow from this walk; the core
# must not hold any that name a package built on it.
PATH_STRING = re.compile(r"(?P<module>[a-z_]+(?:\.[a-z_0-9]+)*)(?::[\w.]+)?")


@dataclass(frozen=True)
class Arrow:
    """One import: who imports what, and where."""

    source: str
    """The importing module."""
    target: str
    """The imported module (a rein module)."""
    line: int
    """Line of the import statement."""

    def __str__(self) -> str:
        return f"{self.source} → {self.target} (line {self.line})"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    """Every module of rein's packages by dotted name."""
    out = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            out[module_name(path)] = path
    return out


MODULES = modules()


def layer(module: str) -> str:
    """The layer a module belongs to: tools, core, face, graphs, interventions or scenarios."""
    top = module.split(".")[0]
    if top != "agent":
        return top
    if any(module == f or module.startswith(f + ".") for f in FACE):
        return "face"
    return "core"


def _target(base: str, name: str | None) -> str:
    """`from base import name`: the submodule when name is one, else base itself."""
    if name and f"{base}.{name}" in MODULES:
        return f"{base}.{name}"
    return base


def arrows(module: str, path: Path) -> list[Arrow]:
    """Every import of a rein module that module makes, anywhere in its file."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out = []
    for node in ast.walk(tree):
        targets: list[str]
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            targets = [_target(base, a.name) for a in node.names]
        else:
            continue
        out += [Arrow(module, t, node.lineno) for t in targets if t.split(".")[0] in PACKAGES]
    return out


def allowed_from_doc() -> dict[str, set[str]]:
    """The "may import" table of docs/architecture.md: layer → layers it may import."""
    table: dict[str, set[str]] = {}
    for line in DOC.read_text(encoding="utf-8").splitlines():
        cells = [c.strip(" `") for c in line.strip().strip("|").split("|")]
        if len(cells) >= 3 and line.lstrip().startswith("|") and cells[0] in LAYERS:
            table[cells[0]] = {c.strip(" `") for c in cells[2].split(",") if c.strip(" `")} - {"—"}
    return table


LAYERS = ("tools", "core", "face", "graphs", "interventions", "scenarios")
ALLOWED: dict[str, set[str]] = {
    "tools": set(),
    "core": {"tools"},
    "face": {"core", "tools"},
    "graphs": {"core", "tools"},
    "interventions": {"core", "tools"},
    "scenarios": {"core", "tools", "graphs", "interventions"},
}


@functools.cache
def all_arrows() -> list[Arrow]:
    return [a for m, p in MODULES.items() for a in arrows(m, p)]


def test_the_document_states_the_rules_this_test_enforces() -> None:
    assert allowed_from_doc() == ALLOWED


def test_every_import_follows_the_layers() -> None:
    bad = [a for a in all_arrows() if layer(a.target) not in ALLOWED[layer(a.source)] | {layer(a.source)}]
    assert not bad, "imports that break docs/architecture.md:\n" + "\n".join(map(str, bad))


def test_every_import_names_a_module_that_exists() -> None:
    # A walk that misread imports (a moved module, a typo) would see no arrows and pass.
    missing = [a for a in all_arrows() if a.target not in MODULES]
    assert not missing, "\n".join(map(str, missing))
    assert len(all_arrows()) > 200


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_tools_the_core_and_the_face_have_no_import_cycles() -> None:
    # A package's __init__ re-exporting its own submodules is not a cycle worth breaking.
    graph: dict[str, set[str]] = {}
    for a in all_arrows():
        inside = {layer(a.source), layer(a.target)} <= {"tools", "core", "face"}
        if inside and not a.target.startswith(a.source + "."):
            graph.setdefault(a.source, set()).add(a.target)
    assert _cycles(graph) == []


def test_cycle_finder_sees_a_cycle() -> None:
    assert _cycles({"agent.runtime": {"agent.spec"}, "agent.spec": {"agent.runtime"}}) == [["agent.runtime", "agent.spec"]]


@pytest.mark.parametrize("upper", ["tools", "core", "face"])
def test_no_module_path_strings_name_a_package_above(upper: str) -> None:
    above = {lay for lay in LAYERS if lay not in ALLOWED[upper] | {upper}}
    bad = []
    for module, path in MODULES.items():
        if layer(module) != upper:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                m = PATH_STRING.fullmatch(node.value)
                # A bare package name is also a word ("interventions" as a state key); a path has a dot or colon.
                dotted = "." in node.value or ":" in node.value
                if m and dotted and m["module"] in MODULES and layer(m["module"]) in above:
                    bad.append(f"{module}: {node.value!r} (line {node.lineno})")
    assert not bad, "\n".join(bad)


def test_the_files_the_document_names_exist() -> None:
    # A renamed module leaves a stale name behind in prose that no import walk sees.
    named = set(re.findall(r"`([\w/]+\.py)`", DOC.read_text(encoding="utf-8")))
    assert {"runtime.py", "tools/entry_points.py"} <= named  # the pattern finds them at all
    missing = [p for p in sorted(named) if not any((ROOT / base / p).is_file() for base in ("", *PACKAGES))]
    assert not missing, f"docs/architecture.md names files that do not exist: {missing}"

"""Toolkits (ordered, named collections of tools) and toolkits found by name.

A name is looked up among the factories registered in this process, then in the "rein.toolkits"
entry points of the installed distributions (tools/entry_points.py), so this package never names
the packages that plug toolkits into it (domains, retrieval, the sandbox).
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

from tools import entry_points
from tools.tool import Tool

F = TypeVar("F", bound=Callable[..., Any])

_FACTORY_MARK = "__rein_toolkit_factory__"
# Containers whose iteration runs no user code: a resolved object of any other type is never iterated.
_TOOL_CONTAINERS = (list, tuple, set, frozenset)


class Toolkit:
    """An ordered set of tools with unique names."""

    def __init__(self, tools: Iterable[Tool] = (), name: str = "toolkit") -> None:
        self.name = name
        self._tools: dict[str, Tool] = {}
        for t in tools:
            self.add(t)

    def add(self, t: Tool) -> None:
        """Add a tool; a second tool with the same name is an error."""
        if t.name in self._tools:
            raise ValueError(f"toolkit {self.name!r} already has a tool named {t.name!r}")
        self._tools[t.name] = t

    def get(self, name: str) -> Tool | None:
        """The tool with this name, or None."""
        return self._tools.get(name)

    def __getitem__(self, name: str) -> Tool:
        return self._tools[name]

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __iter__(self) -> Iterator[Tool]:
        return iter(self._tools.values())

    def __len__(self) -> int:
        return len(self._tools)

    def as_dict(self) -> dict[str, Tool]:
        """Name → tool, in declaration order."""
        return dict(self._tools)

    def schemas(self) -> list[dict[str, Any]]:
        """OpenAI function schemas of every tool."""
        return [t.openai_schema() for t in self._tools.values()]

    def merged(self, other: Iterable[Tool]) -> Toolkit:
        """A new toolkit with this one's tools followed by other tools not already present."""
        out = Toolkit(self, name=self.name)
        for t in other:
            if t.name not in out:
                out.add(t)
        return out


ToolkitFactory = Callable[..., Toolkit | Iterable[Tool]]


def toolkit_factory(fn: F) -> F:
    """Mark a function as a toolkit factory: a "module:attribute" tools entry may then call it.

    Unmarked callables named by such an entry are refused, never called, so a spec cannot make
    the loader run an arbitrary function (`os:getpid`).
    """
    setattr(fn, _FACTORY_MARK, True)
    return fn


def is_toolkit_factory(obj: Any) -> bool:
    """Whether obj was marked with @toolkit_factory."""
    # getattr_static: looking for the mark must not run the object's own __getattr__ or properties.
    return inspect.getattr_static(obj, _FACTORY_MARK, False) is True

# Toolkits registered in this process (register_toolkit); they shadow entry points of one name.
_FACTORIES: dict[str, str | ToolkitFactory] = {}


def register_toolkit(name: str, factory: str | ToolkitFactory) -> None:
    """Make a toolkit available by name in this process; factory is a callable or a
    "module:attribute" path. A distribution declares one for everyone as a "rein.toolkits"
    entry point instead."""
    _FACTORIES[name] = factory


def toolkit_names() -> list[str]:
    """Every toolkit name: the registered ones and the "rein.toolkits" entry points."""
    return sorted({*_FACTORIES, *entry_points.names(entry_points.TOOLKITS)})


def load_toolkit(name: str, **options: Any) -> Toolkit:
    """Build the toolkit registered or declared under name.

    An entry point's factory is called without the @toolkit_factory mark: an installed
    distribution declared it, which is the trust a spec's "module:attribute" path lacks.
    """
    factory = _FACTORIES.get(name)
    if factory is None:
        try:
            plugin = entry_points.find(entry_points.TOOLKITS, name)
        except entry_points.PluginConflict as exc:
            raise KeyError(str(exc)) from None
        if plugin is None:
            hint = entry_points.missing_hint(entry_points.TOOLKITS)
            raise KeyError(f"unknown toolkit {name!r}; known: {', '.join(toolkit_names())}{hint}")
        factory = plugin.load()
    elif isinstance(factory, str):
        factory = resolve(factory)
    if not callable(factory):
        raise ValueError(f"toolkit {name!r} names a {_kind(factory)}, not a toolkit factory")
    return as_toolkit(_listed(factory(**options)), name)


def load_tools_at(path: str) -> Toolkit:
    """The tools a "module:attribute" path names: a Tool, a Toolkit, a list/tuple/set of Tools,
    or a function marked @toolkit_factory (called with no arguments). Anything else is a
    ValueError naming the path, and nothing is called."""
    obj = resolve(path)
    if is_toolkit_factory(obj):
        obj = _listed(obj())
    elif callable(obj) and not isinstance(obj, Tool | Toolkit):
        raise ValueError(
            f"{path} is a {_kind(obj)}, not a rein Tool, Toolkit or list of Tools; "
            "a function that builds tools must be marked @tools.toolkit_factory"
        )
    return as_toolkit(obj, path)


def as_toolkit(obj: Any, name: str) -> Toolkit:
    """obj as a Toolkit when it is one, a Tool, or a list/tuple/set of Tools; else a ValueError."""
    if isinstance(obj, Toolkit):
        return obj
    if isinstance(obj, Tool):
        return Toolkit([obj], name=name)
    if not isinstance(obj, _TOOL_CONTAINERS):
        raise ValueError(f"{name} is a {_kind(obj)}, not a rein Tool, Toolkit or list of Tools")
    items = list(obj)
    bad = next((t for t in items if not isinstance(t, Tool)), None)
    if bad is not None:
        raise ValueError(f"{name} holds a {_kind(bad)}, not only rein Tools")
    return Toolkit(items, name=name)


def _listed(built: Any) -> Any:
    """A factory's result with any iterable made a list: a factory is trusted code, so iterating
    what it returns (a generator, say) is fine, unlike iterating an object a path merely names."""
    if isinstance(built, Toolkit | Tool | str | bytes | dict) or not isinstance(built, Iterable):
        return built
    return list(built)


def _kind(obj: Any) -> str:
    return type(obj).__name__


def resolve(path: str) -> Any:
    """Import "package.module:attribute" and return the attribute."""
    module, _, attr = path.partition(":")
    if not attr:
        raise ValueError(f"expected 'module:attribute', got {path!r}")
    obj: Any = importlib.import_module(module)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj

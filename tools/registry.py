"""Toolkits (ordered, named collections of tools) and a by-name registry of toolkit factories.

The registry maps names to "module:attribute" strings, so this package never imports the
packages that plug toolkits into it (domains, retrieval, the sandbox) until a name is asked for.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from tools.tool import Tool


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

_FACTORIES: dict[str, str | ToolkitFactory] = {
    "builtin": "tools.builtin:builtin_toolkit",
    "recovery": "tools.builtin:recovery_toolkit",
    "python": "tools.sandbox_tool:python_toolkit",
    "mock": "scenarios.domains:mock_toolkit",
    "retail": "scenarios.domains:retail_toolkit",
    "airline": "scenarios.domains:airline_toolkit",
    "retrieval": "graphs.tool:retrieval_toolkit",
}


def register_toolkit(name: str, factory: str | ToolkitFactory) -> None:
    """Make a toolkit available by name; factory is a callable or a "module:attribute" path."""
    _FACTORIES[name] = factory


def toolkit_names() -> list[str]:
    """Every registered toolkit name."""
    return sorted(_FACTORIES)


def load_toolkit(name: str, **options: Any) -> Toolkit:
    """Build the toolkit registered under name."""
    factory = _FACTORIES.get(name)
    if factory is None:
        raise KeyError(f"unknown toolkit {name!r}; known: {', '.join(toolkit_names())}")
    if isinstance(factory, str):
        factory = resolve(factory)
    built = factory(**options)
    return built if isinstance(built, Toolkit) else Toolkit(built, name=name)


def resolve(path: str) -> Any:
    """Import "package.module:attribute" and return the attribute."""
    module, _, attr = path.partition(":")
    if not attr:
        raise ValueError(f"expected 'module:attribute', got {path!r}")
    obj: Any = importlib.import_module(module)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj

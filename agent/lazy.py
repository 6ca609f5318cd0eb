"""Lazy package exports: names are imported from their modules on first use.

Packages use it so that importing them (and `rein --help`) stays fast and never loads torch,
chromadb or llama.cpp until a name that needs them is touched.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(package: str, exports: Mapping[str, str]) -> Callable[[str], Any]:
    """A module-level `__getattr__` that imports `exports[name]` and returns its `name`."""

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(module), name)

    return __getattr__

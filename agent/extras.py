"""Optional features and the extras that install them.

`pip install rein-runtime` is the core (the runtime, tools, scenarios, the OpenAI-compatible
adapter); the embedded model, QuadGraph retrieval, jigsaw, the server and the rest are extras of
pyproject.toml. Code that needs one imports it inside `needs_extra(...)`, so a missing extra is a
`MissingExtra` that names what to install, not a bare ModuleNotFoundError:

    with needs_extra("graphs", "QuadGraph retrieval"):
        import networkx as nx
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from contextlib import contextmanager

from agent.errors import UserFacingError
from tools.entry_points import DISTRIBUTION

# Our own top-level packages: a missing module of ours is a broken install, never an extra.
_OURS = frozenset({"agent", "tools", "graphs", "interventions", "scenarios"})


class MissingExtra(UserFacingError, ImportError):
    """A feature was used whose extra is not installed.

    It is also an ImportError, so `except ImportError` fallbacks and `pytest.importorskip` keep
    working; the CLI prints it as a user error without a traceback.
    """

    def __init__(self, extra: str, feature: str, module: str) -> None:
        super().__init__(
            f"{feature} needs the {extra} extra (no module {module!r}): {install_hint(extra)}"
        )
        self.extra = extra
        """The extra to install, e.g. "graphs"."""
        self.feature = feature
        """What was being used, e.g. "QuadGraph retrieval"."""
        self.module = module
        """The module that was missing, e.g. "networkx"."""
        self.name = module  # ImportError's own field, for code that reads it


def install_hint(extra: str) -> str:
    """The command that installs an extra."""
    return f"pip install '{DISTRIBUTION}[{extra}]'"


@contextmanager
def needs_extra(extra: str, feature: str) -> Iterator[None]:
    """Turn a third-party module missing inside the block into a MissingExtra naming `extra`."""
    try:
        yield
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if not missing or missing.split(".")[0] in _OURS:
            raise
        raise MissingExtra(extra, feature, missing) from exc


def check_extra(extra: str, feature: str, *modules: str) -> None:
    """Raise MissingExtra now, before any work starts, when a module of `extra` is not installed
    (looked up, not imported, so the check costs nothing when it is)."""
    for module in modules:
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):  # ValueError: blocked by sys.modules[module] = None
            found = False
        if not found:
            raise MissingExtra(extra, feature, module)

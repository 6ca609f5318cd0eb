"""Suite-wide settings: no hub access, and rein's home (threads DB, caches) in a temp folder."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from pg_cluster import postgres_url  # noqa: F401  (a session fixture for every test)

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

SHARED_DATA = (Path(__file__).resolve().parents[1] / ".." / "shared" / "data").resolve()


@pytest.fixture(autouse=True, scope="session")
def _rein_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    # Threads databases must never land in the developer's real ~/.local/share/rein during tests.
    home = tmp_path_factory.mktemp("rein-home")
    previous = os.environ.get("REIN_HOME")
    os.environ["REIN_HOME"] = str(home)
    yield home
    if previous is None:
        os.environ.pop("REIN_HOME", None)
    else:
        os.environ["REIN_HOME"] = previous


@pytest.fixture
def shared_data() -> Path:
    """../shared/data beside the repository; tests that need it skip when it is absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared test data not found at {SHARED_DATA}")
    return SHARED_DATA

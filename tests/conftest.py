"""Suite-wide settings: no hub access, no network beyond this machine, and rein's home (threads
DB, caches) in a temp folder."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import net_guard
import pytest
from pg_cluster import postgres_url  # noqa: F401  (a session fixture for every test)

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# A forgotten real-model path, in this process or a subprocess, fails fast on a dead loopback
# port (9, discard) instead of reaching api.openai.com; tests that talk to a model server set
# their own URL.
os.environ["OPENAI_BASE_URL"] = "http://127.0.0.1:9/v1"
os.environ.pop("OPENAI_API_KEY", None)

SHARED_DATA = (Path(__file__).resolve().parents[1] / ".." / "shared" / "data").resolve()

GUARD = net_guard.Guard()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", f"{net_guard.MARKER}: the test may reach hosts beyond this machine (tests/net_guard.py)"
    )


@pytest.fixture(autouse=True, scope="session")
def _network_guard() -> Iterator[net_guard.Guard]:
    with net_guard.installed(GUARD) as guard:
        yield guard


@pytest.fixture(autouse=True)
def _no_network(request: pytest.FixtureRequest, _network_guard: net_guard.Guard) -> Iterator[None]:
    # Refusals are checked after the test as well: a client (or a background thread) may have
    # swallowed the error.
    allowed = request.node.get_closest_marker(net_guard.MARKER) is not None
    _network_guard.take()
    _network_guard.enabled = not allowed
    try:
        yield
    finally:
        _network_guard.enabled = True
    refused = _network_guard.take()
    if refused:
        pytest.fail("the test reached beyond this machine: " + "; ".join(dict.fromkeys(refused)), pytrace=False)


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


@pytest.fixture
def spans() -> Iterator[Any]:
    """Tracing on, into an in-memory exporter (yielded), contents off; off again afterwards."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from agent import tracing

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.enable(provider=provider, capture_content=False)
    try:
        yield exporter
    finally:
        tracing.disable()

"""Fixtures of the graphs tests: an isolated embedding cache, the embedder, and a small built graph."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from graphs_testdata import corpus, doc_triples


@pytest.fixture(scope="session", autouse=True)
def _embed_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    # Keep the on-disk embedding cache of CLI runs out of the developer's home.
    path = tmp_path_factory.mktemp("embed-cache") / "embeddings.sqlite"
    previous = os.environ.get("REIN_EMBED_CACHE")
    os.environ["REIN_EMBED_CACHE"] = str(path)
    yield path
    if previous is None:
        os.environ.pop("REIN_EMBED_CACHE", None)
    else:
        os.environ["REIN_EMBED_CACHE"] = previous


@pytest.fixture(scope="session")
def embedder():  # noqa: ANN201 - returns rein's MiniLM embedder
    from graphs.embedding import minilm_embedder

    return minilm_embedder()


@pytest.fixture(scope="session")
def small_graph(embedder):  # noqa: ANN001, ANN201
    """The invented corpus built from its hand-written triples (in memory, not saved)."""
    from graphs.build import BuildOptions, build_quadgraph

    return build_quadgraph(corpus(), doc_triples(), embedder, BuildOptions(min_community_size=2), extractor="given")


@pytest.fixture(scope="session")
def saved_graph(small_graph, tmp_path_factory: pytest.TempPathFactory) -> Path:  # noqa: ANN001
    """small_graph saved to a folder."""
    from graphs.store import save_graph

    return save_graph(small_graph, tmp_path_factory.mktemp("graphs") / "small")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def chroma_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real `chroma run` on a free loopback port over a temp folder; yields its URL."""
    exe = Path(sys.executable).with_name("chroma")
    if not exe.exists():
        exe = Path(shutil.which("chroma") or "chroma")
    folder = tmp_path_factory.mktemp("chroma-server")
    port = free_port()
    log = (folder / "server.log").open("wb")
    env = {**os.environ, "ANONYMIZED_TELEMETRY": "False"}
    try:
        proc = subprocess.Popen(
            [str(exe), "run", "--path", str(folder / "db"), "--host", "127.0.0.1", "--port", str(port)],
            stdout=log, stderr=subprocess.STDOUT, env=env,
        )
    except OSError as exc:
        pytest.skip(f"`chroma run` cannot start: {exc}")
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            with urllib.request.urlopen(f"{url}/api/v2/heartbeat", timeout=1):
                break
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            proc.wait()
            tail = (folder / "server.log").read_text(errors="replace")[-800:]
            pytest.skip(f"`chroma run` did not come up on {url}: {tail}")
        time.sleep(0.2)
    yield url
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    log.close()

"""Fixtures of the graphs tests: an isolated embedding cache, the embedder, and a small built graph."""

from __future__ import annotations

import os
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

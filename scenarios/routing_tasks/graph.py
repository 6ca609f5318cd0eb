"""The retrieval tasks' graph: a QuadGraph over the MuSiQue-100 corpus, built on first use.

The MuSiQue tasks ask the questions of `../shared/data/musique/musique_100.json`; their agentic
runs search its 1,890-passage corpus with the `retrieval` toolkit. The graph is built the way
`rein graph build --corpus musique_100_corpus.json --triples musique_100_openie.json` builds it
(the given gpt-3.5 OpenIE triples, MiniLM embeddings cached on disk) into a folder the first time
a labelling run needs it, and loaded from there afterwards. It is tens of megabytes of embeddings,
so it is not shipped.

The runs retrieve with `dense` (MiniLM similarity): the shipped GFM checkpoint was trained on 50
of these 100 questions, which would make the agentic runs on them look better than they are.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from agent.errors import UserFacingError

REPO = Path(__file__).resolve().parents[2]
MUSIQUE_DIR = (REPO / ".." / "shared" / "data" / "musique").resolve()
"""Where the MuSiQue-100 files are by default (the repository's sibling `shared/`)."""
CORPUS = "musique_100_corpus.json"
TRIPLES = "musique_100_openie.json"
RETRIEVER = "dense"
"""The retriever the tasks' agentic runs use (see the module docstring)."""


def is_graph(folder: Path) -> bool:
    """Whether `folder` holds a saved graph (its manifest)."""
    return (folder / "manifest.json").is_file()


def ensure_graph(folder: str | Path, musique_dir: str | Path = MUSIQUE_DIR) -> Path:
    """`folder` as a graph folder: as it is when it holds one, built from `musique_dir` when it is
    missing or empty; a clear error when it holds something else or the MuSiQue files are absent."""
    out = Path(folder)
    if is_graph(out):
        return out
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UserFacingError(
            f"--graph {out} is neither empty nor a graph folder (no manifest.json); a build that was "
            "interrupted leaves such a folder: delete it and run again to rebuild")
    source = Path(musique_dir)
    missing = [name for name in (CORPUS, TRIPLES) if not (source / name).is_file()]
    if missing:
        raise UserFacingError(
            f"cannot build the retrieval graph: {', '.join(missing)} not found in {source} "
            "(the MuSiQue-100 files of ../shared/data/musique); pass --musique-dir, or run without "
            "--graph to skip the retrieval tasks")
    from graphs.build import BuildOptions, build_quadgraph
    from graphs.corpus import load_corpus, load_openie
    from graphs.cpu_threads import limit_threads
    from graphs.embedding import resolve_embedder
    from graphs.store import save_graph

    limit_threads()
    started = time.perf_counter()
    print(f"building the retrieval graph from {source} into {out} (minutes on a cold embedding cache)",
          file=sys.stderr, flush=True)
    corpus = load_corpus(source / CORPUS)
    docs = load_openie(source / TRIPLES, corpus)
    qg = build_quadgraph(corpus, docs, resolve_embedder(cache=True), BuildOptions(), extractor="openie-file")
    save_graph(qg, out)
    print(f"retrieval graph built in {time.perf_counter() - started:.0f} s: {out}", file=sys.stderr, flush=True)
    return out


__all__ = ["MUSIQUE_DIR", "RETRIEVER", "ensure_graph", "is_graph"]

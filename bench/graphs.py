"""QuadGraph benchmark: build time per 1,000 passages, query latency per retriever, GFM cost vs graph size.

- Build, cold: the offline extractor plus graph assembly on the first --cold-passages passages of
  MuSiQue-100 with an empty embedding cache (MiniLM embeds every node and relation text),
  scaled to 1,000 passages. Build, warm: the whole corpus from its OpenIE triples with embeddings
  already cached (structure, synonyms, Louvain).
- Query latency: median and p95 wall time of one `rank` call per retriever on the OpenIE graph,
  over --queries questions (query embedding included).
- GFM cost vs size: the OpenIE graph copied 1x, 4x and 16x (disjoint copies, node texts jittered
  so that copies are not identical), GFM forward time for one query on the whole graph and on
  the query subgraph that retrieval uses.
Everything runs on one thread (REIN_THREADS to change). Run by hand:

    python bench/graphs.py [--queries 20] [--cold-passages 200] [--sizes 1 4 16] [--json-out FILE]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

# This file shares its name with the `graphs` package: keep bench/ off the import path.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

from graphs.cpu_threads import limit_threads  # noqa: E402

DATA = (Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "musique").resolve()


def timed(fn: Callable[[], Any], repeats: int) -> dict[str, float]:
    """Median and p95 of fn's wall time in milliseconds."""
    samples = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t) * 1000)
    samples.sort()
    return {"median_ms": round(statistics.median(samples), 2),
            "p95_ms": round(samples[min(len(samples) - 1, int(0.95 * len(samples)))], 2), "runs": repeats}


def bench_build(corpus: list[Any], openie: list[Any], cold_passages: int) -> dict[str, Any]:
    from graphs.build import build_quadgraph
    from graphs.embedding import CachedEmbedder, resolve_embedder
    from graphs.extract import extract_offline

    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        sub = corpus[:cold_passages]
        t = time.perf_counter()
        qg = build_quadgraph(sub, extract_offline(sub), CachedEmbedder(path=Path(tmp) / "cold.sqlite"), extractor="offline")
        cold = time.perf_counter() - t
    out["cold_offline"] = {"passages": len(sub), "seconds": round(cold, 1),
                           "seconds_per_1000_passages": round(cold * 1000 / len(sub), 1),
                           "nodes": qg.g.number_of_nodes(), "timings_s": qg.meta["build_timings"]}
    embed = resolve_embedder()
    embed([p.key for p in corpus[:1]])  # load the encoder outside the timing
    t = time.perf_counter()
    qg = build_quadgraph(corpus, openie, embed, extractor="openie")
    warm = time.perf_counter() - t
    out["warm_openie"] = {"passages": len(corpus), "seconds": round(warm, 1),
                          "seconds_per_1000_passages": round(warm * 1000 / len(corpus), 1),
                          "nodes": qg.g.number_of_nodes(), "edges": qg.g.number_of_edges(),
                          "timings_s": {k: round(v, 2) for k, v in qg.meta["build_timings"].items()}}
    out["_graph"] = qg
    return out


def bench_latency(qg: Any, questions: list[Any], n: int) -> dict[str, Any]:
    from graphs.embedding import resolve_embedder
    from graphs.retriever_registry import RETRIEVERS, make_retriever
    from graphs.store import load_graph, save_graph

    embed = resolve_embedder()
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        save_graph(qg, Path(tmp) / "g")
        loaded = load_graph(Path(tmp) / "g")
        for name in RETRIEVERS:
            r = make_retriever(name, loaded, embed)
            r.rank(questions[0].text, 5)
            texts = iter([q.text for q in questions[:n]] * 2)
            out[name] = timed(lambda r=r, texts=texts: r.rank(next(texts), 5), min(n, len(questions)))
    return out


def bench_gfm_scaling(qg: Any, questions: list[Any], sizes: list[int], repeats: int) -> dict[str, Any]:
    import numpy as np
    import torch

    from graphs.embedding import resolve_embedder
    from graphs.gfm.checkpoint import load_checkpoint
    from graphs.gfm.gfm_retriever import subgraph_options
    from graphs.gfm.scorer import GFMScorer
    from graphs.gfm.subgraph import QueryGraphSampler
    from graphs.pyg import PygGraph, to_pyg

    model = load_checkpoint()
    base = to_pyg(qg)
    embed = resolve_embedder()
    scorer = GFMScorer(qg, embed, model, subgraph=subgraph_options(model), pyg=base)
    prepared = scorer.prepare([questions[0].text])[0]
    seeds = {int(r): float(w) for r, w in zip(prepared.graph.rows, prepared.graph.seeds, strict=True) if w > 0}
    rng = np.random.default_rng(0)
    out: dict[str, Any] = {}
    for k in sizes:
        n, e = base.num_nodes, base.data.edge_index.shape[1]
        text = base.node_text.repeat(k, 1)
        if k > 1:
            text = text + torch.from_numpy(rng.normal(0, 0.01, size=tuple(text.shape)).astype(np.float32))
            text = text / text.norm(dim=1, keepdim=True)
        offsets = (torch.arange(k) * n).repeat_interleave(e)
        data = base.data.clone()
        data.edge_index = base.data.edge_index.repeat(1, k) + offsets
        data.edge_type = base.data.edge_type.repeat(k)
        data.node_type = base.data.node_type.repeat(k)
        data.num_nodes = n * k
        grown = PygGraph(data=data, node_ids=[f"{c}:{i}" for c in range(k) for i in base.node_ids], node_text=text,
                         relation_texts=base.relation_texts, relation_text=base.relation_text,
                         doc_rows=torch.cat([base.doc_rows + c * n for c in range(k)]))
        row: dict[str, Any] = {"nodes": n * k, "directed_edges": e * k}
        for mode in ("full_graph", "query_subgraph"):
            opts = subgraph_options(model)
            opts.full_graph = mode == "full_graph"
            sampler = QueryGraphSampler(grown, opts)
            t = time.perf_counter()
            graph = sampler.query_graph(prepared.vec, seeds)
            build_ms = (time.perf_counter() - t) * 1000
            batch = sampler.collate(prepared.vec[None], [graph])
            with torch.no_grad():
                model(batch)
                stats = timed(lambda batch=batch: model(batch), repeats)
            row[mode] = {"query_graph_nodes": len(graph.rows), "build_query_graph_ms": round(build_ms, 1), **stats}
        out[f"{k}x"] = row
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--queries", type=int, default=20)
    parser.add_argument("--cold-passages", type=int, default=200)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--repeats", type=int, default=3, help="GFM forward repeats per size")
    parser.add_argument("--json-out", default=None)
    args = parser.parse_args()
    threads = limit_threads()

    from graphs.corpus import load_corpus, load_openie, load_questions

    if not (DATA / "musique_100_corpus.json").is_file():
        raise SystemExit(f"MuSiQue data not found at {DATA}")
    corpus = load_corpus(DATA / "musique_100_corpus.json")
    openie = load_openie(DATA / "musique_100_openie.json", corpus)
    questions = load_questions(DATA / "musique_100.json", corpus)
    result: dict[str, Any] = {"machine": {"python": platform.python_version(), "processor": platform.machine(),
                                          "threads": threads}}
    build = bench_build(corpus, openie, args.cold_passages)
    qg = build.pop("_graph")
    result["build"] = build
    print(json.dumps({"build": build}, indent=2), flush=True)
    result["query_latency_ms"] = bench_latency(qg, questions, args.queries)
    print(json.dumps({"query_latency_ms": result["query_latency_ms"]}, indent=2), flush=True)
    result["gfm_scaling"] = bench_gfm_scaling(qg, questions, args.sizes, args.repeats)
    print(json.dumps({"gfm_scaling": result["gfm_scaling"]}, indent=2), flush=True)
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()

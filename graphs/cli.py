"""`rein graph build|train|query|eval`: QuadGraph retrieval from the command line."""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from agent.errors import UserFacingError

_RETRIEVERS = ("bm25", "dense", "ppr", "gfm")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True, metavar="{build,train,query,eval}")

    b = sub.add_parser("build", help="build a QuadGraph folder from a corpus")
    b.add_argument("--corpus", required=True, help="JSON list of {title, text}")
    b.add_argument("--out", required=True, help="graph folder to write")
    src = b.add_mutually_exclusive_group()
    src.add_argument("--triples", help="OpenIE file aligned with the corpus (HippoRAG layout)")
    src.add_argument("--extractor", choices=("offline", "llm"), default=None,
                     help="extract triples offline (default without --triples) or with --model")
    b.add_argument("--model", default=None, help="rein model for --extractor llm (e.g. local:qwen2.5-coder-0.5b)")
    _build_options(b)
    _store_option(b, "where to write the embeddings")
    b.add_argument("--store-name", default=None, help="the graph's name in a shared store (default: the folder name)")
    b.add_argument("--overwrite", action="store_true", help="replace an existing graph folder")
    b.add_argument("--json", action="store_true", help="print the summary as JSON")

    t = sub.add_parser("train", help="train a GFM checkpoint on a graph")
    t.add_argument("--graph", required=True, help="graph folder")
    t.add_argument("--out", required=True, help="checkpoint path (.pt; the config goes to .json)")
    t.add_argument("--questions", help="labeled questions (MuSiQue layout) over the graph's corpus; only the train split is used")
    t.add_argument("--split-seed", type=int, default=0, help="seed of the fixed train/test split")
    t.add_argument("--train-fraction", type=float, default=0.5, help="share of labeled questions in the train split")
    t.add_argument("--val", type=int, default=10, help="train-split questions held back for checkpoint selection")
    t.add_argument("--size", choices=("small", "paper"), default="small", help="small (default) or the ~34M-parameter config")
    t.add_argument("--steps", type=int, default=400)
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--time-limit", type=float, default=None, help="stop training after this many seconds")
    _store_option(t)
    t.add_argument("--json", action="store_true")

    q = sub.add_parser("query", help="retrieve passages for one query")
    q.add_argument("query")
    q.add_argument("--graph", required=True, help="graph folder")
    q.add_argument("--retriever", choices=_RETRIEVERS, default="gfm")
    q.add_argument("--model", default=None, help="GFM checkpoint (default: shipped)")
    q.add_argument("-k", type=int, default=5)
    _store_option(q)
    q.add_argument("--json", action="store_true")

    e = sub.add_parser("eval", help="Recall@2/@5 per retriever on MuSiQue-layout files")
    e.add_argument("--questions", required=True, help="questions in the MuSiQue layout")
    e.add_argument("--corpus", required=True, help="corpus: JSON list of {title, text}")
    e.add_argument("--triples", help="OpenIE triples (without: the offline extractor builds the graph)")
    e.add_argument("--retriever", action="append", choices=_RETRIEVERS, help="repeatable; default: all four")
    e.add_argument("--model", default=None, help="GFM checkpoint (default: shipped)")
    e.add_argument("--graph", default=None, help="graph folder to reuse (built and saved there when absent)")
    _store_option(e, "where a built graph's embeddings go, or where to read a reused graph's")
    _build_options(e)
    e.add_argument("--json", action="store_true")


def _store_option(p: argparse.ArgumentParser, what: str = "where to read the embeddings") -> None:
    p.add_argument("--store", default=None, metavar="PATH|URL",
                   help=f"{what}: a chromadb folder or a Chroma server URL such as http://127.0.0.1:8001 "
                        "(default: the graph folder's own chroma/, or the store it was built into)")


def _build_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--synonym-threshold", type=float, default=0.85, help="cosine for `equivalent` edges")
    p.add_argument("--no-communities", action="store_true", help="skip the community layer")
    p.add_argument("--embed-cache", default=None, help="SQLite embedding cache (default ~/.cache/rein/embeddings.sqlite)")


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _embedder(args: argparse.Namespace) -> Any:
    from graphs.embedding import resolve_embedder

    return resolve_embedder(cache=getattr(args, "embed_cache", None) or True)


def _build(args: argparse.Namespace, corpus: list[Any], embedder: Any) -> Any:
    from graphs.build import BuildOptions, build_quadgraph
    from graphs.corpus import load_openie

    if not 0.0 < args.synonym_threshold <= 1.0:
        raise UserFacingError("--synonym-threshold must be in (0, 1]")
    opts = BuildOptions(synonym_threshold=args.synonym_threshold, communities=not args.no_communities)
    t = time.perf_counter()
    if getattr(args, "triples", None):
        docs, name = load_openie(args.triples, corpus), "openie-file"
    elif getattr(args, "extractor", None) == "llm":
        if not args.model:
            raise UserFacingError("--extractor llm needs --model (e.g. local:qwen2.5-coder-0.5b)")
        from agent.models import resolve_model
        from graphs.llm_extract import extract_with_model

        result = extract_with_model(
            resolve_model(args.model), corpus, progress=lambda d, n: _log(f"extracted {d}/{n}") if d % 50 == 0 else None
        )
        if result.failures:
            _log(f"{len(result.failures)} passages got no usable extraction (first: {next(iter(result.failures.values()))})")
        docs, name = result.docs, f"llm:{args.model}"
    else:
        from graphs.extract import extract_offline

        docs, name = extract_offline(corpus), "offline"
    _log(f"extracted triples ({name}) in {time.perf_counter() - t:.1f}s; building the graph")
    return build_quadgraph(corpus, docs, embedder, opts, extractor=name)


def run(args: argparse.Namespace) -> int:
    from graphs.cpu_threads import limit_threads

    limit_threads()
    return {"build": _run_build, "train": _run_train, "query": _run_query, "eval": _run_eval}[args.action](args)


def _run_build(args: argparse.Namespace) -> int:
    from graphs.corpus import load_corpus
    from graphs.store import load_graph, save_graph

    corpus = load_corpus(args.corpus)
    qg = _build(args, corpus, _embedder(args))
    save_graph(qg, args.out, overwrite=args.overwrite, store=args.store, name=args.store_name)
    loaded = load_graph(args.out, store=args.store)
    summary = {"folder": str(Path(args.out).resolve()), "store": loaded.meta["store"].describe(), **loaded.stats(),
               "extractor": qg.meta.get("extractor"), "timings_s": qg.meta.get("build_timings")}
    print(json.dumps(summary, indent=2) if args.json else _format_summary(summary))
    return 0


def _format_summary(summary: dict[str, Any]) -> str:
    nodes = ", ".join(f"{k} {v}" for k, v in summary["nodes"].items())
    rels = ", ".join(f"{k} {v}" for k, v in summary["relations"].items())
    return f"graph saved to {summary['folder']} (embeddings in {summary['store']})\nnodes: {nodes}\nrelations: {rels}"


def _run_train(args: argparse.Namespace) -> int:
    from graphs.corpus import load_questions
    from graphs.gfm.checkpoint import save_checkpoint
    from graphs.gfm.config import paper_config, small_config
    from graphs.gfm.train import TrainOptions, train_gfm
    from graphs.retrieval_eval import split_questions
    from graphs.store import load_graph

    if args.steps < 1:
        raise UserFacingError("--steps must be at least 1")
    if not str(args.out).endswith(".pt"):
        raise UserFacingError("--out must end in .pt")
    qg = load_graph(args.graph, store=args.store)
    train_q: list[Any] = []
    val_q: list[Any] = []
    if args.questions:
        labeled = load_questions(args.questions, qg.passages())
        train_split, _ = split_questions(labeled, args.split_seed, args.train_fraction)
        n_val = min(max(0, args.val), len(train_split) // 2)
        train_q, val_q = train_split[: len(train_split) - n_val], train_split[len(train_split) - n_val :]
    config = small_config() if args.size == "small" else paper_config()
    opts = TrainOptions(steps=args.steps, seed=args.seed, time_limit_s=args.time_limit)
    model, report = train_gfm(qg, _embedder(args), config, opts, train_q, val_q, log=_log)
    if args.questions:
        model.config.training["split"] = {
            "questions_file": Path(args.questions).name, "seed": args.split_seed,
            "train_fraction": args.train_fraction, "train": len(train_q), "val": len(val_q),
        }
    model.config.training["graph_extractor"] = qg.meta.get("extractor")
    path = save_checkpoint(model, args.out)
    out = {"checkpoint": str(path), **{k: v for k, v in report.items() if k != "history"}}
    print(json.dumps(out, indent=2) if args.json else f"saved {path} after {report['steps']} steps "
          f"(last loss {report['last_loss']:.4f}, best val R@5 {report['best_val_recall@5']})")
    return 0


def _run_query(args: argparse.Namespace) -> int:
    from graphs.retriever_registry import make_retriever
    from graphs.store import load_graph

    if args.k < 1:
        raise UserFacingError("-k must be at least 1")
    if not args.query.strip():
        raise UserFacingError("the query is empty")
    qg = load_graph(args.graph, store=args.store)
    retriever = make_retriever(args.retriever, qg, _embedder(args), args.model)
    hits = retriever.retrieve(args.query, args.k)
    if args.json:
        print(json.dumps([h.as_dict() for h in hits], indent=2, ensure_ascii=False))
        return 0
    for rank, h in enumerate(hits, 1):
        print(f"{rank}. [{h.doc_index}] {h.title}  (score {h.score:.3f})")
        for step in h.provenance.path:
            print(f"     {step.source} --{step.relation}--> {step.target[:80]}")
    return 0


def _run_eval(args: argparse.Namespace) -> int:
    from graphs.corpus import load_corpus, load_questions
    from graphs.retrieval_eval import evaluate
    from graphs.retriever_registry import make_retriever
    from graphs.store import MANIFEST, load_graph, save_graph

    if args.store and not args.graph:
        # A throwaway graph must not take a name in a shared store.
        raise UserFacingError("--store needs --graph: the folder that names the graph in the store")
    corpus = load_corpus(args.corpus)
    questions = load_questions(args.questions, corpus)
    names = list(dict.fromkeys(args.retriever or _RETRIEVERS))
    embedder = _embedder(args)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(args.graph) if args.graph else Path(tmp) / "graph"
        t = time.perf_counter()
        if (folder / MANIFEST).is_file():
            qg = load_graph(folder, store=args.store)
            if [(p.title, p.text) for p in qg.passages()] != [(p.title, p.text) for p in corpus]:
                raise UserFacingError(f"graph folder {folder} was built from a different corpus; pass another --graph")
        else:
            save_graph(_build(args, corpus, embedder), folder, store=args.store)
            qg = load_graph(folder, store=args.store)
        graph_s = time.perf_counter() - t
        retrievers = {name: make_retriever(name, qg, embedder, args.model) for name in names}
        trained: list[str] = []
        if "gfm" in retrievers:
            from graphs.gfm.gfm_retriever import GFMRetriever

            gfm = retrievers["gfm"]
            assert isinstance(gfm, GFMRetriever)
            trained = list(gfm.model.config.trained_questions)
        _log(f"graph ready in {graph_s:.1f}s; evaluating {', '.join(names)} on {len(questions)} questions")
        report = evaluate(retrievers, questions, trained)
    report["graph"] = {"extractor": qg.meta.get("extractor"), **qg.stats(), "ready_s": round(graph_s, 1)}
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"{report['evaluated']} of {report['questions']} questions scored "
          f"({report['excluded_as_trained']} left out: the GFM trained on them)")
    print(f"{'retriever':<10} {'R@2':>7} {'R@5':>7} {'median ms':>10}")
    for name, r in report["retrievers"].items():
        print(f"{name:<10} {r['recall@2']:>7.2f} {r['recall@5']:>7.2f} {r['median_latency_ms']:>10.1f}")
    if "all_questions" in report:
        print("on all questions:")
        for name, r in report["all_questions"].items():
            print(f"{name:<10} {r['recall@2']:>7.2f} {r['recall@5']:>7.2f}")
    return 0

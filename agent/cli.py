"""The `rein` command line.

Each command lives in its own module exposing `add_arguments(parser)` and `run(args) -> int`.
Only the module of the command being run is imported, so `rein --help` and light commands start
fast and never load torch, chromadb or llama.cpp.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from agent.errors import UserFacingError

# name → (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "chat": ("agent.chat_cli", "chat with an agent in the terminal (embedded local model by default)"),
    "demo": ("agent.demo_cli", "run the offline demo on the embedded model (no keys, no network)"),
    "run": ("scenarios.run_cli", "run scenario files or tau2 tasks.json and write results and a report"),
    "replay": ("scenarios.replay_cli", "replay tau2 gold actions through rein's tools and hash the end states"),
    "route": ("agent.route_cli", "choose a mode (instant / reasoning / agentic) for a query; `route eval` scores a router"),
    "jigsaw": ("scenarios.jigsaw.cli", "solve or benchmark AGILE jigsaw puzzles"),
    "graph": ("graphs.cli", "build, train, query and evaluate QuadGraph retrieval"),
    "serve": ("agent.serve_cli", "serve agents over an OpenAI-compatible HTTP API"),
    "models": ("agent.models_cli", "list model names and prepare the embedded model file"),
}


def _top_parser() -> argparse.ArgumentParser:
    lines = "\n".join(f"  {name:<8} {help_}" for name, (_, help_) in COMMANDS.items())
    parser = argparse.ArgumentParser(
        prog="rein",
        description="rein: an agent runtime with tools and reasoning interventions.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=f"commands:\n{lines}\n\nRun `rein COMMAND --help` for a command's options.",
    )
    parser.add_argument("command", nargs="?", help="one of the commands below")
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    return parser


def build_command_parser(name: str) -> tuple[argparse.ArgumentParser, object]:
    """The argument parser of one command, and its module."""
    module_name, help_ = COMMANDS[name]
    module = importlib.import_module(module_name)
    parser = argparse.ArgumentParser(prog=f"rein {name}", description=help_)
    module.add_arguments(parser)  # type: ignore[attr-defined]
    return parser, module


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `rein` console script."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        _top_parser().print_help()
        return 0
    if args[0] == "--version":
        from importlib.metadata import PackageNotFoundError, version

        try:
            print(version("rein-runtime"))
        except PackageNotFoundError:
            print("unknown")
        return 0
    name, rest = args[0], args[1:]
    if name not in COMMANDS:
        _top_parser().print_usage(sys.stderr)
        print(f"rein: unknown command {name!r}; commands: {', '.join(COMMANDS)}", file=sys.stderr)
        return 2
    parser, module = build_command_parser(name)
    ns = parser.parse_args(rest)
    try:
        return int(module.run(ns) or 0)  # type: ignore[attr-defined]
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # Output piped into a pager or `head` that closed early: not an error of ours.
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except UserFacingError as exc:
        print(f"rein {name}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

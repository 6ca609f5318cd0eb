"""The `rein` command line: a dispatcher over the "rein.commands" entry points.

Each command is a module exposing `add_arguments(parser)` and `run(args) -> int`, declared by
the distribution that provides it (`[project.entry-points."rein.commands"]`), so this module
names no command and a third-party package adds one by declaring it. Only the module of the
command being run is imported, so light commands start fast and never load torch, chromadb or
llama.cpp; `rein --help` imports the command modules (not what they use) to read their help.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from types import ModuleType

from agent.errors import UserFacingError
from tools import entry_points


def commands() -> dict[str, str]:
    """Command name → "module" it runs, as declared in the "rein.commands" entry points."""
    return {name: found[0].value for name, found in entry_points.plugins(entry_points.COMMANDS).items()}


def command_help(module: ModuleType) -> str:
    """A command's one-line help: the first line of its module docstring, less any leading
    "`rein NAME …`: " and the final full stop."""
    first = (module.__doc__ or "").strip().splitlines()[0] if module.__doc__ else ""
    if first.startswith("`rein") and "`: " in first:
        first = first.split("`: ", 1)[1]
    return first.rstrip(".")


def _top_parser() -> argparse.ArgumentParser:
    lines = []
    for name in commands():
        try:
            help_ = command_help(_load(name))
        except Exception as exc:  # a broken plug-in must not hide the other commands
            help_ = f"(cannot load: {exc})"
        lines.append(f"  {name:<8} {help_}")
    parser = argparse.ArgumentParser(
        prog="rein",
        description="rein: an agent runtime with tools and reasoning interventions.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="commands:\n" + "\n".join(lines) + "\n\nRun `rein COMMAND --help` for a command's options.",
    )
    parser.add_argument("command", nargs="?", help="one of the commands below")
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    return parser


def _load(name: str) -> ModuleType:
    plugin = entry_points.find(entry_points.COMMANDS, name)
    if plugin is None:
        raise KeyError(name)
    module = plugin.load()
    if not (hasattr(module, "add_arguments") and hasattr(module, "run")):
        raise UserFacingError(f"command {name!r} ({plugin.value}) has no add_arguments() and run()")
    return module


def build_command_parser(name: str) -> tuple[argparse.ArgumentParser, ModuleType]:
    """The argument parser of one command, and its module."""
    module = _load(name)
    parser = argparse.ArgumentParser(prog=f"rein {name}", description=command_help(module))
    module.add_arguments(parser)
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
            print(version(entry_points.DISTRIBUTION))
        except PackageNotFoundError:
            print("unknown")
        return 0
    name, rest = args[0], args[1:]
    try:
        known = commands()
        if name not in known:
            _top_parser().print_usage(sys.stderr)
            hint = entry_points.missing_hint(entry_points.COMMANDS)
            print(f"rein: unknown command {name!r}; commands: {', '.join(known)}{hint}", file=sys.stderr)
            return 2
        parser, module = build_command_parser(name)
    except (UserFacingError, entry_points.PluginConflict) as exc:
        print(f"rein: error: {exc}", file=sys.stderr)
        return 2
    ns = parser.parse_args(rest)
    try:
        return int(module.run(ns) or 0)
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

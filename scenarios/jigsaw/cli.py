"""`rein jigsaw solve` and `rein jigsaw bench`: play one puzzle, or measure the solver over many."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

from agent.errors import UserFacingError

if TYPE_CHECKING:
    from tools.sandbox_limits import OsLayer


def _level(text: str) -> int | None:
    if text.lower() in ("random", "none"):
        return None
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"level must be an integer or 'random', got {text!r}") from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the subcommands and their options."""
    sub = parser.add_subparsers(dest="action", required=True)
    solve = sub.add_parser("solve", help="play one puzzle with the solver or an LLM")
    solve.add_argument("--image", default="astronaut",
                       help="bundled photo (astronaut, chelsea, coffee, rocket, hubble_deep_field, ...) or an image file")
    solve.add_argument("--grid", type=int, default=3, help="n for an n×n grid (2 to 8)")
    solve.add_argument("--level", type=_level, default=None,
                       help="pieces that start in place (0 to n²−2), or 'random' (default)")
    solve.add_argument("--seed", type=int, default=0, help="shuffle seed")
    solve.add_argument("--agent", choices=("scripted", "solver", "llm"), default="scripted",
                       help="who plays through the rein Agent: the scripted solver (solver is another name for it) or an LLM")
    solve.add_argument("--model", default=None, help="model for --agent llm (default: the embedded local model)")
    solve.add_argument("--max-turns", type=int, default=10, help="turn limit")
    solve.add_argument("--window", type=float, default=1.0, help="side fraction of a seeded window of the photo")
    solve.add_argument("--vision", action="store_true", help="send pictures to the model as PNG content parts")
    solve.add_argument("--save-png", default=None, help="write the final arrangement to this PNG file")
    solve.add_argument("--sandbox", choices=("auto", "bwrap", "landlock", "none"), default="auto",
                       help="OS layer around the code sandbox: auto (bwrap when usable, Landlock + seccomp "
                            "when available, refused when neither), bwrap or landlock (required), or none "
                            "(no OS isolation: untrusted code relies on the language checks alone)")
    solve.add_argument("--json", action="store_true", help="print the result as JSON")

    bench = sub.add_parser("bench", help="solver Acc and Score per grid size and level")
    bench.add_argument("--grids", type=int, nargs="+", default=[2, 3, 4, 5], help="grid sizes")
    bench.add_argument("--levels", type=_level, nargs="+", default=[None, 0],
                       help="levels: integers (pieces in place) and/or 'random'")
    bench.add_argument("--seeds", type=int, default=10, help="seeds per photo")
    bench.add_argument("--images", nargs="+", default=None, help="photos (default: the five bundled colour photos)")
    bench.add_argument("--window", type=float, default=0.8, help="side fraction of each seed's window of the photo")
    bench.add_argument("--json", action="store_true", help="print the table as JSON")


def run(args: argparse.Namespace) -> int:
    """Run the chosen subcommand."""
    if args.action == "solve":
        return _solve(args)
    return _bench(args)


def _config(args: argparse.Namespace) -> Any:
    from pydantic import ValidationError

    from scenarios.jigsaw.env import JigsawConfig

    try:
        return JigsawConfig(image=args.image, grid=args.grid, level=args.level, seed=args.seed,
                            max_turns=args.max_turns, window=args.window)
    except ValidationError as exc:
        problems = "; ".join(str(err["msg"]).removeprefix("Value error, ") for err in exc.errors(include_url=False))
        raise UserFacingError(f"invalid puzzle settings: {problems}") from None


def _sandbox(os_layer: OsLayer) -> tuple[Any, list[str], str]:
    """The sandbox limits for an episode, and the layers (and OS-layer note) they give here."""
    from tools.sandbox import SandboxError, SandboxLimits, sandbox_layers

    limits = SandboxLimits(cpu_s=5.0, wall_s=10.0, memory_mb=256, os_layer=os_layer)
    try:
        layers, note = sandbox_layers(limits)
    except SandboxError as exc:
        raise UserFacingError(str(exc)) from None
    return limits, layers, note


def _solve(args: argparse.Namespace) -> int:
    from scenarios.jigsaw.env import JigsawEnv

    config = _config(args)
    limits, layers, note = _sandbox(args.sandbox)
    extra: dict[str, Any] = {"sandbox_layers": layers, "sandbox_note": note}
    agent = "scripted" if args.agent == "solver" else args.agent
    with JigsawEnv(config, sandbox_limits=limits) as env:
        run_, placement = _play(env, args, agent)
        result = run_.result
        extra.update(termination=run_.termination, model_error=run_.error, usage=run_.usage.model_dump(),
                     turns=[t.__dict__ for t in run_.turns])
        if run_.episode is not None:
            extra.update(thread_id=run_.episode.thread_id, agent_termination=run_.episode.termination)
        if placement is not None:
            extra["search"] = {"exact": placement.exact, "nodes": placement.nodes}
        if args.save_png:
            from scenarios.jigsaw.render import to_png

            try:
                with open(args.save_png, "wb") as handle:
                    handle.write(to_png(env.render()))
            except OSError as exc:
                raise UserFacingError(f"cannot write {args.save_png!r}: {exc}") from None
    payload = {**result.as_dict(), "image": config.image, "grid": config.grid, "level": config.level,
               "seed": config.seed, "agent": agent, **extra}
    if args.json:
        print(json.dumps(payload, indent=2))
    else:
        print(f"{config.image} {config.grid}x{config.grid} level={_show_level(config.level)} seed={config.seed} "
              f"agent={agent}")
        print(f"solved: {'yes' if result.solved else 'no'}  score: {result.score:.2f}  steps: {result.steps}  "
              f"reward: {result.reward:.2f}  ({payload['termination']})")
        print(f"sandbox layers: {', '.join(layers)} ({note})")
        if extra.get("model_error"):
            print(f"model error: {extra['model_error']}", file=sys.stderr)
    return 0


def _play(env: Any, args: argparse.Namespace, agent: str) -> tuple[Any, Any]:
    """The episode through the Agent path, with the scripted solver or an LLM as its model, and
    the solver's search result (None for an LLM)."""
    import asyncio

    from agent.models import ModelError, resolve_model
    from scenarios.jigsaw.agent import LLMAgentConfig, run_llm_episode

    async def play() -> tuple[Any, Any]:
        placement = None
        if agent == "scripted":
            from scenarios.jigsaw.solver import SolverAgent, SolverModel

            solver = SolverAgent()
            model: Any = SolverModel(env, solver)
        else:
            try:
                model = resolve_model(args.model)
            except (ModelError, ImportError, FileNotFoundError, ValueError) as exc:
                raise UserFacingError(f"cannot load model {args.model or 'local (default)'}: {exc}") from None
        try:
            run_ = await run_llm_episode(env, model, LLMAgentConfig(vision=args.vision))
        finally:
            await model.aclose()
        if agent == "scripted":
            placement = solver.last_placement
        return run_, placement

    return asyncio.run(play())


def _show_level(level: int | None) -> str:
    return "random" if level is None else str(level)


def _bench(args: argparse.Namespace) -> int:
    from scenarios.jigsaw.images import DEFAULT_PHOTOS, load_image
    from scenarios.jigsaw.jigsaw_eval import markdown_table, per_image_table, solver_bench
    from scenarios.jigsaw.puzzle import check_grid

    for grid in args.grids:
        try:
            check_grid(grid)
        except ValueError as exc:
            raise UserFacingError(str(exc)) from None
    if args.seeds < 1:
        raise UserFacingError("--seeds must be at least 1")
    if not 0.1 <= args.window <= 1.0:
        raise UserFacingError("--window must be from 0.1 to 1.0")
    images = args.images or list(DEFAULT_PHOTOS)
    for image in images:
        load_image(image)  # a missing or unreadable file fails here, before any work
    progress = None if args.json else (lambda line: print(line, file=sys.stderr))
    if progress is not None:
        _, layers, note = _sandbox("auto")
        progress(f"sandbox layers: {', '.join(layers)} ({note})")
    cells = solver_bench(grids=args.grids, levels=args.levels, seeds=args.seeds, images=images,
                         window=args.window, progress=progress)
    if not cells:
        raise UserFacingError("no (grid, level) pair fits: a level must be from 0 to n²−2")
    if args.json:
        print(json.dumps([c.__dict__ for c in cells], indent=2))
    else:
        print(markdown_table(cells))
        print("\nAcc per photo:\n")
        print(per_image_table(cells))
    return 0

"""Batch evaluation: the solver's Acc and Score per grid size and level over seeds and photos."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from scenarios.jigsaw.env import JigsawConfig, JigsawEnv
from scenarios.jigsaw.images import DEFAULT_PHOTOS
from scenarios.jigsaw.solver import SolverAgent


@dataclass
class BenchCell:
    """Solver results for one grid size and level."""

    grid: int
    """n for n×n."""
    level: int | None
    """Pieces that start in place; None = uniformly random unsolved shuffle."""
    episodes: int
    """Puzzles played."""
    acc: float
    """Fraction solved completely."""
    score: float
    """Mean fraction of pieces in place."""
    mean_reward: float
    """Mean AGILE reward."""
    seconds_per_episode: float
    """Mean wall time per puzzle (search, sandbox step and rendering)."""
    failures: list[str]
    """image:seed of every unsolved puzzle."""
    acc_by_image: dict[str, float]
    """Acc per photo."""


def level_name(level: int | None) -> str:
    """How a level is written in tables and on the command line."""
    return "random" if level is None else f"L{level}"


def solver_bench(
    grids: Sequence[int] = (2, 3, 4, 5),
    levels: Sequence[int | None] = (None, 0),
    seeds: int = 10,
    images: Sequence[str] = DEFAULT_PHOTOS,
    window: float = 0.8,
    solver: SolverAgent | None = None,
    progress: Callable[[str], None] | None = None,
) -> list[BenchCell]:
    """Play every (grid, level) over images × seeds; levels that do not fit a grid are skipped.

    Seed s cuts a seeded random window (sides = `window` of the photo) and shuffles with seed s,
    so different seeds give different puzzles from the same photo.
    """
    agent = solver or SolverAgent()
    envs = {image: JigsawEnv(JigsawConfig(image=image, hints=False, window=window)) for image in images}
    cells = []
    try:
        for grid in grids:
            for level in levels:
                if level is not None and not 0 <= level <= grid * grid - 2:
                    continue
                solved = 0
                score = reward = 0.0
                failures: list[str] = []
                by_image: dict[str, float] = {}
                started = time.perf_counter()
                for image, env in envs.items():
                    config = JigsawConfig(image=image, grid=grid, level=level, hints=False, window=window)
                    solved_before = solved
                    for seed in range(seeds):
                        env.reset(seed=seed, config=config)
                        result = agent.run_episode(env)
                        solved += result.solved
                        score += result.score
                        reward += result.reward
                        if not result.solved:
                            failures.append(f"{image}:{seed}")
                    by_image[image] = (solved - solved_before) / seeds
                episodes = len(envs) * seeds
                cell = BenchCell(
                    grid=grid, level=level, episodes=episodes, acc=solved / episodes, score=score / episodes,
                    mean_reward=reward / episodes,
                    seconds_per_episode=(time.perf_counter() - started) / episodes, failures=failures,
                    acc_by_image=by_image,
                )
                cells.append(cell)
                if progress:
                    progress(f"{grid}x{grid} {level_name(level)}: Acc {cell.acc:.1%} Score {cell.score:.1%}")
    finally:
        for env in envs.values():
            env.close()
    return cells


def markdown_table(cells: Sequence[BenchCell]) -> str:
    """The results as a Markdown table."""
    lines = [
        "| grid | level | puzzles | Acc | Score | mean reward | s/puzzle |",
        "|---|---|---|---|---|---|---|",
    ]
    for c in cells:
        lines.append(
            f"| {c.grid}x{c.grid} | {level_name(c.level)} | {c.episodes} | {c.acc:.1%} | {c.score:.1%} "
            f"| {c.mean_reward:.3f} | {c.seconds_per_episode:.3f} |"
        )
    return "\n".join(lines)


def per_image_table(cells: Sequence[BenchCell]) -> str:
    """Acc per photo (columns) for each grid and level (rows), as Markdown."""
    images = list(cells[0].acc_by_image) if cells else []
    lines = ["| grid | level | " + " | ".join(images) + " |", "|---|---|" + "---|" * len(images)]
    for c in cells:
        values = " | ".join(f"{c.acc_by_image[name]:.0%}" for name in images)
        lines.append(f"| {c.grid}x{c.grid} | {level_name(c.level)} | {values} |")
    return "\n".join(lines)

"""Puzzle geometry: cutting a photo into an n×n grid, seeded shuffles at a difficulty level, assembly.

An arrangement is a list `arr` with `arr[position] = piece`, where piece k belongs at position k;
positions run row by row from 0 (top-left).
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from agent.extras import needs_extra

with needs_extra("jigsaw", "the jigsaw environment"):
    import numpy as np

MIN_GRID = 2
MAX_GRID = 8


def check_grid(grid: int) -> None:
    """Raise ValueError unless the grid size is supported."""
    if not isinstance(grid, int) or not MIN_GRID <= grid <= MAX_GRID:
        raise ValueError(f"grid must be an integer from {MIN_GRID} to {MAX_GRID}, got {grid!r}")


def check_level(grid: int, level: int | None) -> None:
    """Raise ValueError unless `level` pieces can start in place while the puzzle stays unsolved."""
    if level is None:
        return
    top = grid * grid - 2
    if not isinstance(level, int) or not 0 <= level <= top:
        raise ValueError(
            f"level for a {grid}x{grid} grid must be from 0 to {top} (pieces that start in place), got {level!r}"
        )


def shuffle(grid: int, level: int | None, rng: random.Random) -> list[int]:
    """A scrambled arrangement: exactly `level` pieces in place, or any unsolved order when level is None."""
    check_grid(grid)
    check_level(grid, level)
    k = grid * grid
    if level is None:
        arrangement = list(range(k))
        while arrangement == sorted(arrangement):
            rng.shuffle(arrangement)
        return arrangement
    fixed = set(rng.sample(range(k), level))
    moving = [p for p in range(k) if p not in fixed]
    order = _derangement(len(moving), rng)
    arrangement = list(range(k))
    for slot, pick in zip(moving, order, strict=True):
        arrangement[slot] = moving[pick]
    return arrangement


def _derangement(m: int, rng: random.Random) -> list[int]:
    # Rejection sampling is uniform and needs about e ≈ 2.7 tries on average.
    while True:
        order = list(range(m))
        rng.shuffle(order)
        if all(order[i] != i for i in range(m)):
            return order


def in_place(arrangement: Sequence[int]) -> int:
    """How many pieces sit at their own position."""
    return sum(1 for position, piece in enumerate(arrangement) if position == piece)


def seeded_window(image: np.ndarray, fraction: float, rng: random.Random) -> np.ndarray:
    """A random sub-window whose sides are `fraction` of the image's, or the image itself at 1.0."""
    if not 0.1 <= fraction <= 1.0:
        raise ValueError(f"window fraction must be in [0.1, 1.0], got {fraction}")
    if fraction >= 1.0:
        return image
    height, width = image.shape[:2]
    h, w = max(1, round(height * fraction)), max(1, round(width * fraction))
    top, left = rng.randint(0, height - h), rng.randint(0, width - w)
    return image[top:top + h, left:left + w]


def cut(image: np.ndarray, grid: int) -> list[np.ndarray]:
    """The grid×grid pieces in row order; the image is trimmed to a multiple of the grid."""
    check_grid(grid)
    height, width = image.shape[:2]
    ph, pw = height // grid, width // grid
    if ph < 4 or pw < 4:
        raise ValueError(f"a {width}x{height} image is too small for a {grid}x{grid} grid")
    return [image[r * ph:(r + 1) * ph, c * pw:(c + 1) * pw].copy() for r in range(grid) for c in range(grid)]


def assemble(pieces: Sequence[np.ndarray], arrangement: Sequence[int], grid: int) -> np.ndarray:
    """The picture with `pieces[arrangement[p]]` drawn at each position p."""
    rows = [np.concatenate([pieces[arrangement[r * grid + c]] for c in range(grid)], axis=1) for r in range(grid)]
    return np.concatenate(rows, axis=0)


def swaps_to(current: Sequence[int], target: Sequence[int]) -> list[tuple[int, int]]:
    """Position swaps that turn `current` into `target` (same items), at most len-1 of them."""
    if sorted(current) != sorted(target):
        raise ValueError("current and target must hold the same items")
    now = list(current)
    where = {item: position for position, item in enumerate(now)}
    moves = []
    for position, wanted in enumerate(target):
        if now[position] != wanted:
            other = where[wanted]
            moves.append((position, other))
            now[position], now[other] = now[other], now[position]
            where[now[other]] = other
            where[wanted] = position
    return moves

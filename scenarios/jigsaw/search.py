"""Placement search over edge costs: exact branch and bound, beam search, and swap refinement.

All searches fill positions row by row; placing piece x at a position costs lr[left, x] plus
tb[above, x] for the neighbours already placed. The arrangement with the lowest total seam cost
is the answer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from agent.extras import needs_extra

with needs_extra("jigsaw", "the jigsaw environment"):
    import numpy as np


@dataclass
class Placement:
    """A search result."""

    arrangement: list[int]
    """arrangement[position] = piece index (indices of the cost matrices)."""
    cost: float
    """Total seam cost."""
    nodes: int
    """Search nodes expanded."""
    exact: bool
    """Whether the arrangement is proven optimal for the costs."""


def total_cost(arrangement: list[int], lr: np.ndarray, tb: np.ndarray, grid: int) -> float:
    """Sum of every seam cost in the arrangement."""
    cost = 0.0
    for position, piece in enumerate(arrangement):
        row, col = divmod(position, grid)
        if col:
            cost += float(lr[arrangement[position - 1], piece])
        if row:
            cost += float(tb[arrangement[position - grid], piece])
    return cost


def solve(lr: np.ndarray, tb: np.ndarray, grid: int, exact_up_to: int = 3, beam_width: int = 300,
          node_limit: int = 2_000_000) -> Placement:
    """Best arrangement: proven optimal up to `exact_up_to`, beam search plus refinement beyond."""
    start = beam_search(lr, tb, grid, beam_width)
    start = refine(start, lr, tb, grid)
    if grid > exact_up_to:
        return start
    return branch_and_bound(lr, tb, grid, incumbent=start, node_limit=node_limit)


def branch_and_bound(lr: np.ndarray, tb: np.ndarray, grid: int, incumbent: Placement | None = None,
                     node_limit: int = 2_000_000) -> Placement:
    """Depth-first branch and bound; exact unless node_limit is reached."""
    k = grid * grid
    lr_rows, tb_rows = lr.tolist(), tb.tolist()
    into_left = [min(lr_rows[a][x] for a in range(k) if a != x) for x in range(k)]
    into_top = [min(tb_rows[a][x] for a in range(k) if a != x) for x in range(k)]
    need_left = [sum(1 for q in range(p, k) if q % grid) for p in range(k + 1)]
    need_top = [sum(1 for q in range(p, k) if q >= grid) for p in range(k + 1)]
    best_cost = incumbent.cost if incumbent else math.inf
    best = list(incumbent.arrangement) if incumbent else list(range(k))
    arrangement = [-1] * k
    free = set(range(k))
    nodes = 0
    exhausted = False

    def bound(position: int) -> float:
        lefts = sorted(into_left[x] for x in free)[: need_left[position]]
        tops = sorted(into_top[x] for x in free)[: need_top[position]]
        return sum(lefts) + sum(tops)

    def visit(position: int, cost: float) -> None:
        nonlocal best_cost, best, nodes, exhausted
        if position == k:
            if cost < best_cost:
                best_cost, best = cost, list(arrangement)
            return
        nodes += 1
        if nodes > node_limit:
            exhausted = True
            return
        row, col = divmod(position, grid)
        left = arrangement[position - 1] if col else -1
        above = arrangement[position - grid] if row else -1
        options = []
        for x in free:
            step = (lr_rows[left][x] if col else 0.0) + (tb_rows[above][x] if row else 0.0)
            options.append((step, x))
        options.sort()
        for step, x in options:
            if exhausted:
                return
            new_cost = cost + step
            if new_cost >= best_cost:
                break
            arrangement[position] = x
            free.discard(x)
            if new_cost + bound(position + 1) < best_cost:
                visit(position + 1, new_cost)
            free.add(x)
            arrangement[position] = -1

    visit(0, 0.0)
    return Placement(arrangement=best, cost=best_cost, nodes=nodes, exact=not exhausted)


def beam_search(lr: np.ndarray, tb: np.ndarray, grid: int, width: int) -> Placement:
    """Row-by-row beam search keeping the `width` cheapest partial arrangements."""
    k = grid * grid
    placed = np.arange(k)[:, None]
    used = np.eye(k, dtype=bool)
    cost = np.zeros(k)
    nodes = k
    for position in range(1, k):
        row, col = divmod(position, grid)
        add = np.zeros((len(placed), k))
        if col:
            add += lr[placed[:, position - 1]]
        if row:
            add += tb[placed[:, position - grid]]
        add[used] = np.inf
        total = (cost[:, None] + add).ravel()
        keep = min(width, int(np.isfinite(total).sum()))
        chosen = np.argpartition(total, keep - 1)[:keep] if keep < total.size else np.arange(total.size)
        chosen = chosen[np.isfinite(total[chosen])]
        parent, piece = np.divmod(chosen, k)
        placed = np.concatenate([placed[parent], piece[:, None]], axis=1)
        used = used[parent]
        used[np.arange(len(piece)), piece] = True
        cost = total[chosen]
        nodes += len(chosen)
    best = int(np.argmin(cost))
    return Placement(arrangement=placed[best].tolist(), cost=float(cost[best]), nodes=nodes, exact=False)


def refine(placement: Placement, lr: np.ndarray, tb: np.ndarray, grid: int, max_rounds: int = 50) -> Placement:
    """Hill-climb by swapping two pieces while that lowers the total cost."""
    arrangement = list(placement.arrangement)
    cost = total_cost(arrangement, lr, tb, grid)
    k = len(arrangement)
    for _ in range(max_rounds):
        improved = False
        for i in range(k):
            for j in range(i + 1, k):
                arrangement[i], arrangement[j] = arrangement[j], arrangement[i]
                trial = total_cost(arrangement, lr, tb, grid)
                if trial < cost - 1e-9:
                    cost, improved = trial, True
                else:
                    arrangement[i], arrangement[j] = arrangement[j], arrangement[i]
        if not improved:
            break
    return Placement(arrangement=arrangement, cost=cost, nodes=placement.nodes, exact=False)

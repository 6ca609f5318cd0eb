"""The classical solver: exact search is exact, and 2×2 / 3×3 puzzles of the bundled photos are solved."""

from __future__ import annotations

import functools
import itertools

import numpy as np
import pytest

from scenarios.jigsaw import DEFAULT_PHOTOS, JigsawConfig, JigsawEnv, SolverAgent
from scenarios.jigsaw.edges import edge_costs
from scenarios.jigsaw.puzzle import cut
from scenarios.jigsaw.search import beam_search, branch_and_bound, refine, total_cost


@functools.cache
def _permutations(k: int) -> np.ndarray:
    return np.array(list(itertools.permutations(range(k))), dtype=np.int64)


def brute_force(lr: np.ndarray, tb: np.ndarray, grid: int) -> float:
    perms = _permutations(grid * grid)
    cost = np.zeros(len(perms))
    for position in range(grid * grid):
        row, col = divmod(position, grid)
        if col:
            cost += lr[perms[:, position - 1], perms[:, position]]
        if row:
            cost += tb[perms[:, position - grid], perms[:, position]]
    return float(cost.min())


@pytest.mark.parametrize("grid", [2, 3])
def test_branch_and_bound_matches_brute_force_on_random_costs(grid):
    rng = np.random.default_rng(grid)
    for _ in range(3 if grid == 2 else 1):
        lr, tb = rng.random((grid * grid,) * 2), rng.random((grid * grid,) * 2)
        np.fill_diagonal(lr, np.inf)
        np.fill_diagonal(tb, np.inf)
        found = branch_and_bound(lr, tb, grid)
        assert found.exact
        assert found.cost == pytest.approx(brute_force(lr, tb, grid))
        assert found.cost == pytest.approx(total_cost(found.arrangement, lr, tb, grid))


def test_edge_costs_prefer_true_neighbours():
    from scenarios.jigsaw.images import load_image

    pieces = cut(load_image("astronaut"), 4)
    lr, tb = edge_costs(pieces)
    right_hits = sum(int(np.argmin(lr[p])) == p + 1 for p in range(16) if p % 4 != 3)
    below_hits = sum(int(np.argmin(tb[p])) == p + 4 for p in range(12))
    assert right_hits >= 11 and below_hits >= 11


def test_beam_and_refine_recover_a_4x4_photo():
    from scenarios.jigsaw.images import load_image

    pieces = cut(load_image("coffee"), 4)
    lr, tb = edge_costs(pieces)
    placement = refine(beam_search(lr, tb, 4, width=200), lr, tb, 4)
    assert placement.arrangement == list(range(16))


@pytest.mark.parametrize("grid", [2, 3])
def test_solver_solves_bundled_photos_through_code_actions(grid):
    agent = SolverAgent()
    for image in DEFAULT_PHOTOS:
        with JigsawEnv(JigsawConfig(image=image, grid=grid, hints=False)) as env:
            for seed in range(3):
                env.reset(seed=seed, config=JigsawConfig(image=image, grid=grid, seed=seed, window=0.8, hints=False))
                result = agent.run_episode(env)
                assert result.solved, (image, grid, seed)
                assert (result.steps, result.termination, result.reward) == (1, "answered", pytest.approx(0.95))
                assert agent.last_placement is not None and agent.last_placement.exact


def test_solver_plan_is_code_the_sandbox_runs():
    with JigsawEnv(JigsawConfig(image="rocket", grid=3, level=3, seed=1)) as env:
        plan = SolverAgent().plan(env)
        assert plan.splitlines()[-1] == "answer()"
        assert "swap(" in plan
        step = env.step(f"```python\n{plan}\n```")
        assert step.info["kind"] == "code" and step.info["sandbox_error"] is None
        assert step.done and env.solved

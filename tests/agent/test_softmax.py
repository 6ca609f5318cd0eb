"""The shared numpy trainer: softmax regression and the one-hidden-layer MLP, fit by full-batch Adam."""

from __future__ import annotations

import numpy as np
import pytest

from agent.softmax import fit_adam, forward, softmax


def blobs(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    centres = rng.normal(0, 3, (3, 6))
    y = np.repeat(np.arange(3), 30)
    return centres[y] + rng.normal(0, 0.5, (90, 6)), y


def init(sizes: list[int], seed: int = 0) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [(rng.normal(0, np.sqrt(2.0 / a), (a, b)), np.zeros(b)) for a, b in zip(sizes, sizes[1:], strict=False)]


def test_softmax_rows_are_distributions_even_for_huge_logits() -> None:
    p = softmax(np.array([[1000.0, 1000.0, -1000.0], [0.0, np.log(3.0), -np.inf]]))
    np.testing.assert_allclose(p, [[0.5, 0.5, 0.0], [0.25, 0.75, 0.0]])


@pytest.mark.parametrize("sizes", [[6, 3], [6, 8, 3]])
def test_fit_adam_learns_blobs_and_lowers_the_loss(sizes: list[int]) -> None:
    x, y = blobs()
    layers = init(sizes)

    def loss() -> float:
        return float(-np.log(softmax(forward(layers, x)[-1])[np.arange(len(y)), y]).mean())

    before = loss()
    assert fit_adam(layers, x, y, epochs=150, lr=0.05, l2=1e-4) is layers  # trained in place
    assert loss() < before / 10
    assert (forward(layers, x)[-1].argmax(axis=1) == y).all()
    hidden = forward(layers, x)[1:-1]
    assert all((h >= 0).all() for h in hidden)  # ReLU between layers


def test_input_mask_freezes_those_columns_weights() -> None:
    x, y = blobs()
    layers = init([6, 3])
    start = layers[0][0].copy()
    mask = np.array([1.0, 1.0, 1.0, 0.0, 0.0, 0.0])
    fit_adam(layers, x, y, epochs=50, lr=0.05, l2=1e-3, input_mask=mask)
    w = layers[0][0]
    np.testing.assert_array_equal(w[3:], start[3:])
    assert not np.allclose(w[:3], start[:3])


def test_uniform_sample_weights_match_the_unweighted_mean() -> None:
    x, y = blobs()
    plain, weighted = init([6, 3]), init([6, 3])
    fit_adam(plain, x, y, epochs=40, lr=0.05, l2=1e-3)
    fit_adam(weighted, x, y, epochs=40, lr=0.05, l2=1e-3, sample_weight=np.full(len(y), 1 / len(y)))
    np.testing.assert_allclose(plain[0][0], weighted[0][0], rtol=1e-9, atol=1e-12)


def test_sample_weights_tip_an_ambiguous_point() -> None:
    x = np.zeros((2, 1))
    y = np.array([0, 1])
    layers = [(np.zeros((1, 2)), np.zeros(2))]
    fit_adam(layers, x, y, epochs=300, lr=0.05, l2=0.0, sample_weight=np.array([0.8, 0.2]))
    p = softmax(forward(layers, x)[-1])[0]
    assert p[0] == pytest.approx(0.8, abs=5e-3)  # the weighted cross-entropy optimum

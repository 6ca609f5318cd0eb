"""Edge dissimilarity between puzzle pieces.

Two measures, each made relative and then added:
- Mahalanobis gradient compatibility (MGC, after Gallagher, CVPR 2012): the colour gradient
  across a seam should look like the gradients just inside each piece near that edge; it is
  scored by its Mahalanobis distance under each side's boundary-gradient distribution.
- Prediction error: each side's boundary extrapolated one pixel across the seam (2·edge − inner)
  compared with the other side's boundary (L2 per side, summed).
Each is divided by the second-best candidate for the same edge (confidence normalisation, after
Pomeranz et al., CVPR 2011), so a seam that is much better than every alternative scores low.
On the bundled photos the sum beats either measure alone for 5×5 grids (see docs/jigsaw.md).
"""

from __future__ import annotations

from collections.abc import Sequence

from agent.extras import needs_extra

with needs_extra("jigsaw", "the jigsaw environment"):
    import numpy as np

# Pixel-variance floor (in 0–255 units squared): flat regions (sky, shadow) have near-singular
# gradient covariance, and without a floor noise in them would dominate every comparison.
_COVARIANCE_FLOOR = 4.0


def edge_costs(pieces: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(lr, tb): lr[a, b] is the cost of b right of a, tb[a, b] of b below a; the diagonal is +inf."""
    if len(pieces) < 2:
        raise ValueError("need at least two pieces")
    stack = np.stack([np.asarray(p, dtype=np.float64) for p in pieces])  # (k, h, w, 3)
    sides = {
        "lr": (stack[:, :, -2], stack[:, :, -1], stack[:, :, 0], stack[:, :, 1]),
        "tb": (stack[:, -2], stack[:, -1], stack[:, 0], stack[:, 1]),
    }
    lr, tb = (relative(_mgc(*sides[key])) + relative(_prediction(*sides[key])) for key in ("lr", "tb"))
    return lr, tb


def relative(costs: np.ndarray) -> np.ndarray:
    """Each cost divided by the second-best cost of the same left (row) or right (column) side."""
    finite = costs[np.isfinite(costs)]
    floor = max(float(np.median(finite)) * 1e-3, 1e-9) if finite.size else 1.0
    second_in_row = np.sort(costs, axis=1)[:, 1:2]
    second_in_col = np.sort(costs, axis=0)[1:2, :]
    scale = np.maximum(np.minimum(second_in_row, second_in_col), floor)
    out = costs / scale
    np.fill_diagonal(out, np.inf)
    return out


def _prediction(a_inner: np.ndarray, a_edge: np.ndarray, b_edge: np.ndarray, b_inner: np.ndarray) -> np.ndarray:
    ahead_of_a = 2 * a_edge - a_inner
    behind_b = 2 * b_edge - b_inner
    miss_b = np.sqrt(((b_edge[None, :] - ahead_of_a[:, None]) ** 2).sum(axis=(2, 3)))
    miss_a = np.sqrt(((a_edge[:, None] - behind_b[None, :]) ** 2).sum(axis=(2, 3)))
    cost = miss_a + miss_b
    np.fill_diagonal(cost, np.inf)
    return cost


def _mgc(a_inner: np.ndarray, a_edge: np.ndarray, b_edge: np.ndarray, b_inner: np.ndarray) -> np.ndarray:
    # Each input is (k, length, 3): a_* are the two last lines of the first piece, b_* the two
    # first lines of the second piece, so that the seam lies between a_edge and b_edge.
    seam = b_edge[None, :, :, :] - a_edge[:, None, :, :]  # (k, k, length, 3)
    from_a = _mahalanobis(seam, a_edge - a_inner, axis_of_piece=0)
    from_b = _mahalanobis(-seam, b_edge - b_inner, axis_of_piece=1)
    cost = from_a + from_b
    np.fill_diagonal(cost, np.inf)
    return cost


def _mahalanobis(diff: np.ndarray, gradients: np.ndarray, axis_of_piece: int) -> np.ndarray:
    mean = gradients.mean(axis=1)  # (k, 3)
    centred = gradients - mean[:, None, :]
    cov = np.einsum("kli,klj->kij", centred, centred) / max(1, gradients.shape[1] - 1)
    cov += _COVARIANCE_FLOOR * np.eye(3)
    inverse = np.linalg.inv(cov)
    if axis_of_piece == 0:
        x = diff - mean[:, None, None, :]
        return np.einsum("abli,aij,ablj->ab", x, inverse, x)
    x = diff - mean[None, :, None, :]
    return np.einsum("abli,bij,ablj->ab", x, inverse, x)


def to_unit(costs: np.ndarray) -> np.ndarray:
    """Costs mapped monotonically onto [0, 1) (median → 0.5) for showing to a model."""
    finite = costs[np.isfinite(costs)]
    scale = float(np.median(finite)) if finite.size else 1.0
    scale = scale if scale > 0 else 1.0
    with np.errstate(invalid="ignore"):
        unit = costs / (costs + scale)
    return np.where(np.isfinite(costs), unit, 1.0)

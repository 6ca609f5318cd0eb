"""Percentile bootstrap intervals over tasks: resample task indices with replacement."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypedDict, Unpack

import numpy as np


@dataclass(frozen=True)
class Interval:
    """A point estimate with its bootstrap interval; None where the statistic is undefined."""

    value: float | None
    """The statistic on the full sample."""
    low: float | None
    """Lower end of the interval."""
    high: float | None
    """Upper end of the interval."""

    def as_dict(self) -> dict[str, float | None]:
        """JSON-ready form, rounded."""
        return {k: None if v is None else round(v, 4) for k, v in
                (("value", self.value), ("low", self.low), ("high", self.high))}


class BootstrapOptions(TypedDict, total=False):
    """How an interval is resampled (the keyword arguments of bootstrap)."""

    samples: int
    """Resamples drawn (default 1000)."""
    seed: int
    """Seed of the resampling generator (default 0)."""
    level: float
    """Coverage of the interval (default 0.95)."""


def bootstrap(
    n: int, statistic: Callable[[np.ndarray], float], *, samples: int = 1000, seed: int = 0, level: float = 0.95
) -> Interval:
    """Interval of statistic(indices) over `samples` resamples of range(n); infinities count as undefined.

    A resample whose statistic is undefined (inf or nan, e.g. cost-of-pass with no pass) sorts
    above every finite value, so an end that falls on one is reported as None.
    """
    if n < 1:
        return Interval(None, None, None)
    rng = np.random.default_rng(seed)
    point = statistic(np.arange(n))
    values = np.array([statistic(rng.integers(0, n, n)) for _ in range(samples)], dtype=float)
    values[~np.isfinite(values)] = np.inf
    values.sort()
    alpha = (1 - level) / 2
    lo, hi = values[int(math.floor(alpha * (samples - 1)))], values[int(math.ceil((1 - alpha) * (samples - 1)))]

    def finite(x: float) -> float | None:
        return float(x) if math.isfinite(x) else None

    return Interval(finite(point), finite(lo), finite(hi))


def mean_interval(flags: Sequence[float], **kwargs: Unpack[BootstrapOptions]) -> Interval:
    """Bootstrap interval of a mean (accuracy, agreement)."""
    arr = np.asarray(flags, dtype=float)
    return bootstrap(len(arr), lambda idx: float(arr[idx].mean()), **kwargs)


def ratio_interval(cost: Sequence[float], passed: Sequence[float], **kwargs: Unpack[BootstrapOptions]) -> Interval:
    """Bootstrap interval of sum(cost) / sum(passed): cost-of-pass; inf when nothing passed."""
    c, p = np.asarray(cost, dtype=float), np.asarray(passed, dtype=float)

    def stat(idx: np.ndarray) -> float:
        wins = p[idx].sum()
        return float(c[idx].sum() / wins) if wins else math.inf

    return bootstrap(len(c), stat, **kwargs)

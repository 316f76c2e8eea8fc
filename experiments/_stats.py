"""The statistics of the chapter-3 experiments: similarity regions, Pearson's r, saturation,
and the interval of a rate.

Pure functions over plain numbers (numpy; scipy only for Student's t tail), so every figure in
``report.md`` can be re-derived by hand. Similarities here are the study's normalised ones,
``(cosine + 1) / 2`` in ``[0, 1]``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ._results import RateCI

__all__ = [
    "STUDY_REGIONS",
    "Region",
    "best_per_region",
    "mean_std",
    "paired_difference_interval",
    "pearson",
    "rate",
    "region_index",
    "saturation_point",
    "split_regions",
    "wilson_interval",
]

# The similarity ranges the study split into four equal regions (thesis 3.4.2): full-prompt
# embeddings are all very similar, so only the top tenth is informative; keyword descriptions
# spread over the upper half.
STUDY_REGIONS: dict[str, tuple[float, float]] = {"full": (0.9, 1.0), "keyword": (0.5, 1.0)}

# Region boundaries are computed (0.9 + 0.025, 0.5 + 3 * 0.125 ...) and so are similarities;
# a value that is a boundary up to float error must land where the exact value would.
_EPS = 1e-9


def _fmt(x: float) -> str:
    """Up to three decimals, no trailing zeros: 0.5 -> "0.5", 1.0 -> "1", 0.925 -> "0.925"."""
    text = f"{x:.3f}".rstrip("0").rstrip(".")
    return "0" if text == "-0" else text


@dataclass(frozen=True)
class Region:
    """A half-open similarity interval ``(lo, hi]``."""

    lo: float
    hi: float

    @property
    def label(self) -> str:
        return f"({_fmt(self.lo)},{_fmt(self.hi)}]"

    def contains(self, similarity: float) -> bool:
        return self.lo + _EPS < similarity <= self.hi + _EPS


def split_regions(lo: float, hi: float, n: int = 4) -> list[Region]:
    """``n`` equal-width half-open regions ``(lo, hi]``, lowest first.

    >>> [r.label for r in split_regions(0.9, 1.0)]
    ['(0.9,0.925]', '(0.925,0.95]', '(0.95,0.975]', '(0.975,1]']
    """
    if n < 1:
        raise ValueError(f"n must be at least 1, got {n}")
    if not hi > lo:
        raise ValueError(f"need lo < hi, got ({lo}, {hi}]")
    # Each edge from lo and the step, rounded, so (0.5, 1] gives exactly 0.625, not 0.62500001.
    edges = [round(lo + (hi - lo) * i / n, 12) for i in range(n + 1)]
    edges[-1] = hi
    return [Region(edges[i], edges[i + 1]) for i in range(n)]


def region_index(similarity: float, regions: Sequence[Region]) -> int | None:
    """The index of the region holding ``similarity``, or None when it lies outside all."""
    for i, region in enumerate(regions):
        if region.contains(similarity):
            return i
    return None


def best_per_region(similarities: Sequence[float], regions: Sequence[Region]) -> list[int | None]:
    """For each region, the index of the most similar candidate inside it (None if none is).

    Ties go to the earliest candidate, so the choice is deterministic for a given table order.
    """
    best: list[int | None] = [None] * len(regions)
    for i, s in enumerate(similarities):
        r = region_index(s, regions)
        if r is None:
            continue
        current = best[r]
        if current is None or s > similarities[current]:
            best[r] = i
    return best


def pearson(x: Sequence[float], y: Sequence[float]) -> tuple[float | None, float | None]:
    """Pearson's r and its two-sided p-value (Student's t with n - 2 degrees of freedom).

    Returns ``(None, None)`` when r is undefined: fewer than 3 pairs or a constant variable.
    """
    if len(x) != len(y):
        raise ValueError(f"x and y differ in length: {len(x)} != {len(y)}")
    n = len(x)
    if n < 3:
        return None, None
    xa = np.asarray(x, dtype=np.float64)
    ya = np.asarray(y, dtype=np.float64)
    # A constant column has zero variance in exact arithmetic; checking the deviations instead
    # would see float noise around the mean (e.g. of [0.1, 0.1, 0.1]) as variance.
    if np.ptp(xa) == 0 or np.ptp(ya) == 0:
        return None, None
    dx = xa - xa.mean()
    dy = ya - ya.mean()
    r = float(np.sum(dx * dy) / math.sqrt(float(np.sum(dx * dx)) * float(np.sum(dy * dy))))
    r = max(-1.0, min(1.0, r))
    if abs(r) == 1.0:
        return r, 0.0
    from scipy import stats  # imported late: only the p-value needs scipy

    df = n - 2
    t = r * math.sqrt(df / (1.0 - r * r))
    p = float(2.0 * stats.t.sf(abs(t), df))
    return r, min(1.0, p)


def mean_std(values: Sequence[float]) -> tuple[float, float]:
    """Mean and *population* standard deviation (ddof=0), as the study's shaded bands.

    Raises ValueError for no values rather than returning NaN into a JSON result.
    """
    if len(values) == 0:
        raise ValueError("mean_std of no values")
    a = np.asarray(values, dtype=np.float64)
    return float(a.mean()), float(a.std(ddof=0))


def saturation_point(
    thresholds: Sequence[float], means: Sequence[float], *, fraction: float = 0.9
) -> float | None:
    """The first threshold at which the curve has made ``fraction`` of its total rise.

    This is our operational definition of "where the curve saturates": the study read the
    point off its plots (Fig 3.6/3.7). The total rise is ``means[-1] - means[0]``; None when
    there are fewer than two points or the curve does not rise.
    """
    if len(thresholds) != len(means):
        raise ValueError(
            f"thresholds and means differ in length: {len(thresholds)} != {len(means)}"
        )
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"fraction must be in (0, 1], got {fraction}")
    if len(means) < 2:
        return None
    rise = means[-1] - means[0]
    if not rise > 0:
        return None
    target = means[0] + fraction * rise
    for t, m in zip(thresholds, means, strict=True):
        if m >= target - _EPS:
            return float(t)
    return float(thresholds[-1])  # unreachable: the last point always meets the target


#: The normal quantile of a two-sided 95% interval.
Z95 = 1.959963984540054


def wilson_interval(successes: float, trials: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of a rate ``successes / trials`` (95% by default).

    Unlike the normal approximation it stays inside [0, 1] and is not empty at 0 or n
    successes, which small samples of acceptable answers often are. ``(0.0, 1.0)`` for no
    trials: nothing is known. ``successes`` may be fractional (a tie counted as half).

    >>> [round(x, 3) for x in wilson_interval(9, 10)]
    [0.596, 0.982]
    """
    if trials < 0 or not 0 <= successes <= trials:
        raise ValueError(f"need 0 <= successes <= trials, got {successes} of {trials}")
    if trials == 0:
        return 0.0, 1.0
    p = successes / trials
    z2 = z * z
    centre = (p + z2 / (2 * trials)) / (1 + z2 / trials)
    half = z * math.sqrt(p * (1 - p) / trials + z2 / (4 * trials * trials)) / (1 + z2 / trials)
    return max(0.0, centre - half), min(1.0, centre + half)


def rate(acceptable: int, answers: int) -> RateCI:
    """A rate of acceptable answers with its 95% Wilson interval."""
    lo, hi = wilson_interval(acceptable, answers)
    return RateCI(
        acceptable=acceptable,
        answers=answers,
        rate=acceptable / answers if answers else None,
        low=lo,
        high=hi,
    )


def paired_difference_interval(
    both: int, first_only: int, second_only: int, neither: int, z: float = Z95
) -> tuple[float, float, float] | None:
    """The difference of two rates measured on the same items, ``P(first) - P(second)``, and
    its interval: Newcombe's hybrid score interval for paired proportions (1998, "method 10"),
    built from each rate's Wilson interval and corrected for their correlation.

    ``both``/``first_only``/``second_only``/``neither`` count the items where both events
    happened, only the first, only the second, neither. ``None`` without items.

    >>> [round(x, 3) for x in paired_difference_interval(10, 10, 0, 80)]
    [0.1, 0.039, 0.17]
    """
    n = both + first_only + second_only + neither
    if n == 0:
        return None
    p1 = (both + first_only) / n
    p2 = (both + second_only) / n
    low1, high1 = wilson_interval(both + first_only, n, z)
    low2, high2 = wilson_interval(both + second_only, n, z)
    cross = both * neither - first_only * second_only
    denominator = math.sqrt(
        float(both + first_only)
        * (second_only + neither)
        * (both + second_only)
        * (first_only + neither)
    )
    if denominator == 0.0:
        phi = 0.0
    else:
        # Newcombe's continuity correction of a positive correlation (never over-credited).
        phi = (max(cross - n / 2, 0.0) if cross > 0 else cross) / denominator
    diff = p1 - p2
    low = diff - math.sqrt(
        max(0.0, (p1 - low1) ** 2 - 2 * phi * (p1 - low1) * (high2 - p2) + (high2 - p2) ** 2)
    )
    high = diff + math.sqrt(
        max(0.0, (high1 - p1) ** 2 - 2 * phi * (high1 - p1) * (p2 - low2) + (p2 - low2) ** 2)
    )
    return diff, max(-1.0, low), min(1.0, high)

"""The chapter-3 statistics: regions, best candidates, Pearson's r, saturation point."""

from __future__ import annotations

import itertools
import math

import pytest
from scipy import stats

from experiments._stats import (
    STUDY_REGIONS,
    Region,
    best_per_region,
    mean_std,
    pearson,
    region_index,
    saturation_point,
    split_regions,
)


def test_public_api() -> None:
    import experiments._stats as mod

    assert sorted(mod.__all__) == [
        "Region",
        "STUDY_REGIONS",
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


def test_study_regions_labels_and_bounds() -> None:
    full = split_regions(*STUDY_REGIONS["full"])
    keyword = split_regions(*STUDY_REGIONS["keyword"])
    assert [r.label for r in full] == ["(0.9,0.925]", "(0.925,0.95]", "(0.95,0.975]", "(0.975,1]"]
    assert [r.label for r in keyword] == [
        "(0.5,0.625]",
        "(0.625,0.75]",
        "(0.75,0.875]",
        "(0.875,1]",
    ]
    assert [(r.lo, r.hi) for r in keyword] == [
        (0.5, 0.625),
        (0.625, 0.75),
        (0.75, 0.875),
        (0.875, 1.0),
    ]
    assert full[0].lo == 0.9 and full[-1].hi == 1.0
    # Consecutive regions share their edge exactly: nothing can fall between them.
    assert all(a.hi == b.lo for a, b in itertools.pairwise(full))


def test_split_regions_rejects_bad_input() -> None:
    with pytest.raises(ValueError):
        split_regions(1.0, 0.9)
    with pytest.raises(ValueError):
        split_regions(0.0, 1.0, 0)


def test_region_index_boundaries() -> None:
    full = split_regions(0.9, 1.0)
    assert region_index(0.925, full) == 0
    assert region_index(0.9 + 0.025, full) == 0  # a computed boundary, up to float error
    assert region_index(0.9, full) is None  # the lower edge is excluded
    assert region_index(0.9 + 1e-12, full) is None  # ... also when computed
    assert region_index(0.9000001, full) == 0
    assert region_index(0.95, full) == 1
    assert region_index(0.96, full) == 2
    assert region_index(1.0, full) == 3
    assert region_index(1.0 + 1e-12, full) == 3  # (cos + 1) / 2 may overshoot 1 by a hair
    assert region_index(1.01, full) is None
    assert region_index(0.5, full) is None
    keyword = split_regions(0.5, 1.0)
    assert region_index(0.5 + 3 * 0.125, keyword) == 2
    assert region_index(0.75, keyword) == 1


def test_region_dataclass() -> None:
    r = Region(0.0, 0.5)
    assert r.label == "(0,0.5]"
    assert r.contains(0.5) and not r.contains(0.0)
    assert Region(0.1234, 0.98765).label == "(0.123,0.988]"


def test_best_per_region() -> None:
    regions = split_regions(0.9, 1.0)
    sims = [0.91, 0.99, 0.92, 0.5, 0.93, 0.92, 0.95]
    # (0.9,0.925]: 0.91 (0), 0.92 (2), 0.92 (5) -> first of the tied maximum, index 2
    # (0.925,0.95]: 0.93 (4), 0.95 (6) -> 6; (0.95,0.975]: none; (0.975,1]: 0.99 (1)
    assert best_per_region(sims, regions) == [2, 6, None, 1]
    assert best_per_region([], regions) == [None, None, None, None]


def test_pearson_hand_example() -> None:
    # x = 1..5, y = 2, 4, 5, 4, 5: mean x 3, mean y 4;
    # dx = -2 -1 0 1 2, dy = -2 0 1 0 1; sum dx dy = 4 + 0 + 0 + 0 + 2 = 6;
    # sum dx^2 = 10, sum dy^2 = 6; r = 6 / sqrt(60) = 0.7745967
    r, p = pearson([1, 2, 3, 4, 5], [2, 4, 5, 4, 5])
    assert r == pytest.approx(6 / math.sqrt(60), rel=1e-12)
    # t = r sqrt(3 / (1 - r^2)) = 0.7746 * sqrt(3 / 0.4) = 2.1213; two-sided p with 3 df
    assert p == pytest.approx(2 * stats.t.sf(6 / math.sqrt(60) * math.sqrt(7.5), 3), rel=1e-9)
    assert p == pytest.approx(0.1240, abs=1e-4)


def test_pearson_matches_scipy() -> None:
    x = [0.1, 0.4, 0.35, 0.8, 0.9, 0.2, 0.55, 0.61]
    y = [2.0, 2.9, 3.3, 5.1, 4.2, 1.7, 3.0, 4.4]
    r, p = pearson(x, y)
    expected = stats.pearsonr(x, y)
    assert r == pytest.approx(expected.statistic, rel=1e-10)
    assert p == pytest.approx(expected.pvalue, rel=1e-8)
    r_neg, p_neg = pearson(x, [-v for v in y])
    assert r_neg == pytest.approx(-expected.statistic, rel=1e-10)
    assert p_neg == pytest.approx(expected.pvalue, rel=1e-8)


def test_pearson_undefined_and_perfect() -> None:
    assert pearson([1, 2], [3, 4]) == (None, None)
    assert pearson([], []) == (None, None)
    assert pearson([0.1, 0.1, 0.1], [1, 2, 3]) == (None, None)
    assert pearson([1, 2, 3], [5, 5, 5]) == (None, None)
    assert pearson([1, 2, 3], [2, 4, 6]) == (1.0, 0.0)
    assert pearson([1, 2, 3], [6, 4, 2]) == (-1.0, 0.0)
    with pytest.raises(ValueError):
        pearson([1, 2, 3], [1, 2])


def test_mean_std_is_population() -> None:
    mean, std = mean_std([1.0, 2.0, 3.0, 4.0])
    assert mean == 2.5
    assert std == pytest.approx(math.sqrt(1.25))  # ddof=0: sqrt((2.25+0.25+0.25+2.25)/4)
    assert mean_std([7.0]) == (7.0, 0.0)
    with pytest.raises(ValueError):
        mean_std([])


def test_saturation_point() -> None:
    thresholds = [1.0, 2.0, 3.0, 4.0, 5.0]
    # rise 0.9 -> 0.99 is 0.09; 90% of it is reached at 0.981, first at threshold 3
    assert saturation_point(thresholds, [0.9, 0.95, 0.985, 0.988, 0.99]) == 3.0
    assert saturation_point(thresholds, [0.9, 0.95, 0.985, 0.988, 0.99], fraction=0.5) == 2.0
    assert saturation_point(thresholds, [0.9, 0.91, 0.92, 0.93, 0.99]) == 5.0
    # an exact target, reached up to float error
    assert saturation_point([0, 1, 2], [0.0, 0.9, 1.0]) == 1
    assert saturation_point(thresholds, [0.9, 0.9, 0.9, 0.9, 0.9]) is None  # flat
    assert saturation_point(thresholds, [0.99, 0.98, 0.97, 0.96, 0.95]) is None  # falling
    assert saturation_point([1.0], [0.5]) is None
    assert saturation_point([], []) is None
    with pytest.raises(ValueError):
        saturation_point([1.0, 2.0], [0.5])
    with pytest.raises(ValueError):
        saturation_point([1.0, 2.0], [0.5, 0.6], fraction=0.0)


def test_the_paired_interval_covers_the_true_difference_as_often_as_it_claims() -> None:
    import random

    from experiments._stats import paired_difference_interval

    # Correlated pairs: a served answer that is bad is more often bad again on re-answer.
    rng = random.Random(7)
    for p_first, p_second, agree in [(0.45, 0.40, 0.6), (0.2, 0.2, 0.3), (0.6, 0.5, 0.0)]:
        missed = 0
        trials = 400
        for _ in range(trials):
            counts = [0, 0, 0, 0]  # both, first only, second only, neither
            for _ in range(150):
                first = rng.random() < p_first
                if rng.random() < agree:
                    second = first if rng.random() < 0.5 else rng.random() < p_second
                else:
                    second = rng.random() < p_second
                counts[0 if first and second else 1 if first else 2 if second else 3] += 1
            result = paired_difference_interval(*counts)
            assert result is not None
            _, low, high = result
            second_rate = agree * (p_first + p_second) / 2 + (1 - agree) * p_second
            truth = p_first - second_rate
            missed += not low <= truth <= high
        assert missed / trials <= 0.08, (p_first, p_second, agree, missed)


def test_the_paired_interval_without_correlation_is_the_unpaired_one() -> None:
    from experiments._stats import paired_difference_interval

    assert paired_difference_interval(0, 0, 0, 0) is None
    # Independence (a d = b c): no correlation to correct for.
    diff, low, high = paired_difference_interval(10, 30, 10, 30)  # type: ignore[misc]
    assert diff == pytest.approx(0.25)
    assert low < 0.25 < high

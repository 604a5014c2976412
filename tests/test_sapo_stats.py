"""The experiment's statistics: paired bootstrap intervals with answers known by hand."""

from __future__ import annotations

import pytest

from swarmnode.lab.sapo_stats import mean_band, paired_diff, percentile


def test_constant_difference_has_a_point_interval() -> None:
    a = {(s, n): 10.0 + s + n for s in range(3) for n in range(4)}
    b = {k: v - 2.5 for k, v in a.items()}
    d = paired_diff(a, b, n_boot=500)
    assert d.pairs == 12 and d.diff == pytest.approx(2.5)
    assert d.lo == pytest.approx(2.5) and d.hi == pytest.approx(2.5)


def test_two_pairs_interval_by_hand() -> None:
    # Differences 0 and 2: a resample's mean is 0, 1 or 2 with probability 1/4, 1/2,
    # 1/4, so the 2.5% and 97.5% percentiles are 0 and 2.
    d = paired_diff({(0, 0): 5.0, (0, 1): 7.0}, {(0, 0): 5.0, (0, 1): 5.0}, n_boot=4000)
    assert (d.diff, d.lo, d.hi) == (1.0, 0.0, 2.0)
    assert d.rel == pytest.approx(0.2)  # 12 / 10 - 1


def test_only_paired_keys_count() -> None:
    d = paired_diff({(0, 0): 3.0, (1, 0): 100.0}, {(0, 0): 1.0, (2, 0): -100.0})
    assert d.pairs == 1 and d.diff == 2.0
    assert paired_diff({}, {(0, 0): 1.0}).pairs == 0


def test_percentile_and_band() -> None:
    xs = sorted(float(x) for x in range(1, 101))
    assert percentile(xs, 0.025) == 3.0 and percentile(xs, 0.975) == 98.0
    mean, lo, hi = mean_band([[0.0, 1.0], [2.0, 1.0], [4.0, 1.0]])
    assert mean == [2.0, 1.0] and hi[1] == lo[1] == 1.0
    assert hi[0] - mean[0] == pytest.approx(1.96 * 2.0 / 3**0.5)

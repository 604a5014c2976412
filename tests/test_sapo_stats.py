"""The experiment's statistics: paired bootstrap intervals, swarm-level comparisons and
item-level held-out intervals, each with answers known by hand."""

from __future__ import annotations

import math

import pytest

from swarmnode.lab.sapo_stats import (
    item_accuracy,
    item_diff,
    mean_band,
    paired_diff,
    percentile,
    permutation_test,
    unit_bootstrap,
    unit_diff,
    units,
)


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


def test_units_are_swarm_means_or_nodes() -> None:
    # Two swarms of three nodes: means (1 + 2 + 6) / 3 = 3 and (0 + 0 + 3) / 3 = 1.
    v = {(0, 0): 1.0, (0, 1): 2.0, (0, 2): 6.0, (4, 0): 0.0, (4, 1): 0.0, (4, 2): 3.0}
    assert units(v, swarm=True) == [3.0, 1.0]
    assert units(v, swarm=False) == [1.0, 2.0, 6.0, 0.0, 0.0, 3.0]


def test_permutation_p_by_hand_three_against_three() -> None:
    # a = {1, 2, 4}, b = {3, 5, 6}: diff = (2 * sum(a) - 21) / 3 = -7/3. Of the 20
    # 3-subsets of {1..6}, |2s - 21| >= 7 for s <= 7 ({1,2,3}, {1,2,4}) and s >= 14
    # ({3,5,6}, {4,5,6}): p = 4 / 20.
    p, count, exact = permutation_test([1.0, 2.0, 4.0], [3.0, 5.0, 6.0])
    assert (p, count, exact) == (pytest.approx(0.2), 20, True)
    # Clearly apart: only the observed split and its mirror, 2 / 20.
    assert permutation_test([1.0, 2.0, 3.0], [4.0, 5.0, 6.0])[0] == pytest.approx(0.1)
    # No difference at all: every relabelling is as extreme.
    assert permutation_test([2.0, 2.0], [2.0, 2.0, 2.0])[0] == 1.0


def test_permutation_monte_carlo_agrees_with_exact() -> None:
    a = [0.3, 1.1, 0.8, 1.9, 1.4, 0.9, 1.6, 2.2]
    b = [0.2, 0.7, 0.1, 1.0, 0.5, 1.2, 0.4, 0.6]
    p_exact, count, exact = permutation_test(a, b)
    assert exact and count == 12870  # C(16, 8)
    p_mc, draws, exact_mc = permutation_test(a, b, limit=100, n_perm=20_000, seed=3)
    assert not exact_mc and draws == 20_000
    assert abs(p_mc - p_exact) < 0.01 and 0.0 < p_exact < 0.05


def test_cluster_bootstrap_separates_or_not() -> None:
    # Five swarms well above twelve lone nodes: the interval excludes 0.
    swarms = [10.0, 11.0, 12.0, 10.5, 11.5]
    lone = [5.0, 6.0, 4.5, 5.0, 6.5, 5.0, 4.0, 6.0, 5.5, 4.5, 5.0, 6.0]  # mean 63 / 12
    d = unit_diff(swarms, lone, n_boot=2000)
    assert d.diff == pytest.approx(11.0 - 5.25) and d.lo > 4.0 and d.hi < 7.5
    assert d.rel_lo > 0 and d.p < 1e-3 and d.exact and d.relabellings == 6188  # C(17, 5)
    # The same values split across the arms: the interval holds 0, p is large.
    d = unit_diff([10.0, 5.0, 11.0, 4.5, 6.0], [5.5, 10.5, 4.0, 11.5, 6.0, 5.0], n_boot=2000)
    assert d.lo < 0 < d.hi and d.p > 0.5
    # An arm with no unit: nothing to say.
    assert math.isnan(unit_diff([], [1.0]).diff) and unit_diff([], [1.0]).relabellings == 0


def test_cluster_bootstrap_resamples_swarms_not_nodes() -> None:
    # Two swarms whose nodes agree within a swarm but not across: by node the
    # interval of a constant-per-swarm arm looks narrow; by swarm it spans both.
    per_node = {(s, n): float(10 * s) for s in (0, 1) for n in range(4)}
    lone = [0.0] * 8
    lo, hi, _, _ = unit_bootstrap(units(per_node, swarm=True), lone, n_boot=4000)
    # Swarm means 0 and 10: a resample's mean is 0, 5 or 10 (1/4, 1/2, 1/4).
    assert (lo, hi) == (0.0, 10.0)
    lo_n, hi_n, _, _ = unit_bootstrap(units(per_node, swarm=False), lone, n_boot=4000)
    assert lo_n > 0.0 and hi_n < 10.0


def item(ds: str, i: int, score: float) -> dict[str, object]:
    return {"dataset": ds, "config": {"size": 50}, "seed": 9, "index": i, "score": score}


def test_item_bootstrap_paired_and_unpaired() -> None:
    # Two nodes per arm score the same 20 items; strict: 1.0 counts, 0.5 does not.
    a = item_accuracy([item("d", i, 1.0 if i < 15 else 0.5) for i in range(20)] * 2)
    b = item_accuracy([item("d", i, 1.0 if i < 5 else 0.0) for i in range(20)] * 2)
    assert sum(a.values()) == 15 and sum(b.values()) == 5
    d = item_diff(a, b, n_boot=2000)
    assert d.paired and d.items == 20 and d.diff == pytest.approx(0.5)
    assert 0.2 < d.lo < d.diff < d.hi < 0.8
    # Identical arms, paired: every resample's difference is 0.
    same = item_diff(a, dict(a), n_boot=500)
    assert (same.diff, same.lo, same.hi) == (0.0, 0.0, 0.0)
    # Different items: each arm resampled on its own, wider than paired (here a and
    # its copy on other indices, which paired would call a point at 0).
    shifted = {(k[0], k[1], k[2], k[3] + 100): v for k, v in a.items()}
    apart = item_diff(a, shifted, n_boot=2000)
    assert not apart.paired and apart.diff == 0.0 and apart.lo < 0 < apart.hi
    # Node-mixed per item: half the nodes right is 0.5 on that item.
    mixed = item_accuracy([item("d", 0, 1.0), item("d", 0, 0.0)])
    assert mixed == {("d", '{"size": 50}', 9, 0): 0.5}
    assert item_diff({}, b).items == 0

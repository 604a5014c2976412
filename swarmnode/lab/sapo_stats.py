"""Statistics for the SAPO experiment: paired differences, swarm-level comparisons,
item-level held-out intervals.

A run is one (configuration, seed); each run has N nodes. Node i of seed s gets the
same task seed and initialisation in every configuration, so configurations can be
compared *paired* by (seed, node) (``paired_diff``): the unit of resampling is the
pair, and the interval is a percentile bootstrap of the mean paired difference (and
of the ratio of means, for the relative change).

Nodes of one sharing swarm are correlated, so for a sharing arm the unit of
replication is the swarm and for a lone arm (nodes that never connect) the node
(``units``). ``unit_diff`` compares two arms' units: a bootstrap that resamples units
within each arm (a cluster bootstrap) and an exact permutation test over the pooled
units (seeded Monte Carlo above ``EXACT_LIMIT`` relabellings). ``item_diff``
bootstraps held-out accuracy over items (paired when both arms scored the same ones).

Invariants: pure functions, no I/O (sapo_experiment.py and sapo_tables.py read the
files and call these); every random draw comes from a ``random.Random(seed)``, so
the same inputs give the same intervals and p-values; an arm with no unit gives nan.
"""

from __future__ import annotations

import itertools
import json
import math
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

Key = tuple[int, int]  # (seed, node)


@dataclass(frozen=True)
class PairedDiff:
    pairs: int
    mean_a: float
    mean_b: float
    diff: float  # mean of (a - b) over pairs
    lo: float  # 95% bootstrap interval of diff
    hi: float
    rel: float  # mean(a) / mean(b) - 1 (nan when mean(b) == 0)
    rel_lo: float
    rel_hi: float


def percentile(sorted_xs: Sequence[float], q: float) -> float:
    """The q-quantile (0..1) of sorted values, by the nearest-rank method.

    >>> percentile([0.0, 1.0, 2.0, 3.0], 0.5)
    1.0
    >>> percentile([0.0, 1.0, 2.0, 3.0], 1.0)
    3.0
    """
    if not sorted_xs:
        return math.nan
    k = max(1, math.ceil(q * len(sorted_xs)))
    return float(sorted_xs[k - 1])


def paired_diff(
    a: Mapping[Key, float],
    b: Mapping[Key, float],
    n_boot: int = 10_000,
    seed: int = 0,
) -> PairedDiff:
    """Mean of a - b over the keys both have, with 95% percentile-bootstrap intervals.

    >>> d = paired_diff({(0, 0): 3.0, (0, 1): 5.0}, {(0, 0): 1.0, (0, 1): 3.0})
    >>> (d.pairs, d.diff, d.lo, d.hi, d.rel)
    (2, 2.0, 2.0, 2.0, 1.0)
    """
    keys = sorted(set(a) & set(b))
    if not keys:
        nan = math.nan
        return PairedDiff(0, nan, nan, nan, nan, nan, nan, nan, nan)
    xa = [a[k] for k in keys]
    xb = [b[k] for k in keys]
    n = len(keys)
    rng = random.Random(seed)
    diffs, rels = [], []
    for _ in range(n_boot):
        idx = [rng.randrange(n) for _ in range(n)]
        sa = sum(xa[i] for i in idx)
        sb = sum(xb[i] for i in idx)
        diffs.append((sa - sb) / n)
        rels.append(sa / sb - 1 if sb else math.nan)
    diffs.sort()
    rels = sorted(r for r in rels if not math.isnan(r))
    mean_a, mean_b = sum(xa) / n, sum(xb) / n
    return PairedDiff(
        pairs=n,
        mean_a=mean_a,
        mean_b=mean_b,
        diff=mean_a - mean_b,
        lo=percentile(diffs, 0.025),
        hi=percentile(diffs, 0.975),
        rel=mean_a / mean_b - 1 if mean_b else math.nan,
        rel_lo=percentile(rels, 0.025),
        rel_hi=percentile(rels, 0.975),
    )


def mean_band(rows: Sequence[Sequence[float]]) -> tuple[list[float], list[float], list[float]]:
    """Per position: mean and a normal 95% band (mean +- 1.96 s.e.) over the rows.

    >>> mean_band([[1.0, 2.0], [3.0, 2.0]])
    ([2.0, 2.0], [0.04, 2.0], [3.96, 2.0])
    """
    width = min(len(r) for r in rows) if rows else 0
    means, lows, highs = [], [], []
    for j in range(width):
        col = [r[j] for r in rows]
        m = sum(col) / len(col)
        sd = math.sqrt(sum((x - m) ** 2 for x in col) / (len(col) - 1)) if len(col) > 1 else 0.0
        half = 1.96 * sd / math.sqrt(len(col))
        means.append(round(m, 10))
        lows.append(round(m - half, 10))
        highs.append(round(m + half, 10))
    return means, lows, highs


# ---- Swarms as the unit ---------------------------------------------------------


def units(values: Mapping[Key, float], swarm: bool) -> list[float]:
    """An arm's units of replication from per-node values keyed by (seed, node).

    A sharing arm's unit is the swarm (one seed): the mean of its nodes' values. A lone
    arm's nodes never connect, so each node is its own unit. Ordered by key.

    >>> v = {(0, 0): 1.0, (0, 1): 3.0, (1, 0): 5.0, (1, 1): 9.0}
    >>> units(v, swarm=True)
    [2.0, 7.0]
    >>> units(v, swarm=False)
    [1.0, 3.0, 5.0, 9.0]
    """
    if not swarm:
        return [values[k] for k in sorted(values)]
    by_seed: dict[int, list[float]] = {}
    for (seed, _), x in sorted(values.items()):
        by_seed.setdefault(seed, []).append(x)
    return [sum(xs) / len(xs) for xs in by_seed.values()]


@dataclass(frozen=True)
class UnitDiff:
    """Difference of means between two arms' units (a - b), with its uncertainty."""

    units_a: int
    units_b: int
    mean_a: float
    mean_b: float
    diff: float  # mean(a) - mean(b)
    lo: float  # 95% bootstrap interval of diff, units resampled within each arm
    hi: float
    rel: float  # mean(a) / mean(b) - 1 (nan when mean(b) == 0)
    rel_lo: float
    rel_hi: float
    p: float  # two-sided permutation p-value of diff over relabellings of the units
    relabellings: int  # how many relabellings p is over (all of them when exact)
    exact: bool


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs)


def unit_bootstrap(
    a: Sequence[float], b: Sequence[float], n_boot: int = 10_000, seed: int = 0
) -> tuple[float, float, float, float]:
    """95% percentile intervals of mean(a) - mean(b) and of mean(a) / mean(b) - 1,
    resampling each arm's units with replacement within the arm (a cluster bootstrap
    when the units are swarms).

    >>> unit_bootstrap([3.0, 3.0], [1.0, 1.0, 1.0], n_boot=50)
    (2.0, 2.0, 2.0, 2.0)
    """
    rng = random.Random(seed)
    na, nb = len(a), len(b)
    diffs, rels = [], []
    for _ in range(n_boot):
        ma = sum(rng.choices(a, k=na)) / na
        mb = sum(rng.choices(b, k=nb)) / nb
        diffs.append(ma - mb)
        if mb:
            rels.append(ma / mb - 1)
    diffs.sort()
    rels.sort()
    return (
        percentile(diffs, 0.025),
        percentile(diffs, 0.975),
        percentile(rels, 0.025),
        percentile(rels, 0.975),
    )


EXACT_LIMIT = 200_000  # relabellings enumerated at most; above, a seeded Monte Carlo


def permutation_test(
    a: Sequence[float],
    b: Sequence[float],
    limit: int = EXACT_LIMIT,
    n_perm: int = 20_000,
    seed: int = 0,
) -> tuple[float, int, bool]:
    """Two-sided permutation p-value of mean(a) - mean(b): (p, relabellings, exact).

    Exact when the pooled units have at most ``limit`` ways to choose a's: p is the
    share of all relabellings whose |difference| is at least the observed one (the
    observed labelling is one of them, so p >= 1 / C(na + nb, na)). Otherwise
    ``n_perm`` seeded random relabellings, p = (1 + hits) / (1 + n_perm).
    The null is that the labels are exchangeable: a swarm's mean and a lone node
    are compared as if drawn alike, which holds exactly only when sharing changes
    nothing, variance included.

    3 vs 3 clearly apart: only the observed split and its mirror are as extreme.

    >>> permutation_test([1.0, 2.0, 3.0], [4.0, 5.0, 6.0])
    (0.1, 20, True)
    """
    pooled = [*a, *b]
    na, n = len(a), len(a) + len(b)
    total = sum(pooled)
    observed = abs(_mean(a) - _mean(b))
    tol = 1e-9 * max(1.0, observed)

    def extreme(sum_a: float) -> bool:
        return abs(sum_a / na - (total - sum_a) / (n - na)) >= observed - tol

    count = math.comb(n, na)
    if count <= limit:
        hits = sum(extreme(sum(c)) for c in itertools.combinations(pooled, na))
        return hits / count, count, True
    rng = random.Random(seed)
    hits = sum(extreme(sum(rng.sample(pooled, na))) for _ in range(n_perm))
    return (1 + hits) / (1 + n_perm), n_perm, False


def unit_diff(
    a: Sequence[float], b: Sequence[float], n_boot: int = 10_000, seed: int = 0
) -> UnitDiff:
    """Both arms' units compared: the difference of means, its cluster-bootstrap
    interval and its permutation p (all nan, 0 relabellings, if an arm has no unit).

    >>> d = unit_diff([4.0, 6.0], [1.0, 2.0, 3.0])
    >>> (d.diff, d.rel, d.p, d.relabellings)
    (3.0, 1.5, 0.1, 10)
    """
    if not a or not b:
        nan = math.nan
        return UnitDiff(len(a), len(b), nan, nan, nan, nan, nan, nan, nan, nan, nan, 0, True)
    lo, hi, rel_lo, rel_hi = unit_bootstrap(a, b, n_boot, seed)
    p, relabellings, exact = permutation_test(a, b, seed=seed)
    ma, mb = _mean(a), _mean(b)
    return UnitDiff(
        units_a=len(a),
        units_b=len(b),
        mean_a=ma,
        mean_b=mb,
        diff=ma - mb,
        lo=lo,
        hi=hi,
        rel=ma / mb - 1 if mb else math.nan,
        rel_lo=rel_lo,
        rel_hi=rel_hi,
        p=p,
        relabellings=relabellings,
        exact=exact,
    )


# ---- Held-out items -------------------------------------------------------------

ItemKey = tuple[str, str, int, int]  # (dataset, config as sorted JSON, seed, index)


def item_key(record: Mapping[str, Any]) -> ItemKey:
    """The identity of a held-out item from its heldout_items.jsonl record.

    >>> item_key({"dataset": "chain_sum", "config": {"size": 9}, "seed": 7, "index": 2})
    ('chain_sum', '{"size": 9}', 7, 2)
    """
    config = json.dumps(record["config"], sort_keys=True)
    return (str(record["dataset"]), config, int(record["seed"]), int(record["index"]))


def item_accuracy(records: Iterable[Mapping[str, Any]]) -> dict[ItemKey, float]:
    """Per item, an arm's strict accuracy on it: the share of its nodes' records with
    score >= 1.0 (every node of an arm scores the same held-out items).

    >>> recs = [{"dataset": "d", "config": {}, "seed": 0, "index": 0, "score": s}
    ...         for s in (1.0, 0.5, 1.0, 0.0)]
    >>> item_accuracy(recs)
    {('d', '{}', 0, 0): 0.5}
    """
    hits: dict[ItemKey, list[float]] = {}
    for r in records:
        hits.setdefault(item_key(r), []).append(1.0 if float(r["score"]) >= 1.0 else 0.0)
    return {k: sum(v) / len(v) for k, v in hits.items()}


@dataclass(frozen=True)
class ItemDiff:
    items: int  # items resampled (per arm when unpaired: the smaller arm's count)
    paired: bool  # both arms scored the same items: resampled together
    diff: float  # accuracy(a) - accuracy(b), items weighted alike
    lo: float  # 95% item-bootstrap interval
    hi: float


def item_diff(
    a: Mapping[ItemKey, float],
    b: Mapping[ItemKey, float],
    n_boot: int = 10_000,
    seed: int = 0,
) -> ItemDiff:
    """Held-out accuracy difference a - b with an item-level bootstrap interval.

    When both arms scored exactly the same items, items are resampled together
    (paired: each resample compares the arms on the same questions); otherwise each
    arm's items are resampled on their own. Only item sampling varies here: the
    spread between nodes or swarms is the unit-level interval's business.

    >>> k = [("d", "{}", 0, i) for i in range(4)]
    >>> item_diff(dict(zip(k, [1.0, 1.0, 0.0, 0.0])), dict(zip(k, [0.0, 0.0, 0.0, 0.0])), 200)
    ItemDiff(items=4, paired=True, diff=0.5, lo=0.0, hi=1.0)
    """
    if not a or not b:
        return ItemDiff(0, False, math.nan, math.nan, math.nan)
    rng = random.Random(seed)
    diffs = []
    if set(a) == set(b):
        keys = sorted(a)
        d = [a[k] - b[k] for k in keys]
        n = len(d)
        for _ in range(n_boot):
            diffs.append(sum(rng.choices(d, k=n)) / n)
        diffs.sort()
        return ItemDiff(n, True, _mean(d), percentile(diffs, 0.025), percentile(diffs, 0.975))
    xa, xb = [a[k] for k in sorted(a)], [b[k] for k in sorted(b)]
    lo, hi, _, _ = unit_bootstrap(xa, xb, n_boot, seed)
    return ItemDiff(min(len(xa), len(xb)), False, _mean(xa) - _mean(xb), lo, hi)

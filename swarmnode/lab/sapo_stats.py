"""Statistics for the SAPO experiment: paired differences with bootstrap intervals.

A run is one (configuration, seed); each run has N nodes. Node i of seed s gets the
same task seed and initialisation in every configuration, so configurations are
compared *paired* by (seed, node): the unit of resampling is the pair, and the
interval is a percentile bootstrap of the mean paired difference (and of the ratio
of means, for the relative change).

Pure functions, no I/O: sapo_experiment.py reads the CSVs and calls these.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

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

"""Interim paired comparison of two runs over the rounds both have (a run still going).

    python scripts/sapo_interim.py docs/experiments/2026-11-30/raw none-s0 complete-s0

Reads <root>/<run>/n<i>.metrics.jsonl (the layout docs/experiments keeps) or
<root>/<run>/n<i>/metrics.jsonl (a live sweep folder).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from sapo_stats import paired_diff

ROOT, BASE, OTHER = Path(sys.argv[1]), sys.argv[2], sys.argv[3]


def load(run: str, i: int) -> dict[int, dict]:
    path = ROOT / run / f"n{i}.metrics.jsonl"
    if not path.is_file():
        path = ROOT / run / f"n{i}" / "metrics.jsonl"
    d = {}
    for line in path.read_text().splitlines():
        r = json.loads(line)
        d[r["round"]] = r
    return d


k = min(max(load(OTHER, i)) for i in range(4))
none, comp = {}, {}
lines = []
tot = {BASE: [0, 0, 0, 0.0], OTHER: [0, 0, 0, 0.0]}
for i in range(4):
    n, c = load("none-s0", i), load(OTHER, i)
    none[(0, i)] = sum(n[r]["accuracy"] for r in range(1, k + 1))
    comp[(0, i)] = sum(c[r]["accuracy"] for r in range(1, k + 1))
    for name, d in ((BASE, n), (OTHER, c)):
        t = tot[name]
        t[0] += sum(d[r]["groups_trained"] for r in range(1, k + 1))
        t[1] += sum(d[r]["tokens_trained"] for r in range(1, k + 1))
        t[2] += sum(d[r].get("completed_groups", 0) for r in range(1, k + 1))
        t[3] += sum(d[r]["gen_seconds"] + d[r]["train_seconds"] for r in range(1, k + 1))
d = paired_diff(comp, none)
print(f"rounds={k}")
print(f"per-node cumulative reward, rounds 1-{k}:")
print("  ", BASE, [round(none[(0, i)], 2) for i in range(4)])
print("  ", OTHER, [round(comp[(0, i)], 2) for i in range(4)])
print(f"mean {BASE} {d.mean_b:.2f} {OTHER} {d.mean_a:.2f} change {d.rel:+.1%}")
print(f"  95% bootstrap over the node pairs: [{d.rel_lo:+.1%}, {d.rel_hi:+.1%}]")
for name, t in tot.items():
    print(f"{name}: groups trained {t[0]}, tokens trained {t[1]}, completed groups {t[2]},")
    print(f"  compute s per node {t[3] / 4:.0f}")

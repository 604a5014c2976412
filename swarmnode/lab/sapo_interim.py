"""Interim paired comparison of two runs over the rounds both have (a run still going).

    python scripts/sapo_interim.py docs/experiments/2026-11-30/raw none-s0 complete-s0

Reads <root>/<run>/n<i>.metrics.jsonl (the layout docs/experiments keeps) or
<root>/<run>/n<i>/metrics.jsonl (a live sweep folder).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from swarmnode.lab.sapo_stats import paired_diff

NODES = 4  # the sweep's nodes a run


def load(root: Path, run: str, i: int) -> dict[int, dict[str, Any]]:
    """Node i's records of one run, by round (the last record of a round wins)."""
    path = root / run / f"n{i}.metrics.jsonl"
    if not path.is_file():
        path = root / run / f"n{i}" / "metrics.jsonl"
    d = {}
    for line in path.read_text().splitlines():
        r = json.loads(line)
        d[r["round"]] = r
    return d


def compare(root: Path, base: str, other: str) -> None:
    """Print the per-node cumulative accuracy of both runs over the rounds ``other``
    has on every node, the paired change, and what each trained and spent.

    The baseline's records are read from the run ``none-s0`` whatever ``base`` is
    named (``base`` only labels the lines), as this comparison always did."""
    k = min(max(load(root, other, i)) for i in range(NODES))
    none, comp = {}, {}
    tot: dict[str, list[float]] = {base: [0, 0, 0, 0.0], other: [0, 0, 0, 0.0]}
    for i in range(NODES):
        n, c = load(root, "none-s0", i), load(root, other, i)
        none[(0, i)] = sum(n[r]["accuracy"] for r in range(1, k + 1))
        comp[(0, i)] = sum(c[r]["accuracy"] for r in range(1, k + 1))
        for name, recs in ((base, n), (other, c)):
            t = tot[name]
            t[0] += sum(recs[r]["groups_trained"] for r in range(1, k + 1))
            t[1] += sum(recs[r]["tokens_trained"] for r in range(1, k + 1))
            t[2] += sum(recs[r].get("completed_groups", 0) for r in range(1, k + 1))
            t[3] += sum(recs[r]["gen_seconds"] + recs[r]["train_seconds"] for r in range(1, k + 1))
    d = paired_diff(comp, none)
    print(f"rounds={k}")
    print(f"per-node cumulative reward, rounds 1-{k}:")
    print("  ", base, [round(none[(0, i)], 2) for i in range(NODES)])
    print("  ", other, [round(comp[(0, i)], 2) for i in range(NODES)])
    print(f"mean {base} {d.mean_b:.2f} {other} {d.mean_a:.2f} change {d.rel:+.1%}")
    print(f"  95% bootstrap over the node pairs: [{d.rel_lo:+.1%}, {d.rel_hi:+.1%}]")
    for name, t in tot.items():
        print(f"{name}: groups trained {t[0]}, tokens trained {t[1]}, completed groups {t[2]},")
        print(f"  compute s per node {t[3] / NODES:.0f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("root", type=Path, help="the folder holding the run folders")
    ap.add_argument("base", help="the baseline run's name (its records: none-s0)")
    ap.add_argument("other", help="the run compared with it")
    args = ap.parse_args()
    compare(args.root, args.base, args.other)


if __name__ == "__main__":
    main()

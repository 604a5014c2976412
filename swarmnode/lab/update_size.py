"""Update size by configuration, from a sweep's committed raw metrics.

For each configuration under ``RAW`` (``<config>-s<seed>/n<k>.metrics.jsonl``, as
``sapo_experiment.py --export-raw`` writes them) and each third of the run: the
median pre-clip gradient norm of the rounds that trained (``grad_norm``), the share
of them above the clip (``train.max_grad_norm``, 1.0 in configs/specialties.yaml)
and the mean tokens trained. The loss is a token mean and there is one optimizer
step a round, so with one learning rate the step size is set by this gradient norm
(clipped), not by how many groups an update holds.

    .venv/bin/python scripts/update_size.py docs/experiments/2026-11-30-v2/raw
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path
from typing import Any

from swarmnode.learn.metrics import read_metrics


def rounds(path: Path) -> dict[int, dict[str, Any]]:
    """The last record of each round of one node's metrics (a torn line skipped)."""
    return {rec["round"]: rec for rec in read_metrics(path)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("raw", type=Path)
    ap.add_argument("--clip", type=float, default=1.0)
    args = ap.parse_args()
    configs = sorted({d.name.rsplit("-s", 1)[0] for d in args.raw.iterdir() if d.is_dir()})
    print("| config | runs | median grad norm, thirds | rounds clipped | tokens trained a round |")
    print("|---|---|---|---|---|")
    for cfg in configs:
        runs = sorted(args.raw.glob(f"{cfg}-s*"))
        norms: list[list[float]] = [[], [], []]
        tokens: list[list[int]] = [[], [], []]
        for run in runs:
            for f in run.glob("n*.metrics.jsonl"):
                recs = rounds(f)
                last = max(recs, default=0)
                for rd, r in recs.items():
                    if r.get("groups_trained"):
                        t = min(2, 3 * (rd - 1) // max(1, last))
                        norms[t].append(r["grad_norm"])
                        tokens[t].append(r["tokens_trained"])
        if not all(norms):
            continue
        med = " / ".join(f"{statistics.median(n):.2f}" for n in norms)
        clip = " / ".join(f"{100 * sum(x > args.clip for x in n) / len(n):.0f}%" for n in norms)
        tok = " / ".join(f"{statistics.mean(t):.0f}" for t in tokens)
        print(f"| {cfg} | {len(runs)} | {med} | {clip} | {tok} |")


if __name__ == "__main__":
    main()

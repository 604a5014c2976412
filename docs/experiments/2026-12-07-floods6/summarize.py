"""bench_flood's last line, recomputed from the phase lines of its raw output (also of
a run cut short: only the phases that printed count).

    .venv/bin/python docs/experiments/2026-12-07-floods6/summarize.py RAW.txt [--cycles N]
    .venv/bin/python docs/experiments/2026-12-07-floods6/summarize.py RAW1.txt RAW2.txt \\
        --phases calm,5sybil,5sybil_under

``--cycles N`` keeps each file's first N cycles (to compare with a shorter run's
figures). Several files are pooled as one run, their cycles numbered one after the
other: only for runs of the same node code (say so where it is reported);
``--phases`` keeps the phase kinds every file has."""

import argparse
import json
import re
import statistics

from swarmnode.lab.bench_flood import summary
from swarmnode.lab.victim import ratio_interval

p = argparse.ArgumentParser()
p.add_argument("raw", nargs="+")
p.add_argument("--cycles", type=int, default=None)
p.add_argument("--phases", help="comma-separated phase kinds to keep (default: all)")
a = p.parse_args()
keep = set(a.phases.split(",")) if a.phases else None
res = {}
offset = 0
for raw in a.raw:
    cycles = 0
    with open(raw) as f:
        for line in f:
            m = re.match(r"([a-z0-9_]+?)(\d+) (\{.*\})$", line.strip())
            if not m or (a.cycles is not None and int(m[2]) >= a.cycles):
                continue
            if keep is None or m[1] in keep:
                res[m[1] + str(offset + int(m[2]))] = json.loads(m[3])
                cycles = max(cycles, int(m[2]) + 1)
    offset += cycles
print(summary(res).replace("; ", "\n"))
kinds: dict[str, list[float]] = {}
for key, r in res.items():
    kinds.setdefault(key.rstrip("0123456789"), []).extend(r["durations"])
calm = kinds.pop("calm")
for name, d in kinds.items():  # the ratios to three places, as the READMEs give them
    lo, hi = ratio_interval(calm, d)
    print(f"{name}: {statistics.fmean(d) / statistics.fmean(calm):.3f} [{lo:.3f}, {hi:.3f}]")

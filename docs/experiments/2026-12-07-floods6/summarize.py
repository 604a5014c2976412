"""bench_flood's last line, recomputed from the phase lines of its raw output (also of
a run cut short: only the phases that printed count).

    .venv/bin/python docs/experiments/2026-12-07-floods6/summarize.py RAW.txt [--cycles N]

``--cycles N`` keeps the first N cycles (to compare with a shorter run's figures)."""

import argparse
import json
import re

from swarmnode.lab.bench_flood import summary

p = argparse.ArgumentParser()
p.add_argument("raw")
p.add_argument("--cycles", type=int, default=None)
a = p.parse_args()
res = {}
with open(a.raw) as f:
    for line in f:
        m = re.match(r"([a-z0-9_]+?)(\d+) (\{.*\})$", line.strip())
        if m and (a.cycles is None or int(m[2]) < a.cycles):
            res[m[1] + m[2]] = json.loads(m[3])
print(summary(res).replace("; ", "\n"))

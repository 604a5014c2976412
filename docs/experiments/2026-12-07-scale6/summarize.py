"""bench_scale's last line, recomputed from the phase lines of its raw output (also of
a run cut short: only the complete calm/scale pairs count).

    .venv/bin/python docs/experiments/2026-12-07-scale6/summarize.py RAW.txt [--cycles N]

The bench's other arguments are read from the raw file's command line (its second
line); ``--cycles N`` keeps the first N pairs."""

import argparse
import itertools
import json
import re
import shlex

from swarmnode.lab.bench_scale import summary

p = argparse.ArgumentParser()
p.add_argument("raw")
p.add_argument("--cycles", type=int, default=None)
a = p.parse_args()
res: dict[str, dict] = {}
with open(a.raw) as f:
    lines = f.read().splitlines()
for line in lines:
    m = re.match(r"(calm|scale)(\d+) (\{.*\})$", line.strip())
    if m:
        res[m[1] + m[2]] = json.loads(m[3])
pairs = 0
while f"calm{pairs}" in res and f"scale{pairs}" in res:
    pairs += 1
cycles = pairs if a.cycles is None else min(a.cycles, pairs)
res = {k: v for k, v in res.items() if int(re.sub(r"\D", "", k)) < cycles}
cmd = shlex.split(lines[1].lstrip("# "))
opt = {k.lstrip("-").replace("-", "_"): v for k, v in itertools.pairwise(cmd) if k.startswith("--")}
bench = argparse.Namespace(
    verify=opt.get("verify", "on_arrival"),
    peers=int(opt.get("peers", 200)),
    procs=int(opt.get("procs", 4)),
    period=float(opt.get("period", 10.0)),
    cycles=cycles,
    phase_s=float(opt.get("phase_s", 90.0)),
    target_msgs_per_s=float(opt["target_msgs_per_s"]) if "target_msgs_per_s" in opt else None,
)
print(summary(res, bench, {0} if "--pin" in cmd else set()).replace(" per_cycle", "\nper_cycle"))

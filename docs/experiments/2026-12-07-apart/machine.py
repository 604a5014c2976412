"""Per phase kind and cycle, from bench_flood's raw phase lines: the round time against
the cycle's calm, the trainer thread's CPU a round with the round's work (tokens
generated and trained), the victim's CPU outside training (a core's share) and the
attackers' process CPU a second while it floods (the load on the other core).

    .venv/bin/python docs/experiments/2026-12-07-apart/machine.py RAW.txt
"""

import json
import re
import statistics
import sys

phases: dict[str, dict[int, dict]] = {}
with open(sys.argv[1]) as raw:
    for line in raw:
        m = re.match(r"([a-z0-9_]+?)(\d+) (\{.*\})$", line.strip())
        if m:
            phases.setdefault(m[1], {})[int(m[2])] = json.loads(m[3])


def row(r: dict) -> list[float]:
    """trainer CPU s a round, tokens generated and trained a round, outside share."""
    gen = statistics.fmean(w[0] for w in r["work"])
    trained = statistics.fmean(w[1] for w in r["work"])
    return [sum(r["trainer_per_round"][:2]), gen, trained, r["outside_training_share"]]


calm = phases["calm"]
print("kind          cycle  ratio  trainer_cpu_s  gen_tok  trained_tok  outside  attackers")
for kind, by_cycle in phases.items():
    for c, r in sorted(by_cycle.items()):
        ratio = r["round_s"] / calm[c]["round_s"] if c in calm else float("nan")
        cpu = r.get("flood_cpu_s")  # the attackers' process while it floods
        load = f"{cpu / r['phase_s']:.3f}" if cpu else "-"
        cpu_s, gen, trained, outside = row(r)
        print(
            f"{kind:13s} {c:5d}  {ratio:5.2f}  {cpu_s:13.2f}  {gen:7.0f}  {trained:11.0f}"
            f"  {outside:7.4f}  {load:>9s}"
        )
    rows = [row(r) for r in by_cycle.values()]
    means = [statistics.fmean(col) for col in zip(*rows, strict=True)]
    print(
        f"{kind:13s}  mean         {means[0]:13.2f}  {means[1]:7.0f}  {means[2]:11.0f}"
        f"  {means[3]:7.4f}"
    )

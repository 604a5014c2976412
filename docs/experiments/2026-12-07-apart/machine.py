"""Per phase kind and cycle, from bench_flood's raw phase lines: the round time against
the cycle's calm, the trainer thread's CPU per generated token (what the trainer itself
pays for the same work), the victim's CPU outside training (a core's share) and the
attackers' process CPU a second (the load on the other core).

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


def per_token_ms(r: dict) -> float:
    user, system = r["trainer_per_round"][:2]
    generated = statistics.fmean(w[0] for w in r["work"])
    return 1000 * (user + system) / generated


calm = phases["calm"]
print("kind          cycle  ratio  trainer_ms/gen_token  outside_training  attackers_cpu/s")
for kind, by_cycle in phases.items():
    for c, r in sorted(by_cycle.items()):
        ratio = r["round_s"] / calm[c]["round_s"] if c in calm else float("nan")
        cpu = r.get("flood_cpu_s")  # the attackers' process while it floods
        load = f"{cpu / r['phase_s']:.3f}" if cpu else "-"
        print(
            f"{kind:13s} {c:5d}  {ratio:5.2f}  {per_token_ms(r):20.1f}"
            f"  {r['outside_training_share']:16.4f}  {load:>15s}"
        )
    rs = list(by_cycle.values())
    mean_tok = statistics.fmean(per_token_ms(r) for r in rs)
    print(f"{kind:13s}  mean         {mean_tok:20.1f}")

"""Pool bench_scale runs: every calm round against every scale round, as one run of
more cycles would (ratio of means, 95% bootstrap with rounds resampled per side), and
the node's CPU per message heard ((scale CPU per round - calm) / messages a round).

    .venv/bin/python docs/experiments/2026-12-05-scale/pool.py RUN.txt [RUN.txt ...]
"""

import json
import statistics
import sys

from swarmnode.lab.bench_flood import ratio_interval

phases: dict[str, list[dict]] = {"calm": [], "scale": []}
for path in sys.argv[1:]:
    for line in open(path):
        name, _, rest = line.partition(" ")
        if rest.startswith("{") and name.rstrip("0123456789") in phases:
            phases[name.rstrip("0123456789")].append(json.loads(rest))
calm = [d for r in phases["calm"] for d in r["durations"]]
scale = [d for r in phases["scale"] for d in r["durations"]]


def cpu(rs: list[dict]) -> float:
    return sum(r["cpu_s_per_round"] * r["rounds"] for r in rs) / sum(r["rounds"] for r in rs)


def total(rs: list[dict], key: str) -> int:
    return sum(r[key] for r in rs)


lo, hi = ratio_interval(calm, scale)
round_s = statistics.fmean(scale)
msgs = total(phases["scale"], "counted") / sum(r["seconds"] for r in phases["scale"])
ms_per_msg = 1000 * (cpu(phases["scale"]) - cpu(phases["calm"])) / (msgs * round_s)
print(
    f"runs {len(sys.argv) - 1} phases {len(phases['calm'])}+{len(phases['scale'])}"
    f" rounds calm {len(calm)} scale {len(scale)}"
    f" ratio {round_s / statistics.fmean(calm):.3f} [{lo:.3f}, {hi:.3f}]"
    f" median {statistics.median(scale) / statistics.median(calm):.3f}"
    f" cpu_per_round calm {cpu(phases['calm']):.3f} scale {cpu(phases['scale']):.3f}"
    f" msgs_per_s {msgs:.1f} cpu_ms_per_msg_heard {ms_per_msg:.1f}"
    f" trained calm {total(phases['calm'], 'groups_trained')}g/"
    f"{total(phases['calm'], 'tokens_trained')}t"
    f" scale {total(phases['scale'], 'groups_trained')}g/"
    f"{total(phases['scale'], 'tokens_trained')}t"
)

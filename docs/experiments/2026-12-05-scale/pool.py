"""Pool bench_scale runs: every calm round against every scale round, as one run of
more cycles would (``bench_scale.pooled``; ratio of means with ``ratio_interval``'s
95% bootstrap, rounds resampled per side), and the node's CPU per message heard
((scale CPU per round - calm) / messages a round).

    .venv/bin/python docs/experiments/2026-12-05-scale/pool.py RUN.txt [RUN.txt ...]
"""

import json
import statistics
import sys
from pathlib import Path

from swarmnode.lab.bench_scale import pooled
from swarmnode.lab.victim import ratio_interval

res = {}  # "calm0@1": run 1's phase calm0 (pooled() groups keys by their start)
for i, path in enumerate(sys.argv[1:]):
    for line in Path(path).read_text().splitlines():
        name, _, rest = line.partition(" ")
        if rest.startswith("{") and name.startswith(("calm", "scale")):
            res[f"{name}@{i}"] = json.loads(rest)
calm, scale = pooled(res, "calm"), pooled(res, "scale")
c, s = calm["durations"], scale["durations"]
lo, hi = ratio_interval(c, s)
msgs_per_round = scale["counted"] / scale["seconds"] * statistics.fmean(s)
ms_per_msg = 1000 * (scale["cpu_s_per_round"] - calm["cpu_s_per_round"]) / msgs_per_round
print(
    f"runs {len(sys.argv) - 1} phases {len(res) // 2}+{len(res) // 2}"
    f" rounds calm {len(c)} scale {len(s)}"
    f" ratio {statistics.fmean(s) / statistics.fmean(c):.3f} [{lo:.3f}, {hi:.3f}]"
    f" median {statistics.median(s) / statistics.median(c):.3f}"
    f" cpu_per_round calm {calm['cpu_s_per_round']:.3f} scale {scale['cpu_s_per_round']:.3f}"
    f" msgs_per_s {scale['counted'] / scale['seconds']:.1f} cpu_ms_per_msg_heard {ms_per_msg:.1f}"
    f" trained calm {calm['groups_trained']}g/{calm['tokens_trained']}t"
    f" scale {scale['groups_trained']}g/{scale['tokens_trained']}t"
)

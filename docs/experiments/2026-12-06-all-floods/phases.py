"""Where a flood phase's round time goes: generation, the update, the rest.

Reads bench_flood's output (its per-phase lines) and the victim's metrics.jsonl (copied
while the bench ran), finds each phase's rounds by their durations, and gives per kind
the mean seconds a round spent generating (gen_seconds), from publishing to the end of
the update (train_seconds: completing, composing, verifying drawn groups, the GRPO
step, freeing memory) and in the rest of the round, with seconds per 100 tokens
generated and trained, against calm.
usage: python phases.py BENCH_OUTPUT METRICS_JSONL[.gz]
"""

import gzip
import itertools
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

out, metrics = sys.argv[1], sys.argv[2]
with (gzip.open if metrics.endswith(".gz") else open)(metrics, "rt") as f:
    rows = [json.loads(ln) for ln in f if ln.strip()]
diffs = [round(b["time"] - a["time"], 3) for a, b in itertools.pairwise(rows)]
kinds: dict[str, list[dict]] = defaultdict(list)
for ln in Path(out).read_text().splitlines():
    name, _, rest = ln.partition(" ")
    if not rest.startswith("{"):
        continue
    d = json.loads(rest)["durations"]
    starts = [i for i in range(len(diffs) - len(d) + 1) if diffs[i : i + len(d)] == d]
    if len(starts) != 1:
        print(f"{name}: {len(starts)} matches", file=sys.stderr)
        continue
    phase = rows[starts[0] + 1 : starts[0] + 1 + len(d)]
    for r, dur in zip(phase, d, strict=True):
        r["dur"] = dur
    kinds[name.rstrip("0123456789")] += phase


def fig(rs: list[dict]) -> dict[str, float]:
    def m(k: str) -> float:
        return statistics.fmean(r[k] for r in rs)

    gen, train, dur = m("gen_seconds"), m("train_seconds"), m("dur")
    tg, tt = m("tokens_generated"), m("tokens_trained")
    return {
        "rounds": len(rs),
        "round": dur,
        "gen": gen,
        "train": train,
        "rest": dur - gen - train,
        "tok_gen": tg,
        "tok_train": tt,
        "gen_per_100t": 100 * gen / tg,
        "train_per_100t": 100 * train / tt,
    }


calm = fig(kinds["calm"])
for k, rs in kinds.items():
    f = fig(rs)
    vs = {n: "" if k == "calm" or n == "rounds" else f" ({v / calm[n]:.3f}x)" for n, v in f.items()}
    print(k, " ".join(f"{n} {v:.3f}{vs[n]}" for n, v in f.items()))

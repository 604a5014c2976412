"""Where a flood phase's round time goes: generation, the update, the rest.

Reads bench_flood's output (its per-phase lines) and the victim's metrics.jsonl (copied
while the bench ran), finds each phase's rounds by their durations, and gives per kind
the mean seconds a round spent generating (gen_seconds), composing and updating
(train_seconds) and in the rest of the round (publishing, completing, freeing memory,
waiting), with seconds per 100 tokens generated and trained, against calm.
usage: python phases.py BENCH_OUTPUT METRICS_JSONL[.gz]
"""

import gzip
import json
import statistics
import sys
from collections import defaultdict

out, metrics = sys.argv[1], sys.argv[2]
opener = gzip.open if metrics.endswith(".gz") else open
rows = [json.loads(ln) for ln in opener(metrics, "rt") if ln.strip()]
diffs = [round(b["time"] - a["time"], 3) for a, b in zip(rows, rows[1:])]
kinds: dict[str, list[dict]] = defaultdict(list)
for ln in open(out):
    name, _, rest = ln.partition(" ")
    if not rest.startswith("{"):
        continue
    d = json.loads(rest)["durations"]
    starts = [i for i in range(len(diffs) - len(d) + 1) if diffs[i : i + len(d)] == d]
    if len(starts) != 1:
        print(f"{name}: {len(starts)} matches", file=sys.stderr)
        continue
    kinds[name.rstrip("0123456789")] += rows[starts[0] + 1 : starts[0] + 1 + len(d)]
    for r, dur in zip(kinds[name.rstrip("0123456789")][-len(d) :], d):
        r["dur"] = dur


def fig(rs: list[dict]) -> dict[str, float]:
    m = statistics.fmean
    gen, train, dur = m(r["gen_seconds"] for r in rs), m(r["train_seconds"] for r in rs), m(r["dur"] for r in rs)
    tg, tt = m(r["tokens_generated"] for r in rs), m(r["tokens_trained"] for r in rs)
    return {"rounds": len(rs), "round": dur, "gen": gen, "train": train, "rest": dur - gen - train,
            "tok_gen": tg, "tok_train": tt, "gen_per_100t": 100 * gen / tg, "train_per_100t": 100 * train / tt}


calm = fig(kinds["calm"])
for k, rs in kinds.items():
    f = fig(rs)
    print(k, " ".join(f"{n} {v:.3f}" + ("" if k == "calm" or n in ("rounds",) else f" ({v / calm[n]:.3f}x)") for n, v in f.items()))

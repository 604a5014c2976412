"""The trainer's page faults against glibc's mmap threshold: the same rounds, on the
default CPU node's config, with the node's 4 MiB threshold and with larger ones.

Each arm runs in its own process (mallopt settings are per process), pinned to CPU 0
with one torch thread, as the benches run the node; arms alternate A B ... B A. Every
process draws the same questions and samples the same completions (same seed, one
thread), so rounds pair by index: a hash of the completions says they did.
Per round: wall seconds, the thread's user and system CPU and minor faults, RSS after
the round's malloc_trim and the peak inside it.

usage: python mmap_ab.py [--rounds 8] [--arms 4,64] [--repeat 2]   (MiB; 0 = glibc's defaults)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def child(mib: int, rounds: int) -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from swarmnode.learn import memory

    if mib:
        memory.MMAP_THRESHOLD = mib * 2**20
        memory.tune_allocator()
    import torch

    torch.set_num_threads(1)
    from swarmnode.config import load_config
    from swarmnode.lab.memory_profile import Table, build_trainer, reset_peak, status_mb

    cfg = load_config(REPO / "configs" / "node.yaml", {"model.threads": 1})
    _, trainer = build_trainer(cfg, Table())
    for r in range(rounds + 1):  # round 0: warm-up, not reported
        reset_peak()
        u0 = resource.getrusage(resource.RUSAGE_THREAD)
        t0 = time.perf_counter()
        groups, _ = trainer.rollout(r + 1)
        groups = [  # as memory_profile: every group trained
            g if g.has_signal else replace(g, rewards=[float(j % 2) for j in range(len(g.rewards))])
            for g in groups
        ]
        step = trainer.update(groups)
        memory.release_free_memory()
        t1 = time.perf_counter()
        u1 = resource.getrusage(resource.RUSAGE_THREAD)
        work = hashlib.sha256("\x00".join(c for g in groups for c in g.completions).encode())
        if r:
            print(
                "ROUND",
                json.dumps(
                    {
                        "mib": mib,
                        "round": r,
                        "s": round(t1 - t0, 3),
                        "user": round(u1.ru_utime - u0.ru_utime, 3),
                        "sys": round(u1.ru_stime - u0.ru_stime, 3),
                        "minflt": u1.ru_minflt - u0.ru_minflt,
                        "rss_mb": round(status_mb("VmRSS")),
                        "peak_mb": round(status_mb("VmHWM")),
                        "work": work.hexdigest()[:12],
                        "groups": step.groups_trained,
                        "tokens": step.tokens_trained,
                    }
                ),
                flush=True,
            )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--arms", default="4,64", help="mmap thresholds, MiB (0: glibc's defaults)")
    ap.add_argument("--repeat", type=int, default=2, help="processes per arm, order mirrored")
    ap.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child is not None:
        child(args.child, args.rounds)
        return
    arms = [int(a) for a in args.arms.split(",")]
    order = [a for k in range(args.repeat) for a in (arms if k % 2 == 0 else arms[::-1])]
    rows: dict[int, list[dict[str, float]]] = {a: [] for a in arms}
    for mib in order:
        out = subprocess.run(
            [sys.executable, __file__, "--child", str(mib), "--rounds", str(args.rounds)],
            capture_output=True,
            text=True,
            env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)},
            preexec_fn=lambda: os.sched_setaffinity(0, {0}),
            check=True,
        )
        for ln in out.stdout.splitlines():
            if ln.startswith("ROUND "):
                print(ln, flush=True)
                rows[mib].append(json.loads(ln[6:]))
    base = rows[arms[0]]
    for a in arms:
        rs = rows[a]
        same = sum(x["work"] == y["work"] for x, y in zip(base, rs, strict=False))
        print(
            f"mmap_threshold_mib {a} rounds {len(rs)} same_work_as_{arms[0]} {same}"
            f" round_s {statistics.fmean(r['s'] for r in rs):.3f}"
            f" paired_ratio {statistics.fmean(y['s'] / x['s'] for x, y in zip(base, rs, strict=False)):.3f}"
            f" user_s {statistics.fmean(r['user'] for r in rs):.3f}"
            f" sys_s {statistics.fmean(r['sys'] for r in rs):.3f}"
            f" minflt {statistics.fmean(r['minflt'] for r in rs):.0f}"
            f" rss_after_mb {max(r['rss_mb'] for r in rs)} peak_mb {max(r['peak_mb'] for r in rs)}"
            f" trained {sum(r.get('groups', 0) for r in rs)}g/{sum(r.get('tokens', 0) for r in rs)}t",
            flush=True,
        )


if __name__ == "__main__":
    main()

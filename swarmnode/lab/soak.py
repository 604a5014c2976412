"""Soak test: a real node process (or a small loopback swarm) for N rounds, memory per round.

Starts ``swarmnode start`` on ``--config`` (default configs/node.yaml) with
``node.max_rounds = --rounds`` and its data under ``--out``, waits for it to finish,
and reads its metrics.jsonl: per round the node's resident memory after the round
(``rss_mb``, measured by the node itself), the round's wall time (between the ends of
consecutive rounds) and compute time (generation + update), and the ingest queue
(zero for a node training alone). Its peak resident memory is the kernel's own
maximum (VmHWM while it runs, ru_maxrss from wait4 when it is reaped), so the peak
covers the last round too.

Writes to --out: soak.csv (one row per node and round), soak.png (RSS and round time
against the round), the node's config and log. The RSS trend is a least-squares
slope over the rounds from ``--warmup`` on (default 20: the allocator and caches
settle first), in MB per 100 rounds; the goal for the default CPU node is <= 1 with
<= 2 GB RSS (docs/memory.md). With ``--nodes K`` node 0 is the others' bootstrap
peer, every node writes its rows, and the summary is the worst node's.

The last line printed is ``rounds= rss_start_mb= rss_end_mb= rss_max_mb= peak_mb=
round_s= slope_mb_per_100_rounds=`` (start = RSS at the first round of the fit, max
= the highest per-round RSS, peak = the kernel's maximum RSS, round_s = median wall
seconds a round).
Exit 1 only when a node fails (its log's tail is printed); a timeout stops the
nodes and reports the rounds they finished.

    .venv/bin/python scripts/soak.py                          # node.yaml, 300 rounds
    .venv/bin/python scripts/soak.py --rounds 15 --out runs/soak-short
    .venv/bin/python scripts/soak.py --quick --model tests-tiny-model-dir
"""

from __future__ import annotations

import argparse
import csv
import os
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from swarmnode.lab import REPO
from swarmnode.lab.localswarm import (
    bootstrap_addr,
    free_port,
    node_base,
    start_node,
    swarm_section,
)
from swarmnode.lab.plotting import new_figure, save_figure
from swarmnode.learn.metrics import read_rounds

FIELDS = [
    "node",
    "round",
    "rss_mb",
    "round_s",
    "compute_s",
    "gen_s",
    "train_s",
    "queue_groups",
    "queue_bytes",
    "groups_trained",
    "tokens_generated",
]


@dataclass
class NodeRun:
    index: int
    data: Path
    log: Path
    proc: subprocess.Popen[str]
    peak_mb: float = 0.0  # VmHWM while it runs; its final ru_maxrss once reaped
    rows: list[dict[str, Any]] = field(default_factory=list)


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", type=Path, default=REPO / "configs" / "node.yaml")
    p.add_argument("--rounds", type=int, default=300, help="rounds per node (default 300)")
    p.add_argument("--nodes", type=int, default=1, help="nodes on loopback (default 1)")
    p.add_argument("--model", help="override model.name (e.g. a tiny model folder)")
    p.add_argument("--threads", type=int, default=1, help="torch threads per node (default 1)")
    p.add_argument(
        "--warmup", type=int, default=20, help="the slope is fitted from this round on (20)"
    )
    p.add_argument("--timeout", type=float, default=6 * 3600, help="seconds for the whole run")
    p.add_argument("--out", type=Path, default=REPO / "runs" / "soak")
    p.add_argument(
        "--quick",
        action="store_true",
        help="8 rounds of 2 x 4 completions of 8 tokens, slope from round 3 (for tests)",
    )
    args = p.parse_args()
    if args.quick:
        args.rounds, args.warmup = 8, 3
    if args.rounds < 2 or args.nodes < 1 or args.threads < 1 or args.warmup < 1:
        p.error("--rounds >= 2, --nodes, --threads and --warmup >= 1")
    return args


def node_config(
    base: dict[str, Any], args: argparse.Namespace, i: int, data: Path, boot: str | None
) -> tuple[dict[str, Any], str | None]:
    """Node i's config (and, for node 0 of a swarm, its bootstrap address for the rest)."""
    cfg = node_base(base, f"soak-{i}", data, args.rounds, args.threads, args.model)
    if args.quick:
        cfg["rollout"] = {
            **cfg.get("rollout", {}),
            "questions_per_round": 2,
            "completions_per_question": 4,
            "max_new_tokens": 8,
        }
    if args.nodes > 1:
        port = free_port()
        cfg["swarm"] = swarm_section(f"soak-{args.nodes}", port, boot)
        cfg["monitor"] = {"enabled": False}  # one fixed port cannot serve K nodes
        if i == 0:
            boot = bootstrap_addr(data, port)
    return cfg, boot


def vm_hwm_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def rounds_done(run: NodeRun) -> int:
    path = run.data / "metrics.jsonl"
    return len(path.read_text().splitlines()) if path.is_file() else 0


def reap(run: NodeRun, block: bool = False) -> bool:
    """True once the node has exited. Reaps it with wait4, so its exit code lands in
    ``proc.returncode`` and ``peak_mb`` takes the kernel's final maximum RSS (a VmHWM
    read every half second misses a rise in the last round)."""
    if run.proc.returncode is not None:
        return True
    pid, status, usage = os.wait4(run.proc.pid, 0 if block else os.WNOHANG)
    if pid == 0:
        if (hwm := vm_hwm_mb(run.proc.pid)) is not None:
            run.peak_mb = max(run.peak_mb, hwm)
        return False
    run.proc.returncode = os.waitstatus_to_exitcode(status)
    run.peak_mb = max(run.peak_mb, usage.ru_maxrss / 1024)  # KiB on Linux
    return True


def wait(runs: list[NodeRun], args: argparse.Namespace) -> list[str]:
    """Wait for every node to exit (or the timeout); note peaks; report progress.
    Returns the failures."""
    deadline = time.monotonic() + args.timeout
    every = max(1, args.rounds // 20)
    shown = 0
    while not all([reap(r) for r in runs]):
        done = min(rounds_done(r) for r in runs)
        if done >= shown + every:
            shown = done
            rss = [rec.rss_mb for r in runs for rec in read_rounds(r.data / "metrics.jsonl")[-1:]]
            print(f"round {done}/{args.rounds}  rss {max(rss, default=0):.0f} MiB", flush=True)
        if time.monotonic() > deadline:
            print(f"timeout after {args.timeout:.0f}s: stopping the nodes", flush=True)
            for r in runs:
                if not reap(r):
                    r.proc.terminate()  # SIGTERM: the node checkpoints and exits
            grace = time.monotonic() + 120
            while not all([reap(r) for r in runs]) and time.monotonic() < grace:
                time.sleep(0.5)
            for r in runs:
                if not reap(r):
                    r.proc.kill()
                    reap(r, block=True)
            return []
        time.sleep(0.5)
    return [f"node {r.index} exited {r.proc.returncode}" for r in runs if r.proc.returncode != 0]


def rows_of(run: NodeRun) -> list[dict[str, Any]]:
    rows, prev = [], None
    for rec in read_rounds(run.data / "metrics.jsonl"):
        compute = rec.gen_seconds + rec.train_seconds
        rows.append(
            {
                "node": run.index,
                "round": rec.round,
                "rss_mb": rec.rss_mb,
                "round_s": round(rec.time - prev, 3) if prev is not None else round(compute, 3),
                "compute_s": round(compute, 3),
                "gen_s": rec.gen_seconds,
                "train_s": rec.train_seconds,
                "queue_groups": rec.queue_groups,
                "queue_bytes": rec.queue_bytes,
                "groups_trained": rec.groups_trained,
                "tokens_generated": rec.tokens_generated,
            }
        )
        prev = rec.time
    return rows


def slope_per_100(xs: list[float], ys: list[float]) -> float:
    """Least-squares slope of ys against xs, times 100 (0 for fewer than 2 points).

    >>> slope_per_100([1, 2, 3], [10.0, 10.5, 11.0])
    50.0
    """
    if len(xs) < 2:
        return 0.0
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    var = sum((x - mx) ** 2 for x in xs)
    if var == 0:
        return 0.0
    return 100 * sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / var


def summary(run: NodeRun, warmup: int) -> dict[str, float]:
    rows = run.rows
    fit = [r for r in rows if r["round"] >= warmup] or rows[-1:]
    return {
        "rounds": len(rows),
        "rss_start_mb": fit[0]["rss_mb"] if fit else 0.0,
        "rss_end_mb": rows[-1]["rss_mb"] if rows else 0.0,
        "rss_max_mb": max((r["rss_mb"] for r in rows), default=0.0),
        "peak_mb": run.peak_mb,
        "round_s": statistics.median(r["round_s"] for r in rows) if rows else 0.0,
        "slope_mb_per_100_rounds": slope_per_100(
            [r["round"] for r in fit], [r["rss_mb"] for r in fit]
        ),
    }


def plot(runs: list[NodeRun], path: Path, warmup: int) -> None:
    fig, (mem, secs) = new_figure(ncols=2, size=(12.0, 4.5))
    for run in runs:
        xs = [r["round"] for r in run.rows]
        s = summary(run, warmup)
        label = f"node {run.index}: {s['slope_mb_per_100_rounds']:+.1f} MB/100 rounds"
        mem.plot(xs, [r["rss_mb"] for r in run.rows], label=label)
        secs.plot(xs, [r["round_s"] for r in run.rows], label=f"node {run.index} wall")
        secs.plot(xs, [r["compute_s"] for r in run.rows], ":", label=f"node {run.index} compute")
        if run.peak_mb:
            mem.axhline(run.peak_mb, ls="--", lw=0.8, color="grey", label="peak (VmHWM)")
    mem.axvline(warmup, ls=":", color="grey")
    mem.set(xlabel="round", ylabel="RSS after the round (MiB)")
    secs.set(xlabel="round", ylabel="seconds")
    save_figure(fig, path, title="soak: memory and round time")


def main() -> int:
    args = parse_args()
    base = yaml.safe_load(args.config.read_text()) or {}
    args.out.mkdir(parents=True, exist_ok=True)
    runs: list[NodeRun] = []
    boot = None
    for i in range(args.nodes):
        data = args.out / f"n{i}"
        shutil.rmtree(data, ignore_errors=True)  # a fresh node: no checkpoint to resume
        cfg, boot = node_config(base, args, i, data, boot)
        log = args.out / f"n{i}.log"
        with log.open("w") as f:
            proc = start_node(cfg, args.out / f"n{i}.yaml", args.threads, f)
        runs.append(NodeRun(i, data, log, proc))
    started = time.monotonic()
    failures = wait(runs, args)
    for run in runs:
        run.rows = rows_of(run)
    with (args.out / "soak.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=FIELDS)
        writer.writeheader()
        for run in runs:
            writer.writerows(run.rows)
    if any(run.rows for run in runs):
        plot(runs, args.out / "soak.png", args.warmup)
    for f in failures:
        run = runs[int(f.split()[1])]
        print(f"{f}; the tail of {run.log}:\n{run.log.read_text()[-3000:]}", file=sys.stderr)
    stats = [summary(run, args.warmup) for run in runs]
    for run, s in zip(runs, stats, strict=True):
        print(
            f"node {run.index}: {s['rounds']} rounds, rss {s['rss_start_mb']:.0f} -> "
            f"{s['rss_end_mb']:.0f} MiB (max {s['rss_max_mb']:.0f}, peak {s['peak_mb']:.0f}), "
            f"{s['slope_mb_per_100_rounds']:+.2f} MB/100 rounds from round {args.warmup}, "
            f"{s['round_s']:.1f} s a round"
        )
    worst = max(stats, key=lambda s: s["slope_mb_per_100_rounds"])
    print(f"wrote {args.out / 'soak.csv'} and soak.png in {time.monotonic() - started:.0f}s")
    print(
        f"rounds={min(s['rounds'] for s in stats):.0f} "
        f"rss_start_mb={worst['rss_start_mb']:.1f} "
        f"rss_end_mb={max(s['rss_end_mb'] for s in stats):.1f} "
        f"rss_max_mb={max(s['rss_max_mb'] for s in stats):.1f} "
        f"peak_mb={max(s['peak_mb'] for s in stats):.1f} "
        f"round_s={max(s['round_s'] for s in stats):.2f} "
        f"slope_mb_per_100_rounds={worst['slope_mb_per_100_rounds']:.2f}",
        flush=True,
    )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

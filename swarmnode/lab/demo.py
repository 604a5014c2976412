"""A local demo swarm: N real `swarmnode start` processes on loopback, one machine.

Each node is `configs/node.yaml` (the embedded SmolLM2-135M-Instruct on CPU) with its
own data directory and task seed, gossiping on a private loopback swarm; node 0 is
the others' bootstrap peer. Every node trains on I local + J external groups
(balanced sharing). The script prints the nodes' progress lines as they come, then
a summary: reward at the start and the end, and what each node took from its peers.

    python scripts/demo.py                      # 3 nodes, 20 rounds
    python scripts/demo.py --nodes 2 --rounds 5 --out runs/demo

The nodes stop by themselves after --rounds; Ctrl-C stops them all cleanly. Each
node's log (warnings, errors) goes to <out>/node-<i>.log.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import yaml

from swarmnode.lab import REPO
from swarmnode.lab.localswarm import bootstrap_addr, free_port, start_node, swarm_section


def node_config(
    base: dict[str, Any], i: int, out: Path, port: int, boot: str | None, rounds: int, threads: int
) -> dict[str, Any]:
    cfg = yaml.safe_load(yaml.safe_dump(base))
    cfg.setdefault("node", {}).update(
        {"name": f"node-{i}", "data_dir": str(out / f"node-{i}"), "max_rounds": rounds}
    )
    cfg.setdefault("model", {})["threads"] = threads
    cfg.setdefault("tasks", {})["seed"] = 1000 + i
    cfg.setdefault("train", {})["seed"] = i
    q = cfg.setdefault("rollout", {}).get("questions_per_round", 2)
    cfg["sapo"] = {
        **cfg.get("sapo", {}),
        "local_groups": max(1, q // 2),
        "external_groups": max(1, q // 2),
    }
    cfg["swarm"] = {**cfg.get("swarm", {}), **swarm_section("demo", port, boot)}
    return cfg


def pump(name: str, stream: Any) -> None:
    for line in iter(stream.readline, ""):
        if line.startswith("round"):
            print(f"[{name}] {line.rstrip()}", flush=True)


def summary(out: Path, n: int) -> None:
    from swarmnode.learn.metrics import read_rounds

    print("\nnode    rounds  reward first5  reward last5  external groups trained  peers")
    for i in range(n):
        recs = read_rounds(out / f"node-{i}" / "metrics.jsonl")
        if not recs:
            print(f"node-{i}  no rounds")
            continue
        first = sum(r.reward_mean for r in recs[:5]) / len(recs[:5])
        last = sum(r.reward_mean for r in recs[-5:]) / len(recs[-5:])
        ext = sum(r.external_groups for r in recs)
        peers = max((r.external_peers for r in recs), default=0)
        print(f"node-{i}  {len(recs):>6}  {first:>13.3f}  {last:>12.3f}  {ext:>23}  {peers:>5}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--config", type=Path, default=REPO / "configs" / "node.yaml")
    ap.add_argument("--out", type=Path, default=REPO / "runs" / "demo")
    args = ap.parse_args()

    base = yaml.safe_load(args.config.read_text())
    args.out.mkdir(parents=True, exist_ok=True)
    threads = max(1, (os.cpu_count() or 1) // args.nodes)
    procs: list[subprocess.Popen[str]] = []
    boot = None
    try:
        for i in range(args.nodes):
            port = free_port()
            cfg = node_config(base, i, args.out, port, boot, args.rounds, threads)
            if i == 0:  # the others dial node 0: its identity must exist before it starts
                boot = bootstrap_addr(Path(cfg["node"]["data_dir"]), port)
            log = (args.out / f"node-{i}.log").open("w")  # warnings and errors
            proc = start_node(cfg, args.out / f"node-{i}.yaml", threads, subprocess.PIPE, log)
            procs.append(proc)
            threading.Thread(target=pump, args=(f"node-{i}", proc.stdout), daemon=True).start()
        print(f"{args.nodes} nodes started; data under {args.out}", flush=True)
        for proc in procs:
            proc.wait()
    except KeyboardInterrupt:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            proc.wait(timeout=120)
    summary(args.out, args.nodes)
    failed = [i for i, p in enumerate(procs) if p.returncode not in (0, None)]
    if failed:
        sys.exit(f"nodes {failed} exited with an error (see their output above)")


if __name__ == "__main__":
    main()

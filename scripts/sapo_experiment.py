"""The SAPO experiment: does sharing rollouts help, on this machine, with real nodes?

For each configuration, N real `swarmnode start` processes run R rounds on loopback
(node 0 is the others' bootstrap peer), then each node's policy is scored on held-out
items. Every configuration gives each node the same task seed, the same generation
work (Q questions x G completions a round) and the same update size (B = I + J
groups), so only the source of the trained-on groups differs:

    none       I = B, J = 0       no sharing (nodes do not even connect)
    balanced   I = B/2, J = B/2   the paper's best (4/4 of 8)
    heavy      I = B/4, J = 3B/4  the paper's 2/6, which oscillated
    adaptive   budget B, mode adaptive (see swarmnode/sampler.py)

Writes to --out: rewards.csv (config, node, round, reward, accuracy, external groups,
peers), curves.png (moving average reward per configuration, mean over nodes),
heldout.csv, and results.md (cumulative reward per configuration and its change vs
no sharing, held-out accuracy). The last line printed is `name=value` figures.

    python scripts/sapo_experiment.py --nodes 4 --rounds 30
    python scripts/sapo_experiment.py --quick --model tests-tiny-model-dir
    python scripts/sapo_experiment.py --resume   # skip configurations already complete
"""

from __future__ import annotations

import argparse
import csv
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml
from localswarm import REPO, bootstrap_addr, free_port, start_node, swarm_section

sys.path.insert(0, str(REPO))

from swarmnode.metrics import moving_average, read_metrics

CONFIGS = ("none", "balanced", "heavy", "adaptive")


def sharing(name: str, budget: int) -> dict[str, Any]:
    if name == "none":
        return {"local_groups": budget, "external_groups": 0}
    if name == "balanced":
        return {"local_groups": budget - budget // 2, "external_groups": budget // 2}
    if name == "heavy":
        local = max(1, budget // 4)
        return {"local_groups": local, "external_groups": budget - local}
    if name == "adaptive":
        half = budget // 2
        return {"local_groups": budget - half, "external_groups": half, "mode": "adaptive"}
    raise SystemExit(f"unknown configuration {name!r}; known: {', '.join(CONFIGS)}")


def node_config(
    base: dict[str, Any],
    args: argparse.Namespace,
    name: str,
    i: int,
    data: Path,
    port: int,
    boot: str | None,
) -> dict[str, Any]:
    cfg = yaml.safe_load(yaml.safe_dump(base))
    cfg["node"] = {
        **cfg.get("node", {}),
        "name": f"{name}-{i}",
        "data_dir": str(data),
        "max_rounds": args.rounds,
    }
    model = cfg.setdefault("model", {})
    model["threads"] = args.threads
    if args.model:
        model["name"] = args.model
    cfg.setdefault("tasks", {})["seed"] = 100 + i  # paired across configurations
    cfg.setdefault("train", {})["seed"] = i
    rollout = cfg.setdefault("rollout", {})
    rollout["questions_per_round"] = args.questions
    rollout["completions_per_question"] = args.completions
    rollout["max_new_tokens"] = args.max_new_tokens
    cfg["checkpoint"] = {"every_rounds": max(1, args.rounds), "keep": 1}
    cfg["sapo"] = {**cfg.get("sapo", {}), **sharing(name, args.questions)}
    cfg["swarm"] = swarm_section(f"exp-{name}", port, boot, enabled=name != "none")
    return cfg


def run_configuration(name: str, args: argparse.Namespace, base: dict[str, Any]) -> list[Path]:
    root = args.out / name
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    procs, dirs, boot = [], [], None
    for i in range(args.nodes):
        data = root / f"node-{i}"
        port = free_port()
        cfg = node_config(base, args, name, i, data, port, boot)
        if i == 0 and name != "none":
            boot = bootstrap_addr(data, port)
        log = (root / f"node-{i}.log").open("w")
        procs.append(start_node(cfg, root / f"node-{i}.yaml", args.threads, log))
        dirs.append(data)
    deadline = time.monotonic() + args.timeout
    for i, proc in enumerate(procs):
        try:
            proc.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.terminate()
            proc.wait(timeout=120)
        if proc.returncode != 0:
            print(f"warning: {name} node-{i} exited {proc.returncode}; see {root}/node-{i}.log")
    return dirs


def heldout(dirs: list[Path], n: int) -> list[float]:
    """Held-out accuracy per node (cached in the node's folder as heldout.json)."""
    from swarmnode.config import load_config
    from swarmnode.evaluate import evaluate

    out = []
    for d in dirs:
        cache = d / "heldout.json"
        if not cache.is_file():
            cfg = load_config(d / "config.resolved.yaml")
            cache.write_text(json.dumps(evaluate(cfg, n=n)))
        out.append(float(json.loads(cache.read_text())["accuracy"]))
    return out


def finished(name: str, args: argparse.Namespace) -> list[Path] | None:
    """The node folders of a configuration that already ran all its rounds, else None."""
    dirs = [args.out / name / f"node-{i}" for i in range(args.nodes)]
    done = all(len(read_metrics(d / "metrics.jsonl")) >= args.rounds for d in dirs)
    return dirs if done else None


def plot(curves: dict[str, list[float]], path: Path, window: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    for name, ys in curves.items():
        ax.plot(range(1, len(ys) + 1), moving_average(ys, window), label=name, linewidth=2)
    ax.set_xlabel("round")
    ax.set_ylabel(f"reward, mean over nodes ({window}-round moving average)")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--configs", default=",".join(CONFIGS))
    ap.add_argument("--base", type=Path, default=REPO / "configs" / "node.yaml")
    ap.add_argument("--model", help="override model.name (e.g. a tiny model folder)")
    ap.add_argument("--questions", type=int, default=4, help="Q = B, groups made and trained")
    ap.add_argument("--completions", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--threads", type=int, default=1, help="torch threads per node")
    ap.add_argument("--heldout", type=int, default=20, help="held-out items per dataset")
    ap.add_argument("--window", type=int, default=5)
    ap.add_argument("--timeout", type=float, default=3600, help="per configuration, seconds")
    ap.add_argument("--out", type=Path, default=REPO / "runs" / "sapo")
    ap.add_argument("--quick", action="store_true", help="2 nodes, 3 rounds, small batches")
    ap.add_argument(
        "--resume",
        action="store_true",
        help="reuse configurations that already ran all their rounds in --out",
    )
    args = ap.parse_args()
    if args.quick:
        args.nodes, args.rounds, args.questions, args.completions = 2, 3, 2, 4
        args.max_new_tokens, args.heldout, args.window = 8, 2, 2
    names = [c.strip() for c in args.configs.split(",") if c.strip()]
    base = yaml.safe_load(args.base.read_text())
    args.out.mkdir(parents=True, exist_ok=True)

    rows: list[dict[str, Any]] = []
    held: dict[str, list[float]] = {}
    for name in names:
        t0 = time.monotonic()
        dirs = (args.resume and finished(name, args)) or run_configuration(name, args, base)
        for i, d in enumerate(dirs):
            for r in read_metrics(d / "metrics.jsonl"):
                rows.append(
                    {
                        "config": name,
                        "node": i,
                        "round": r["round"],
                        "reward": r["reward_mean"],
                        "accuracy": r["accuracy"],
                        "external_groups": r.get("external_groups", 0),
                        "external_peers": r.get("external_peers", 0),
                        "groups_trained": r["groups_trained"],
                    }
                )
        held[name] = heldout(dirs, args.heldout)
        print(
            f"{name}: {time.monotonic() - t0:.0f}s, held-out accuracy "
            f"{sum(held[name]) / len(held[name]):.3f}",
            flush=True,
        )

    with (args.out / "rewards.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else ["config"])
        writer.writeheader()
        writer.writerows(rows)
    with (args.out / "heldout.csv").open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["config", "node", "heldout_accuracy"])
        for name, accs in held.items():
            w.writerows([name, i, a] for i, a in enumerate(accs))

    curves: dict[str, list[float]] = {}
    table = [
        "| configuration | I / J | cumulative reward | vs none | cumulative accuracy "
        "| external groups trained | held-out accuracy |",
        "|---|---|---|---|---|---|---|",
    ]
    cumulative = {n: sum(r["reward"] for r in rows if r["config"] == n) for n in names}
    for name in names:
        mine = [r for r in rows if r["config"] == name]
        per_round: dict[int, list[float]] = {}
        for r in mine:
            per_round.setdefault(r["round"], []).append(r["reward"])
        curves[name] = [sum(v) / len(v) for _, v in sorted(per_round.items())]
        s = sharing(name, args.questions)
        none = cumulative.get("none")
        change = f"{(cumulative[name] / none - 1) * 100:+.1f}%" if none else "n/a"
        acc = sum(r["accuracy"] for r in mine)
        ext = sum(r["external_groups"] for r in mine)
        h = held[name]
        table.append(
            f"| {name} | {s['local_groups']} / {s['external_groups']} | "
            f"{cumulative[name]:.2f} | {change} | {acc:.2f} | {ext} | "
            f"{sum(h) / len(h):.3f} |"
        )
    plot(curves, args.out / "curves.png", args.window)
    header = (
        f"{args.nodes} nodes, {args.rounds} rounds, Q = B = {args.questions} groups of "
        f"{args.completions} completions, <= {args.max_new_tokens} new tokens, "
        f"{args.heldout} held-out items per dataset.\n\n"
    )
    (args.out / "results.md").write_text(header + "\n".join(table) + "\n")
    print(header + "\n".join(table))
    print(
        " ".join(f"{n}_cumulative={cumulative[n]:.3f}" for n in names)
        + " "
        + " ".join(f"{n}_heldout={sum(held[n]) / len(held[n]):.3f}" for n in names)
    )


if __name__ == "__main__":
    main()

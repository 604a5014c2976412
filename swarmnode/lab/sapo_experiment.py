"""The SAPO experiment: does sharing rollouts help, on this machine, with real nodes?

A *run* is one (configuration, seed): N real `swarmnode start` processes for R rounds
on loopback (node 0 is the others' bootstrap peer), then each node's newest
checkpoint is scored greedily on held-out items (strict accuracy). Node i of seed s
gets the same task seed and LoRA initialisation in every configuration, and every
configuration generates the same Q groups a round and trains at most B = Q groups,
so only the source of the trained-on groups differs:

    none       I = B, J = 0       no sharing (nodes do not even connect)
    balanced   I = B/2, J = B/2   the paper's best (4/4 of 8), uniform sampler
    heavy      I = B/4, J = 3B/4  the paper's 2/6, which oscillated
    adaptive   budget B, adaptive sampler (swarmnode/share/sampler.py)
    complete   adaptive + same-question group completion (sapo.shared_items,
               sapo.complete_groups: peers' verified answers to the swarm's
               scheduled items join this node's no-signal groups)
    complete-only   I = B, J = 0 + group completion (ablation: completion alone)
    shared-only     I = B, J = 0 + the shared items, no completion (ablates completion)
    complete-is     complete + importance weights from the senders' log-probs
    complete-nomask complete without the mask of peers' unlikely negative tokens
    balanced-pos    balanced, peers' wrong completions not trained (train.external_negatives)
    heavy-pos       heavy, the same
    complete-pos    balanced-pos + the shared items and group completion
    balanced-pos-is balanced-pos + importance weights from the senders' log-probs

Runs are independent and resumable: ``--resume`` skips every (configuration, seed)
whose nodes all finished their rounds and held-out scoring, and continues an
interrupted one from its nodes' newest checkpoints (every 10 rounds). The same
continues a finished run to a larger ``--rounds`` (its nodes go on from their last
checkpoint, and held-out is scored again at the end); to keep the shorter run, copy
its folder to another --out first. Aggregation
reads whatever runs exist (``--aggregate`` does only that) and writes to --out:

- rewards.csv: config, seed, node, round, wall and compute seconds (generation +
  update, waits excluded), reward, accuracy, groups and tokens; heldout.csv: strict
  held-out accuracy per node (and the base model's);
- results.md: per configuration the mean cumulative reward per node and held-out
  accuracy, each with the paired difference to ``none`` (by seed and node) and its
  95% bootstrap interval, compute seconds and tokens generated / trained per node;
  then (swarmnode/lab/sapo_tables.py) the same against ``none`` and against the
  better of ``none`` and ``self-replay`` with swarms as the unit (cluster bootstrap,
  permutation p, an item-level bootstrap for held-out), per dataset too; the
  equal-effort view (optimizer steps, groups and unmasked tokens trained, compute
  seconds, reward at equal compute); and the commit(s) each configuration ran on;
- curves.png: reward per round (moving average, mean over nodes and seeds, 95%
  band), and the same against compute seconds (time to accuracy).

``--export-raw DIR`` copies the small files of every finished run (configs, metrics,
held-out results) to DIR, the form committed under docs/experiments/; ``--import-raw
DIR`` lays such a folder out under --out again, so the committed tables can be
recomputed from the committed data (swarmnode/lab/sapo_raw.py).

The last line printed carries, per configuration, runs, groups and tokens trained,
cumulative reward and held-out accuracy, then optimizer steps and tokens trained less
those masked out of the loss (totals over nodes).

    python scripts/sapo_experiment.py --base configs/specialties.yaml --rounds 60 \\
        --seeds 3 --configs none,complete --resume --out runs/sapo
    python scripts/sapo_experiment.py --aggregate --out runs/sapo
    python scripts/sapo_experiment.py --aggregate --out /tmp/v2 \\
        --import-raw docs/experiments/2026-11-30-v2/raw
    python scripts/sapo_experiment.py --quick --model tests-tiny-model-dir
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import shutil
import subprocess
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import yaml

from swarmnode.config import TrainConfig
from swarmnode.lab import REPO
from swarmnode.lab.localswarm import (
    bootstrap_addr,
    free_port,
    node_base,
    start_node,
    swarm_section,
)
from swarmnode.lab.plotting import new_figure, save_figure
from swarmnode.lab.sapo_raw import export_raw, import_raw
from swarmnode.lab.sapo_stats import mean_band, paired_diff
from swarmnode.lab.sapo_tables import own_datasets, read_extras, unit_sections
from swarmnode.lab.sapo_tables import specialty_accuracy as split_accuracy
from swarmnode.learn.metrics import read_metrics

CONFIGS = (
    "none",
    "self-replay",
    "balanced",
    "heavy",
    "adaptive",
    "complete",
    "complete-only",
    "shared-only",
    "complete-is",
    "complete-nomask",
    "balanced-pos",
    "heavy-pos",
    "complete-pos",
    "balanced-pos-is",
)
# Ablations of the off-policy care, on top of ``complete``: importance weights from
# the senders' log-probs; no mask of peers' unlikely negative tokens. Every
# configuration trains on peers' wrong completions too (as the paper does, and as
# every run before train.external_negatives was measured) except the "-pos" ones:
# peers only raise what they got right (now the node's default).
TRAIN_OVERRIDES: dict[str, dict[str, Any]] = {
    "complete-is": {"importance_weights": "sequence"},
    "balanced-pos-is": {"importance_weights": "sequence"},
    "complete-nomask": {"external_min_prob": 0.0},
}
POSITIVE_ONLY = ("balanced-pos", "heavy-pos", "complete-pos", "balanced-pos-is", "self-replay")
LONE = ("none", "self-replay")  # configurations whose nodes train alone (no swarm)


def train_overrides(name: str) -> dict[str, Any]:
    return {"external_negatives": name not in POSITIVE_ONLY, **TRAIN_OVERRIDES.get(name, {})}


def sharing(name: str, budget: int) -> dict[str, Any]:
    """The ``sapo`` section of a configuration, for a budget of B groups a round."""
    half = budget // 2
    quarter = max(1, budget // 4)
    table: dict[str, dict[str, Any]] = {
        "none": {"local_groups": budget, "external_groups": 0},
        # the strongest lone node: its own past groups with signal fill the slots its
        # current groups leave empty, trained as heavy-pos trains peers' (positives)
        "self-replay": {"local_groups": budget, "external_groups": 0, "self_replay": True},
        "balanced": {"local_groups": budget - half, "external_groups": half},
        "heavy": {"local_groups": quarter, "external_groups": budget - quarter},
        "adaptive": {"local_groups": budget - half, "external_groups": half, "mode": "adaptive"},
        "complete": {
            "local_groups": budget - half,
            "external_groups": half,
            "mode": "adaptive",
            "shared_items": half,
            "complete_groups": True,
        },
        "complete-only": {
            "local_groups": budget,
            "external_groups": 0,
            "shared_items": half,
            "complete_groups": True,
        },
        "shared-only": {  # ablation of complete-only: the shared items, no completion
            "local_groups": budget,
            "external_groups": 0,
            "shared_items": half,
        },
    }
    table["complete-is"] = table["complete-nomask"] = table["complete"]
    table["balanced-pos"], table["heavy-pos"] = table["balanced"], table["heavy"]
    table["balanced-pos-is"] = table["balanced"]
    # balanced-pos and complete-only together
    table["complete-pos"] = {**table["balanced"], "shared_items": half, "complete_groups": True}
    if name not in table:
        raise SystemExit(f"unknown configuration {name!r}; known: {', '.join(CONFIGS)}")
    return table[name]


def node_config(
    base: dict[str, Any],
    args: argparse.Namespace,
    name: str,
    seed: int,
    i: int,
    data: Path,
    port: int,
    boot: str | None,
) -> dict[str, Any]:
    cfg = node_base(base, f"{name}-s{seed}-{i}", data, args.rounds, args.threads, args.model)
    tasks = cfg.setdefault("tasks", {})
    tasks["seed"] = 1000 * seed + 100 + i  # paired across configurations
    if args.hetero:  # each node mostly its own dataset, as in a swarm of different users
        own = i % len(tasks["datasets"])
        for k, spec in enumerate(tasks["datasets"]):
            spec["weight"] = args.hetero if k == own else 1.0
    cfg["train"] = {
        **cfg.get("train", {}),
        **train_overrides(name),
        "seed": 1000 * seed + i,
    }
    if args.lr_scale != 1.0:  # the learning-rate check: each arm at its own best step
        lr = cfg["train"].get("learning_rate", TrainConfig().learning_rate)
        cfg["train"]["learning_rate"] = lr * args.lr_scale
    rollout = cfg.setdefault("rollout", {})
    rollout["questions_per_round"] = args.questions
    rollout["completions_per_question"] = args.completions
    rollout["max_new_tokens"] = args.max_new_tokens
    # Every 10 rounds: an interrupted run continues from there (see run_once).
    cfg["checkpoint"] = {"every_rounds": min(10, max(1, args.rounds)), "keep": 1}
    cfg["sapo"] = {**cfg.get("sapo", {}), **sharing(name, args.questions)}
    cfg["swarm"] = swarm_section(f"exp-{name}-s{seed}", port, boot, enabled=name not in LONE)
    return cfg


def run_dir(args: argparse.Namespace, name: str, seed: int) -> Path:
    return args.out / f"{name}-s{seed}"  # short: a Unix socket path lives below it


def rounds_done(d: Path) -> int:
    """Distinct rounds in a node's metrics (a continued run redoes a few rounds)."""
    path = d / "metrics.jsonl"
    return len({r["round"] for r in read_metrics(path)}) if path.is_file() else 0


def run_once(name: str, seed: int, args: argparse.Namespace, base: dict[str, Any]) -> None:
    """Run one (configuration, seed); its nodes' folders hold the results.

    A run that was interrupted (its folder has the node configs but no run.json)
    continues: the same nodes restart on their data directories and resume from their
    newest checkpoint (every 10 rounds), losing at most the rounds since then."""
    root = run_dir(args, name, seed)
    configs = [root / f"n{i}.yaml" for i in range(args.nodes)]
    resume = args.resume and all(c.is_file() for c in configs)
    if not resume:
        shutil.rmtree(root, ignore_errors=True)
        root.mkdir(parents=True)
    procs, boot = [], None
    started = time.time()
    if not (root / "started.json").is_file():
        (root / "started.json").write_text(json.dumps({"started": started}))
    for i in range(args.nodes):
        data = root / f"n{i}"
        log = (root / f"n{i}.log").open("a")
        if resume:  # the run may be extended (--rounds above its first) or moved
            cfg = yaml.safe_load(configs[i].read_text())
            cfg["node"].update(max_rounds=args.rounds, data_dir=str(data))
        else:
            port = free_port()
            cfg = node_config(base, args, name, seed, i, data, port, boot)
            if i == 0 and name not in LONE:
                boot = bootstrap_addr(data, port)
        procs.append(start_node(cfg, configs[i], args.threads, log))
    deadline = time.monotonic() + args.timeout
    failed = []
    for i, proc in enumerate(procs):
        try:
            proc.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.terminate()
            proc.wait(timeout=120)
        if proc.returncode != 0:
            failed.append(f"node {i} exited {proc.returncode}")
    if failed:
        raise SystemExit(f"{name} seed {seed}: {', '.join(failed)}; see the logs in {root}")
    first = root / "started.json"  # the first launch, kept across continuations
    if not first.is_file():
        first.write_text(json.dumps({"started": started}))
    info = {
        "started": json.loads(first.read_text())["started"],
        "wall_s": round(time.time() - started, 1),  # of the last segment
        "continued": resume,
        "nodes": args.nodes,
        "commit": code_version(),  # every arm of one comparison runs on one commit
        "lr_scale": args.lr_scale,
    }
    (root / "run.json").write_text(json.dumps(info))


def code_version() -> str:
    """The commit the nodes ran (``+dirty`` when swarmnode/ had uncommitted changes)."""
    git = ["git", "-C", str(REPO)]
    try:
        head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True)
        dirty = subprocess.run(
            [*git, "status", "--porcelain", "--", "swarmnode"], capture_output=True, text=True
        )
    except OSError:
        return "unknown"
    if head.returncode != 0:
        return "unknown"
    return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


def heldout(d: Path, per_dataset: int) -> dict[str, Any]:
    """Strict held-out result of one node (cached in its folder as heldout.json; a
    cache from fewer rounds than the node has run, as after ``--rounds`` was raised
    on ``--resume``, is redone)."""
    cache = d / "heldout.json"
    stale = cache.is_file() and json.loads(cache.read_text()).get("round", 0) < rounds_done(d)
    if not cache.is_file() or stale:
        from swarmnode.config import load_config
        from swarmnode.learn.evaluate import evaluate

        cfg = load_config(d / "config.resolved.yaml")
        result = evaluate(cfg, n=per_dataset)
        records = result.pop("records", [])
        lines = "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in records)
        (d / "heldout_items.jsonl").write_text(lines)  # one line per item: bootstrap over items
        cache.write_text(json.dumps(result))
    held: dict[str, Any] = json.loads(cache.read_text())
    return held


def base_heldout(args: argparse.Namespace, d: Path, per_dataset: int) -> dict[str, Any]:
    """The untrained model on the same held-out items (once per --out)."""
    cache = args.out / "base-heldout.json"
    if not cache.is_file():
        from swarmnode.config import load_config
        from swarmnode.learn.evaluate import evaluate

        cfg = load_config(d / "config.resolved.yaml")
        cache.write_text(json.dumps(evaluate(cfg, n=per_dataset, base=True)))
    result: dict[str, Any] = json.loads(cache.read_text())
    return result


def complete(args: argparse.Namespace, name: str, seed: int) -> bool:
    root = run_dir(args, name, seed)
    nodes = [root / f"n{i}" for i in range(args.nodes)]
    return (root / "run.json").is_file() and all(rounds_done(d) >= args.rounds for d in nodes)


def read_runs(args: argparse.Namespace) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Every finished run under --out: per-round rows and per-node held-out rows."""
    rows, held = [], []
    for root in sorted(args.out.glob("*-s*")):
        name, _, seed_text = root.name.rpartition("-s")
        if name not in CONFIGS or not seed_text.isdigit() or not (root / "run.json").is_file():
            continue
        seed = int(seed_text)
        started = json.loads((root / "run.json").read_text())["started"]
        for d in sorted(root.glob("n*")):
            if not d.is_dir():
                continue
            i = int(d.name.removeprefix("n"))
            lines = (d / "metrics.jsonl").read_text().splitlines()
            by_round = {}  # a continued run redid the rounds after its last checkpoint
            for x in lines:
                if x.strip():
                    rec = json.loads(x)
                    by_round[rec["round"]] = rec
            recs = [by_round[k] for k in sorted(by_round) if k <= args.rounds]
            if len(recs) < args.rounds:
                continue
            compute = 0.0
            for r in recs:
                compute += r["gen_seconds"] + r["train_seconds"]
                rows.append(
                    {
                        "config": name,
                        "seed": seed,
                        "node": i,
                        "round": r["round"],
                        "wall_s": round(r["time"] - started, 1),
                        "compute_s": round(compute, 3),  # generation + update, no waits
                        "reward": r["reward_mean"],
                        "accuracy": r["accuracy"],
                        "format_reward": r.get("format_reward", 0.0),
                        "groups_trained": r["groups_trained"],
                        "external_groups": r.get("external_groups", 0),
                        "completed_groups": r.get("completed_groups", 0),
                        "tokens_generated": r.get("tokens_generated", 0),
                        "tokens_trained": r.get("tokens_trained", 0),
                        "tokens_masked": r.get("tokens_masked", 0),  # in tokens_trained too
                        "replay_groups": r.get("replay_groups", 0),
                    }
                )
            h = heldout(d, args.per_dataset)
            held.append(
                {
                    "config": name,
                    "seed": seed,
                    "node": i,
                    "heldout_accuracy": h["accuracy"],
                    "items": h["items"],
                    "lo": round(h["interval"][0], 4),
                    "hi": round(h["interval"][1], 4),
                    "mean_score": round(h["mean_score"], 4),
                    "seen_in_training": h["seen_in_training"],
                    "collapsed": ",".join(k for k, v in h["per_dataset"].items() if v["collapsed"]),
                    **specialty_accuracy(d, h),
                }
            )
    return rows, held


def specialty_accuracy(d: Path, h: dict[str, Any]) -> dict[str, float]:
    """Held-out accuracy on a node's own datasets (those of top weight) and on the
    others', when its weights differ (--hetero); nothing otherwise."""
    own = own_datasets(yaml.safe_load((d / "config.resolved.yaml").read_text()))
    if own is None:
        return {}
    return {f"{k}_accuracy": v for k, v in split_accuracy(h, own).items()}


def write_csv(path: Path, rows: list[dict[str, Any]]) -> None:
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else ["config"])
        w.writeheader()
        w.writerows(rows)


def moving(xs: list[float], window: int) -> list[float]:
    out, acc = [], 0.0
    for k, x in enumerate(xs):
        acc += x - (xs[k - window] if k >= window else 0.0)
        out.append(acc / min(k + 1, window))
    return out


def plot(rows: list[dict[str, Any]], names: list[str], out: Path, window: int) -> None:
    fig, axes = new_figure(ncols=2, size=(13.0, 4.5))
    for name in names:
        per_node: dict[tuple[int, int], list[dict[str, Any]]] = defaultdict(list)
        for r in rows:
            if r["config"] == name:
                per_node[(r["seed"], r["node"])].append(r)
        series = [sorted(v, key=lambda r: r["round"]) for v in per_node.values()]
        if not series:
            continue
        curves = [moving([r["reward"] for r in s], window) for s in series]
        mean, lo, hi = mean_band(curves)
        xs = list(range(1, len(mean) + 1))
        walls, _, _ = mean_band([[r["compute_s"] for r in s] for s in series])
        for ax, x in ((axes[0], xs), (axes[1], walls)):
            (line,) = ax.plot(x, mean, label=f"{name} ({len(series)} nodes)", linewidth=2)
            ax.fill_between(x, lo, hi, color=line.get_color(), alpha=0.15)
    axes[0].set_xlabel("round")
    axes[1].set_xlabel("compute seconds per node: generation + update (mean over nodes)")
    for ax in axes:
        ax.set_ylabel(f"training reward ({window}-round moving average)")
    save_figure(fig, out, title="mean over nodes and seeds, 95% band", dpi=110)


def drift_table(rows: list[dict[str, Any]], names: list[str], completions: int) -> list[str]:
    """Own completions' length and format reward by thirds of the run, per config.

    Training on peers' whole groups can pull a node's own sampling away from what
    it did alone; these two columns show it (tokens per generated completion, and
    the share of completions in the answer format)."""
    cuts = thirds(max((r["round"] for r in rows), default=0))
    span = " / ".join(f"{a}-{b}" for a, b in cuts)
    out = [
        "",
        f"| config | tokens per own completion, rounds {span} | format reward, same thirds |",
        "|---|---|---|",
    ]
    for n in names:
        cells = []
        for key, scale, digits in (("tokens_generated", completions, 1), ("format_reward", 1, 2)):
            parts = []
            for a, b in cuts:
                xs = [r[key] / scale for r in rows if r["config"] == n and a <= r["round"] <= b]
                parts.append(f"{sum(xs) / len(xs):.{digits}f}" if xs else "—")
            cells.append(" / ".join(parts))
        out.append(f"| {n} | {cells[0]} | {cells[1]} |")
    return out


def thirds(last: int) -> list[tuple[int, int]]:
    """Rounds 1..last cut in three spans: [(1, a), (a + 1, b), (b + 1, last)]."""
    return [(1, last // 3), (last // 3 + 1, 2 * last // 3), (2 * last // 3 + 1, last)]


def reward_thirds_table(rows: list[dict[str, Any]], names: list[str]) -> list[str]:
    """Training reward per round in each third of the run, with the paired difference
    to none (by seed and node) in each: where in the run sharing pays."""
    cuts = thirds(max((r["round"] for r in rows), default=0))
    span = " / ".join(f"{a}-{b}" for a, b in cuts)
    by: dict[tuple[str, int], dict[tuple[int, int], list[float]]] = defaultdict(
        lambda: defaultdict(list)
    )
    for r in rows:
        for k, (a, b) in enumerate(cuts):
            if a <= r["round"] <= b:
                by[(r["config"], k)][(r["seed"], r["node"])].append(r["reward"])
    out = [
        "",
        f"| config | reward per round, rounds {span} | vs none, each third |",
        "|---|---|---|",
    ]
    for n in names:
        means, diffs = [], []
        for k in range(3):
            cell = {key: sum(v) / len(v) for key, v in by[(n, k)].items()}
            means.append(f"{sum(cell.values()) / len(cell):.3f}" if cell else "—")
            if n != "none":
                ref = {key: sum(v) / len(v) for key, v in by[("none", k)].items()}
                d = paired_diff(cell, ref)
                diffs.append(f"{d.rel:+.0%} [{d.rel_lo:+.0%}, {d.rel_hi:+.0%}]" if d.pairs else "—")
        out.append(f"| {n} | {' / '.join(means)} | {' / '.join(diffs) or '—'} |")
    return out


def points(mine: dict[tuple[int, int], float], ref: dict[tuple[int, int], float]) -> str:
    """A paired accuracy difference in points with its 95% interval, or — if unpaired."""
    d = paired_diff(mine, ref)
    return f"{d.diff * 100:+.1f} [{d.lo * 100:+.1f}, {d.hi * 100:+.1f}]" if d.pairs else "—"


def specialty_table(held: list[dict[str, Any]], names: list[str]) -> list[str]:
    """With --hetero: held-out accuracy on each node's own specialty and on the other
    nodes' datasets, paired against none (what sharing brings a specialist)."""
    if not any("own_accuracy" in h for h in held):
        return []
    lines = [
        "",
        "| config | held-out, own specialty | vs none (points) | held-out, the others' datasets "
        "| vs none (points) |",
        "|---|---|---|---|---|",
    ]
    for n in names:
        cells = []
        for col in ("own_accuracy", "others_accuracy"):
            by = {
                c: {(h["seed"], h["node"]): h[col] for h in held if h["config"] == c and col in h}
                for c in (n, "none")
            }
            mean = sum(by[n].values()) / max(1, len(by[n]))
            cells += [f"{mean:.3f}", points(by[n], by["none"]) if n != "none" else "—"]
        lines.append(f"| {n} | " + " | ".join(cells) + " |")
    return lines


def summarise(
    args: argparse.Namespace, rows: list[dict[str, Any]], held: list[dict[str, Any]]
) -> str:
    names = [n for n in CONFIGS if any(r["config"] == n for r in rows)]
    cumulative: dict[str, dict[tuple[int, int], float]] = defaultdict(lambda: defaultdict(float))
    totals: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    walls: dict[str, dict[tuple[int, int], float]] = defaultdict(dict)
    for r in rows:
        key = (r["seed"], r["node"])
        cumulative[r["config"]][key] += r["reward"]
        walls[r["config"]][key] = max(walls[r["config"]].get(key, 0.0), r["compute_s"])
        for col in ("groups_trained", "external_groups", "completed_groups"):
            totals[r["config"]][col] += r[col]
        for col in ("tokens_generated", "tokens_trained", "tokens_masked"):
            totals[r["config"]][col] += r[col]
        totals[r["config"]]["optimizer_steps"] += r["groups_trained"] > 0
    acc = {
        n: {(h["seed"], h["node"]): h["heldout_accuracy"] for h in held if h["config"] == n}
        for n in names
    }
    base = held and base_heldout(
        args, run_dir(args, held[0]["config"], held[0]["seed"]) / "n0", args.per_dataset
    )
    lines = [
        f"{args.nodes} nodes a run, {args.rounds} rounds, Q = B = {args.questions} groups of "
        f"{args.completions} completions, <= {args.max_new_tokens} new tokens; held-out: "
        f"{args.per_dataset} items per dataset per node, greedy, strict accuracy"
        + (f" (base model: {base['accuracy']:.3f}, {base['items']} items)" if base else "")
        + ". Differences are paired by (seed, node); [95% bootstrap interval].",
        "",
        "| config | I / J | runs (seeds) | cumulative reward per node | vs none | "
        "held-out accuracy | vs none (points) | compute s per node | tokens gen / trained "
        "per node | ext / completed groups per node |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    figures = []
    for n in names:
        s = sharing(n, args.questions)
        keys = cumulative[n]
        k = len(keys)
        seeds = sorted({key[0] for key in keys})
        d = paired_diff(keys, cumulative["none"]) if n != "none" else None
        mean_acc = sum(acc[n].values()) / max(1, len(acc[n]))
        vs = f"{d.rel:+.1%} [{d.rel_lo:+.1%}, {d.rel_hi:+.1%}]" if d and d.pairs else "—"
        hv = points(acc[n], acc.get("none", {})) if n != "none" else "—"
        t = totals[n]
        lines.append(
            f"| {n} | {s['local_groups']} / {s['external_groups']} | {len(seeds)} "
            f"({','.join(map(str, seeds))}) | {sum(keys.values()) / k:.2f} | {vs} | "
            f"{mean_acc:.3f} | {hv} | {sum(walls[n].values()) / k:.0f} | "
            f"{t['tokens_generated'] / k:.0f} / {t['tokens_trained'] / k:.0f} | "
            f"{t['external_groups'] / k:.0f} / {t['completed_groups'] / k:.0f} |"
        )
        figures.append(
            f"{n}_runs={len(seeds)} {n}_groups_trained={t['groups_trained']:.0f} "
            f"{n}_tokens_trained={t['tokens_trained']:.0f} "
            f"{n}_cumulative={sum(keys.values()) / k:.3f} {n}_heldout={mean_acc:.3f} "
            f"{n}_optimizer_steps={t['optimizer_steps']:.0f} "
            f"{n}_tokens_unmasked={t['tokens_trained'] - t['tokens_masked']:.0f}"
        )
    lines += reward_thirds_table(rows, names)
    lines += specialty_table(held, names)
    lines += drift_table(rows, names, args.completions * args.questions)
    extras = read_extras(args.out, rows)
    lines += unit_sections(rows, names, cumulative, acc, extras, LONE)
    plot(rows, names, args.out / "curves.png", args.window)
    text = "\n".join(lines) + "\n"
    (args.out / "results.md").write_text(text)
    return text + " ".join(figures)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument(
        "--rounds",
        type=int,
        help="rounds per run (default 60, --quick 3); raised on --resume, finished runs go on",
    )
    ap.add_argument("--seeds", type=int, default=1, help="run seeds 0..K-1 of each config")
    ap.add_argument("--seed-list", help="comma-separated seeds instead of --seeds")
    ap.add_argument(
        "--configs",
        help="comma-separated configurations (default none,balanced,adaptive,complete; "
        "with --quick none,self-replay,heavy-pos)",
    )
    ap.add_argument("--base", type=Path, default=REPO / "configs" / "specialties.yaml")
    ap.add_argument("--model", help="override model.name (e.g. a tiny model folder)")
    ap.add_argument("--questions", type=int, default=4, help="Q = B, groups made and trained")
    ap.add_argument("--completions", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--threads", type=int, default=1, help="torch threads per node")
    ap.add_argument("--heldout", type=int, default=200, help="held-out items per node")
    ap.add_argument(
        "--hetero", type=float, default=0.0, help="weight of each node's own dataset (0 = off)"
    )
    ap.add_argument("--window", type=int, default=10)
    ap.add_argument("--timeout", type=float, default=7200, help="per run, seconds")
    ap.add_argument("--out", type=Path, default=REPO / "runs" / "sapo")
    ap.add_argument("--quick", action="store_true", help="2 nodes, 3 rounds, small batches")
    ap.add_argument(
        "--lr-scale",
        type=float,
        default=1.0,
        help="multiply every node's train.learning_rate (the learning-rate check); "
        "use one --out per scale",
    )
    ap.add_argument("--resume", action="store_true", help="skip runs that already finished")
    ap.add_argument("--aggregate", action="store_true", help="only aggregate existing runs")
    ap.add_argument(
        "--import-raw",
        type=Path,
        action="append",
        default=[],
        help="lay out a committed raw/ folder's runs under --out first (repeatable)",
    )
    ap.add_argument("--export-raw", type=Path, help="copy finished runs' small files here")
    args = ap.parse_args()
    if args.quick:
        args.nodes, args.questions, args.completions = 2, 2, 4
        args.max_new_tokens, args.heldout, args.window = 8, 2, 2
    args.rounds = args.rounds or (3 if args.quick else 60)
    if args.configs is None:
        args.configs = (
            "none,self-replay,heavy-pos" if args.quick else "none,balanced,adaptive,complete"
        )
    base = yaml.safe_load(args.base.read_text())
    args.per_dataset = max(1, math.ceil(args.heldout / len(base["tasks"]["datasets"])))
    args.out.mkdir(parents=True, exist_ok=True)
    seeds = [int(s) for s in args.seed_list.split(",")] if args.seed_list else range(args.seeds)
    for raw in args.import_raw:
        print(f"imported from {raw}: {', '.join(import_raw(raw, args.out)) or 'nothing new'}")
    if not args.aggregate:
        for name in [c.strip() for c in args.configs.split(",") if c.strip()]:
            sharing(name, args.questions)  # unknown names fail before anything runs
            for seed in seeds:
                if args.resume and complete(args, name, seed):
                    continue
                t0 = time.monotonic()
                run_once(name, seed, args, base)
                for i in range(args.nodes):
                    heldout(run_dir(args, name, seed) / f"n{i}", args.per_dataset)
                print(f"{name} seed {seed}: {time.monotonic() - t0:.0f}s", flush=True)
    rows, held = read_runs(args)
    if args.export_raw:
        print(f"exported to {args.export_raw}: {', '.join(export_raw(args.out, args.export_raw))}")
    write_csv(args.out / "rewards.csv", rows)
    write_csv(args.out / "heldout.csv", held)
    print(summarise(args, rows, held), flush=True)


if __name__ == "__main__":
    main()

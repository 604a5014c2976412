"""The committed form of SAPO experiment runs, and back: so anyone can re-aggregate.

A run folder of sapo_experiment.py (``<out>/<config>-s<seed>/``) holds node
data directories with checkpoints (megabytes each). What the aggregation reads is
small, and that is what is committed under ``docs/experiments/.../raw/``:

    raw/<config>-s<seed>/run.json            start time, nodes, last segment
    raw/<config>-s<seed>/n<i>.yaml           the node's config as launched
    raw/<config>-s<seed>/n<i>.metrics.jsonl  one record per round
    raw/<config>-s<seed>/n<i>.heldout.json   its strict held-out result
    raw/<config>-s<seed>/n<i>.heldout_items.jsonl  that result, one line per item
    raw/<config>-s<seed>/n<i>.trained_items.jsonl  one line per group it trained on
    base-heldout.json (beside raw/)         the untrained model on the same items

``export_raw`` writes that from finished runs; ``import_raw`` lays it out again as
run folders (no checkpoints) that ``sapo_experiment.py --aggregate`` reads as if
they had just run. Raw folders committed before run.json was kept get their start
time from the ``rewards.csv`` committed beside them (round 1's wall seconds), or,
failing that, from round 1's end less its generation and update seconds.

Invariants: import never overwrites a run folder that exists (a local run wins);
export copies only finished runs (their run.json exists) and only these files.
"""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path


def export_raw(out: Path, raw: Path) -> list[str]:
    """Copy every finished run under ``out`` into ``raw``; the names copied."""
    done = []
    for root in sorted(out.glob("*-s*")):
        if not (root / "run.json").is_file():
            continue
        dest = raw / root.name
        dest.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / "run.json", dest / "run.json")
        for cfg in sorted(root.glob("n*.yaml")):
            node = root / cfg.stem
            shutil.copy2(cfg, dest / cfg.name)
            shutil.copy2(node / "metrics.jsonl", dest / f"{cfg.stem}.metrics.jsonl")
            for name in ("heldout.json", "heldout_items.jsonl", "trained_items.jsonl"):
                if (node / name).is_file():
                    shutil.copy2(node / name, dest / f"{cfg.stem}.{name}")
        done.append(root.name)
    if (out / "base-heldout.json").is_file():
        shutil.copy2(out / "base-heldout.json", raw.parent / "base-heldout.json")
    return done


def _started(raw_run: Path) -> float:
    """When a run started (for wall-clock columns) if its run.json was not kept."""
    rewards = raw_run.parent.parent / "rewards.csv"
    first = json.loads((raw_run / "n0.metrics.jsonl").read_text().splitlines()[0])
    if rewards.is_file():
        config, _, seed = raw_run.name.rpartition("-s")
        with rewards.open() as f:
            for row in csv.DictReader(f):
                if (row["config"], row["seed"], row["node"], row["round"]) == (
                    config,
                    seed,
                    "0",
                    "1",
                ):
                    return float(first["time"]) - float(row["wall_s"])
    return float(first["time"]) - float(first["gen_seconds"]) - float(first["train_seconds"])


def import_raw(raw: Path, out: Path) -> list[str]:
    """Lay out every run under ``raw`` as a run folder under ``out``; the names laid."""
    done = []
    base = raw.parent / "base-heldout.json"  # the untrained model, once per experiment
    if base.is_file() and not (out / base.name).is_file():
        out.mkdir(parents=True, exist_ok=True)
        shutil.copy2(base, out / base.name)
    for src in sorted(p for p in raw.glob("*-s*") if p.is_dir()):
        dest = out / src.name
        if dest.exists():
            continue
        configs = sorted(src.glob("n*.yaml"))
        if (src / "run.json").is_file():
            info = json.loads((src / "run.json").read_text())
        else:
            info = {"started": _started(src), "nodes": len(configs), "imported": True}
        dest.mkdir(parents=True)
        for cfg in configs:
            node = dest / cfg.stem
            node.mkdir()
            shutil.copy2(cfg, dest / cfg.name)
            shutil.copy2(cfg, node / "config.resolved.yaml")
            shutil.copy2(src / f"{cfg.stem}.metrics.jsonl", node / "metrics.jsonl")
            for name in ("heldout.json", "heldout_items.jsonl", "trained_items.jsonl"):
                if (src / f"{cfg.stem}.{name}").is_file():
                    shutil.copy2(src / f"{cfg.stem}.{name}", node / name)
        (dest / "run.json").write_text(json.dumps(info))
        done.append(src.name)
    return done

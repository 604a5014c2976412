"""The experiment harness: real node processes per (configuration, seed), resumable runs,
aggregation with paired intervals, and a last line that proves the work was done."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from swarmnode.lab.sapo_experiment import (
    drift_table,
    reward_thirds_table,
    specialty_accuracy,
    specialty_table,
)
from tests.helpers import ENV, REPO


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "scripts/sapo_experiment.py", *args],
        cwd=REPO,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=900,
    )


def test_quick_experiment_with_seeds(tiny_model_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "exp"
    common = ["--quick", "--model", str(tiny_model_dir), "--out", str(out)]
    # Three runs: none with seeds 0 and 1, complete with seed 0 (paired with none's).
    first = run(*common, "--configs", "none,complete", "--seed-list", "0")
    assert first.returncode == 0, first.stdout + first.stderr
    proc = run(*common, "--configs", "none", "--seed-list", "1", "--resume")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "none seed 0" not in proc.stdout  # resumed: seed 0 was not run again
    rows = list(csv.DictReader((out / "rewards.csv").open()))
    seen = {(r["config"], r["seed"], r["node"], r["round"]) for r in rows}
    runs = [("none", 0), ("none", 1), ("complete", 0)]
    assert seen == {(c, str(s), str(n), str(r)) for c, s in runs for n in (0, 1) for r in (1, 2, 3)}
    assert all(r["external_groups"] == "0" for r in rows if r["config"] == "none")
    assert all(float(r["wall_s"]) > 0 for r in rows)
    assert all(float(r["compute_s"]) > 0 for r in rows if r["round"] == "3")  # cumulative
    held = list(csv.DictReader((out / "heldout.csv").open()))
    assert len(held) == 6 and all(int(h["items"]) >= 2 for h in held)
    table = (out / "results.md").read_text()
    assert "| none | 2 / 0 | 2 (0,1) |" in table and "| complete | 1 / 1 | 1 (0) |" in table
    assert (out / "curves.png").stat().st_size > 0
    last = proc.stdout.strip().splitlines()[-1]
    assert "none_runs=2" in last and "complete_tokens_trained=" in last

    # Aggregation alone reads what exists and prints the same figures.
    agg = run(*common, "--aggregate", "--export-raw", str(tmp_path / "doc" / "raw"))
    assert agg.returncode == 0 and agg.stdout.strip().splitlines()[-1] == last

    # The committed form (raw/: configs, metrics, held-out) re-aggregates to the same
    # figures and table in a fresh folder, without the nodes' data directories.
    raw = tmp_path / "doc" / "raw"
    assert sorted(p.name for p in raw.iterdir()) == ["complete-s0", "none-s0", "none-s1"]
    assert not list(raw.rglob("*.safetensors"))
    again = tmp_path / "again"
    proc = run("--quick", "--out", str(again), "--aggregate", "--import-raw", str(raw))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == last
    assert (again / "results.md").read_text() == table


def test_drift_table_by_thirds() -> None:
    """Length per own completion and format reward, averaged by thirds of the run."""
    rows = [
        {"config": c, "round": k, "tokens_generated": t * 16, "format_reward": f}
        for c, t, f in (("none", 10, 1.0), ("balanced", 0, 0.0))
        for k in range(1, 7)
    ]
    for r in rows:  # balanced drifts: 10, 10, 20, 20, 40, 40 tokens; format 1, 1, .5, .5, 0, 0
        if r["config"] == "balanced":
            r["tokens_generated"] = 16 * 10 * 2 ** ((r["round"] - 1) // 2)
            r["format_reward"] = 1.0 - 0.5 * ((r["round"] - 1) // 2)
    table = drift_table(rows, ["none", "balanced"], completions=16)
    assert "rounds 1-2 / 3-4 / 5-6" in table[1]
    assert "| none | 10.0 / 10.0 / 10.0 | 1.00 / 1.00 / 1.00 |" in table
    assert "| balanced | 10.0 / 20.0 / 40.0 | 1.00 / 0.50 / 0.00 |" in table


def test_reward_by_thirds_paired_against_none() -> None:
    """Reward per round in each third, and the paired relative difference to none:
    a config that matches none early and doubles it late shows +0% then +100%."""
    rows = [
        {"config": c, "seed": 0, "node": i, "round": k, "reward": v}
        for i in (0, 1)
        for k in range(1, 7)
        for c, v in (("none", 0.1 * (i + 1)), ("sharing", 0.1 * (i + 1) * (2 if k > 4 else 1)))
    ]
    table = reward_thirds_table(rows, ["none", "sharing"])
    assert "rounds 1-2 / 3-4 / 5-6" in table[1]
    assert "| none | 0.150 / 0.150 / 0.150 | — |" in table
    same, double = "+0% [+0%, +0%]", "+100% [+100%, +100%]"
    assert f"| sharing | 0.150 / 0.150 / 0.300 | {same} / {same} / {double} |" in table


def test_specialty_accuracy_for_hetero_nodes(tmp_path: Path) -> None:
    """--hetero: held-out accuracy split into the node's own datasets (top weight) and
    the others', item-weighted, and paired against none; nothing for equal weights."""

    def node(weights: dict[str, float]) -> Path:
        d = tmp_path / "-".join(f"{k}{w:g}" for k, w in weights.items())
        d.mkdir()
        specs = [{"name": k, "weight": w} for k, w in weights.items()]
        (d / "config.resolved.yaml").write_text(yaml.safe_dump({"tasks": {"datasets": specs}}))
        return d

    per = {"a": (10, 0.5), "b": (10, 0.2), "c": (30, 0.6)}
    h = {"per_dataset": {k: {"items": n, "accuracy": x} for k, (n, x) in per.items()}}
    assert specialty_accuracy(node({"a": 6, "b": 1, "c": 1}), h) == {
        "own_accuracy": 0.5,
        "others_accuracy": 0.5,  # (10 * 0.2 + 30 * 0.6) / 40
    }
    assert specialty_accuracy(node({"a": 1, "b": 1, "c": 1}), h) == {}
    held = [
        {"config": c, "seed": 0, "node": i, "own_accuracy": own, "others_accuracy": oth}
        for c, i, own, oth in (
            ("none", 0, 0.4, 0.1),
            ("none", 1, 0.2, 0.1),
            ("mix", 0, 0.3, 0.3),
            ("mix", 1, 0.1, 0.3),
        )
    ]
    table = specialty_table(held, ["none", "mix"])
    assert "| none | 0.300 | — | 0.100 | — |" in table
    assert "| mix | 0.200 | -10.0 [-10.0, -10.0] | 0.300 | +20.0 [+20.0, +20.0] |" in table
    assert specialty_table([{"config": "none", "seed": 0, "node": 0}], ["none"]) == []


@pytest.mark.slow  # two more node runs; the quick test above covers resuming
def test_resume_with_more_rounds_continues_a_finished_run(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    out = tmp_path / "exp"
    common = ["--quick", "--model", str(tiny_model_dir), "--out", str(out)]
    common += ["--configs", "none", "--seed-list", "0", "--resume"]
    first = run(*common)
    assert first.returncode == 0, first.stdout + first.stderr
    before = {(r["node"], r["round"]): r for r in csv.DictReader((out / "rewards.csv").open())}
    assert {k[1] for k in before} == {"1", "2", "3"}
    # Moved, as a run copied elsewhere to be extended is: paths follow the folder.
    moved = tmp_path / "moved"
    out.rename(moved)
    common[common.index(str(out))] = str(moved)
    longer = run(*common, "--rounds", "5")
    assert longer.returncode == 0, longer.stdout + longer.stderr
    assert "none seed 0" in longer.stdout  # not skipped as finished
    after = {(r["node"], r["round"]): r for r in csv.DictReader((moved / "rewards.csv").open())}
    assert {k[1] for k in after} == {"1", "2", "3", "4", "5"}
    for key, row in before.items():  # rounds 1-3 were not run again
        assert after[key]["reward"] == row["reward"] and after[key]["wall_s"] == row["wall_s"]
    for i in (0, 1):
        cfg = yaml.safe_load((moved / "none-s0" / f"n{i}.yaml").read_text())
        assert cfg["node"]["max_rounds"] == 5
        assert cfg["node"]["data_dir"] == str(moved / "none-s0" / f"n{i}")
        held = (moved / "none-s0" / f"n{i}" / "heldout.json").read_text()
        assert '"round": 5' in held  # scored again after the new rounds


def test_quick_runs_the_fair_comparison_arms(tiny_model_dir: Path, tmp_path: Path) -> None:
    """--quick's default arms: none, self-replay and heavy-pos, each run recording its
    commit; the raw form carries every trained item and every held-out item."""
    out = tmp_path / "fair"
    proc = run("--quick", "--model", str(tiny_model_dir), "--out", str(out))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    last = proc.stdout.strip().splitlines()[-1]
    for arm in ("none", "self-replay", "heavy-pos"):
        assert f"{arm}_runs=1" in last
        info = json.loads((out / f"{arm}-s0" / "run.json").read_text())
        assert len(info["commit"].removesuffix("+dirty")) == 40 and info["lr_scale"] == 1.0
    lone = yaml.safe_load((out / "self-replay-s0" / "n0.yaml").read_text())
    assert lone["sapo"]["self_replay"] is True and lone["swarm"]["enabled"] is False
    raw = tmp_path / "raw"
    agg = run("--quick", "--out", str(out), "--aggregate", "--export-raw", str(raw))
    assert agg.returncode == 0, agg.stdout + agg.stderr
    for arm in ("none", "self-replay", "heavy-pos"):
        trained = (raw / f"{arm}-s0" / "n0.trained_items.jsonl").read_text().splitlines()
        items = (raw / f"{arm}-s0" / "n0.heldout_items.jsonl").read_text().splitlines()
        assert items and all(set(json.loads(x)) >= {"question", "score"} for x in items)
        assert all(set(json.loads(x)) == TRAINED_KEYS for x in trained)
    heavy = raw / "heavy-pos-s0" / "n0.trained_items.jsonl"
    sources = {json.loads(x)["source"] for x in heavy.read_text().splitlines()}
    assert "replay" not in sources  # heavy-pos replays nothing; its sources: local, peers
    replayed = (raw / "self-replay-s0" / "n0.trained_items.jsonl").read_text()
    assert {json.loads(x)["source"] for x in replayed.splitlines()} <= {"local", "replay"}
    # results.md: swarms as the unit against none (and the better lone arm), with the
    # item-level held-out from the item records, equal effort, and the commit each ran on.
    table = (out / "results.md").read_text()
    assert "Against none, swarms as the unit" in table
    assert "The better lone arm by mean cumulative reward per node:" in table
    heavy = next(x for x in table.splitlines() if x.startswith("| heavy-pos | 1 swarm / 2 nodes"))
    assert "paired) |" in heavy and heavy.endswith("| one commit |")
    commit = json.loads((out / "none-s0" / "run.json").read_text())["commit"]
    assert f"| none | {commit[:12]}" in table and "| optimizer steps |" in table
    assert "heavy-pos_optimizer_steps=" in last and "none_tokens_unmasked=" in last


TRAINED_KEYS = {"round", "source", "dataset", "config", "seed", "index"}

"""results.md's swarm-level sections on a small synthetic experiment whose answers are
worked out by hand: units, permutation p, item-level differences, equal effort, commits."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from swarmnode.lab.sapo_tables import (
    comparison_table,
    effort,
    effort_table,
    read_extras,
    specialty_table,
    unit_sections,
)

LONE = ("none", "self-replay")
# Per node cumulative reward (one round each, so reward = cumulative).
# sharing swarms: seed 0 nodes 4, 6 (mean 5); seed 1 nodes 6, 8 (mean 7).
# none nodes: 1, 2, 3, 2 (mean 2). self-replay nodes: 3, 3, 3, 3.
REWARD = {"sharing": [4.0, 6.0, 6.0, 8.0], "none": [1.0, 2.0, 3.0, 2.0], "self-replay": [3.0] * 4}
COMMITS = {
    ("sharing", 0): "a" * 40,
    ("sharing", 1): "a" * 40,
    ("none", 0): "a" * 40,
    ("none", 1): "b" * 40,
    ("self-replay", 0): None,  # an older run.json: no commit
    ("self-replay", 1): "a" * 40,
}
# Items right per arm, of 4 items of dataset "d" (every node alike).
RIGHT = {"sharing": 3, "none": 1, "self-replay": 1}


def row(config: str, seed: int, node: int) -> dict[str, Any]:
    k = 2 * seed + node
    return {
        "config": config,
        "seed": seed,
        "node": node,
        "round": 1,
        "reward": REWARD[config][k],
        "compute_s": 10.0 * (k + 1),
        "groups_trained": 4 if config == "sharing" else k % 2,  # lone: every other node
        "tokens_trained": 100,
        "tokens_masked": 40 if config == "sharing" else 0,
        "replay_groups": 0,
        "external_groups": 3 if config == "sharing" else 0,
        "tokens_generated": 200,
    }


def lay_out(out: Path) -> list[dict[str, Any]]:
    rows = []
    for (config, seed), commit in COMMITS.items():
        root = out / f"{config}-s{seed}"
        root.mkdir(parents=True)
        info = {"started": 0.0, **({"commit": commit} if commit else {})}
        (root / "run.json").write_text(json.dumps(info))
        for node in (0, 1):
            rows.append(row(config, seed, node))
            d = root / f"n{node}"
            d.mkdir()
            acc = 0.5 + 0.1 * seed if config == "sharing" else 0.2
            held = {"accuracy": acc, "per_dataset": {"d": {"items": 4, "accuracy": acc}}}
            (d / "heldout.json").write_text(json.dumps(held))
            items = [
                {"dataset": "d", "config": {"size": 9}, "seed": 5, "index": i}
                | {"score": 1.0 if i < RIGHT[config] else 0.0}
                for i in range(4)
            ]
            (d / "heldout_items.jsonl").write_text("".join(json.dumps(x) + "\n" for x in items))
    return rows


def by_node(rows: list[dict[str, Any]], col: str) -> dict[str, dict[tuple[int, int], float]]:
    out: dict[str, dict[tuple[int, int], float]] = {}
    for r in rows:
        out.setdefault(r["config"], {})[(r["seed"], r["node"])] = r[col]
    return out


def test_read_extras(tmp_path: Path) -> None:
    rows = lay_out(tmp_path)
    ex = read_extras(tmp_path, rows)
    assert ex.commits["self-replay"] == {0: "unrecorded", 1: "a" * 40}
    assert ex.per_dataset["sharing"]["d"] == {(0, 0): 0.5, (0, 1): 0.5, (1, 0): 0.6, (1, 1): 0.6}
    assert len(ex.items["none"]) == 16  # 4 nodes x 4 items


def test_comparison_against_none_by_hand(tmp_path: Path) -> None:
    rows = lay_out(tmp_path)
    ex = read_extras(tmp_path, rows)
    cumulative = by_node(rows, "reward")
    accuracy = {c: ex.per_dataset[c]["d"] for c in cumulative}  # one dataset: overall = d
    table = comparison_table("none", ["none", "sharing"], cumulative, accuracy, ex, LONE)
    sharing = next(x for x in table if x.startswith("| sharing |"))
    cells = [c.strip() for c in sharing.strip("|").split("|")]
    # Units: swarms 5 and 7 against nodes 1, 2, 3, 2: difference 6 - 2 = +4, +200%.
    # Permutation: pooled {5, 7, 1, 2, 3, 2}, 15 ways to pick the 2 sharing units;
    # d(s) = s/2 - (20 - s)/4 reaches |4| only for s = 12 ({5, 7}): p = 1/15.
    assert cells[1] == "2 swarms / 4 nodes"
    assert cells[2].startswith("+4.00 [") and cells[3].startswith("+200.0% [")
    assert cells[4] == "0.067 (15)"
    # Held-out by unit: swarms 0.5, 0.6 against 0.2: +35 points.
    assert cells[5].startswith("+35.0 [")
    # By item: 3 of 4 items right against 1 of 4, the same 4 items: +50 points, paired.
    assert cells[7].startswith("+50.0 [") and cells[7].endswith("(4 paired)")
    assert cells[8] == "DIFFERENT commits"  # none's seed 1 ran on another commit
    per_dataset = next(x for x in table if x.startswith("| sharing | d |"))
    assert "| 0.550 / 0.200 | +35.0 [" in per_dataset and "(4 paired)" in per_dataset


def test_sections_add_the_better_lone_arm_effort_and_commits(tmp_path: Path) -> None:
    rows = lay_out(tmp_path)
    ex = read_extras(tmp_path, rows)
    cumulative = by_node(rows, "reward")
    accuracy = {c: {k: 0.2 for k in v} for c, v in cumulative.items()}
    names = ["none", "self-replay", "sharing"]
    text = "\n".join(unit_sections(rows, names, cumulative, accuracy, ex, LONE))
    # self-replay (mean 3) beats none (mean 2): a second comparison, against it.
    assert "The better lone arm by mean cumulative reward per node: self-replay." in text
    assert "Against self-replay, swarms as the unit" in text
    # sharing against self-replay: +3, +100%; self-replay against none: nodes both sides.
    assert "| sharing | 2 swarms / 4 nodes | +3.00 [" in text
    assert "| self-replay | 4 nodes / 4 nodes | +1.00 [" in text
    assert "| sharing | aaaaaaaaaaaa (0,1) |" in text
    assert "| self-replay | unrecorded (0), aaaaaaaaaaaa (1) |" in text
    line = next(x for x in text.splitlines() if x.startswith("| self-replay | 4 nodes / 4 nodes"))
    assert line.endswith("| unrecorded |")


def test_effort_per_node_by_hand(tmp_path: Path) -> None:
    rows = lay_out(tmp_path)
    e = effort(rows, "none")
    # Nodes 0..3 trained groups 0, 1, 0, 1: 2 steps and 2 groups over 4 nodes.
    assert (e["steps"], e["groups"], e["nodes"]) == (0.5, 0.5, 4.0)
    assert e["compute_s"] == pytest.approx(25.0)  # (10 + 20 + 30 + 40) / 4
    s = effort(rows, "sharing")
    assert (s["tokens"], s["masked"], s["tokens_net"], s["external"]) == (100, 40, 60, 3)
    table = effort_table(rows, ["none", "sharing"], {"none": {(0, 0): 0.25}})
    assert "within 25 compute s" in table[1]
    # none within 25 s: nodes at 10 and 20 s count (1 + 2), those at 30 and 40 not: 0.75.
    assert "| none | 4 | 0.5 | 0.5 (0.0 / 0.0) | 100 - 0 = 100 | 200 | 25 | 2.00 | 80.00 " in (
        "\n".join(table)
    )
    assert any(x.startswith("| none |") and x.endswith("| 0.75 | 0.250 |") for x in table)
    assert any(x.startswith("| sharing |") and x.endswith("| — |") for x in table)  # no held-out


def test_specialties_by_unit_and_by_item_by_hand(tmp_path: Path) -> None:
    # Two nodes a run: node 0's specialty is dataset a, node 1's is b (weight 6 vs 1).
    # One held-out item of each dataset; score[config][node] = (a, b).
    score = {"sharing": [(1.0, 1.0), (0.0, 1.0)], "none": [(1.0, 0.0), (0.0, 0.0)]}
    rows = []
    for config, per_node in score.items():
        root = tmp_path / f"{config}-s0"
        root.mkdir()
        (root / "run.json").write_text(json.dumps({"started": 0.0, "commit": "a" * 40}))
        for node, (a, b) in enumerate(per_node):
            rows.append(row(config, 0, node))
            d = root / f"n{node}"
            d.mkdir()
            own = "ab"[node]
            mix = [{"name": x, "weight": 6 if x == own else 1} for x in "ab"]
            (d / "config.resolved.yaml").write_text(json.dumps({"tasks": {"datasets": mix}}))
            per = {"a": {"items": 1, "accuracy": a}, "b": {"items": 1, "accuracy": b}}
            held = {"accuracy": (a + b) / 2, "per_dataset": per}
            (d / "heldout.json").write_text(json.dumps(held))
            items = [
                {"dataset": x, "config": {}, "seed": 5, "index": 0, "score": s}
                for x, s in (("a", a), ("b", b))
            ]
            (d / "heldout_items.jsonl").write_text("".join(json.dumps(x) + "\n" for x in items))
    ex = read_extras(tmp_path, rows)
    # By unit: the sharing swarm's nodes score own 1, 1 and others 1, 0 (means 1.0, 0.5);
    # the lone nodes own 1, 0 and others 0, 0 (means 0.5, 0.0): +50 points on each.
    assert ex.specialty["sharing"] == {
        "own": {(0, 0): 1.0, (0, 1): 1.0},
        "others": {(0, 0): 1.0, (0, 1): 0.0},
    }
    table = specialty_table("none", ["none", "sharing"], ex, LONE)
    own = next(x for x in table if x.startswith("| sharing | own specialty |"))
    others = next(x for x in table if x.startswith("| sharing | the others' datasets |"))
    assert "| 1.000 / 0.500 | +50.0 [" in own and "| 0.500 / 0.000 | +50.0 [" in others
    # 1 swarm against 2 nodes: 3 relabellings.
    assert "(3) |" in own
    # By item: own item a is node 0's (1 vs 1), own item b node 1's (1 vs 0): +50, paired;
    # others: a by node 1 (0 vs 0), b by node 0 (1 vs 0): +50.
    assert own.endswith("| +50.0 [+0.0, +100.0] (2 paired) |"), own
    assert others.endswith("| +50.0 [+0.0, +100.0] (2 paired) |"), others
    # Nodes of one mix (no specialty) give no such table.
    assert specialty_table("none", ["none", "sharing"], read_extras_plain(tmp_path), LONE) == []


def read_extras_plain(out: Path) -> Any:
    rows = lay_out(out / "plain")
    return read_extras(out / "plain", rows)

"""The SAPO experiment's results.md sections with swarms as the unit, equal effort,
and the code version each arm ran on.

sapo_experiment.py's first tables pair nodes by (seed, node). Nodes of one sharing
swarm are correlated, so these sections count a sharing arm's swarms (one seed = N
nodes that share) and a lone arm's nodes (``lone``: they never connect) as its units
of replication (sapo_stats.units), and compare arms by the difference of the units'
means, with a cluster-bootstrap 95% interval and an exact permutation p-value; held-out
strict accuracy also gets an item-level bootstrap over the per-item records
(``heldout_items.jsonl``, paired by item when both arms scored the same items).

- ``comparison_table``: every configuration against a reference arm (``none``, and
  the better lone arm by mean cumulative reward), overall, and per dataset on held-out
  accuracy: metrics.jsonl has no per-dataset reward, so per dataset only held-out
  is compared.
- ``specialty_table``: with nodes of different specialties (``--hetero``), held-out
  strict accuracy on each node's own datasets (those of top weight in its mix) and on
  the others', by unit and by item, against the same reference arm.
- ``effort_table``: per arm, per node, optimizer steps (rounds whose update trained a
  group), groups trained (replayed, from peers), tokens trained less those masked out
  (grpo's ``tokens_trained`` counts every completion token of a trained group, masked
  ones too; ``tokens_masked`` are those left out of the loss), tokens generated,
  compute seconds, and reward at equal compute.
- ``commit_table``: the commit(s) each configuration's runs ran on (``unrecorded``
  for runs whose run.json predates the field); a comparison whose arms ran on
  different commits says so in its own row.

Invariants: reads only the run folders' run.json, the nodes' heldout.json,
heldout_items.jsonl and config.resolved.yaml (``read_extras``); every table function
is pure on its inputs; a section with nothing to compare is left out, so older
experiments' results.md keep their first tables byte for byte and only gain sections.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from swarmnode.lab.sapo_stats import Key, item_accuracy, item_diff, unit_diff, units

UNRECORDED = "unrecorded"


@dataclass
class Extras:
    """What the per-round rows do not carry, read from the run folders."""

    commits: dict[str, dict[int, str]] = field(default_factory=dict)  # config -> seed -> commit
    # config -> dataset label -> (seed, node) -> held-out strict accuracy
    per_dataset: dict[str, dict[str, dict[Key, float]]] = field(default_factory=dict)
    items: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # config -> records
    # config -> "own" / "others" -> (seed, node) -> held-out strict accuracy; only for
    # nodes whose dataset weights differ (--hetero). Their item records carry "own".
    specialty: dict[str, dict[str, dict[Key, float]]] = field(default_factory=dict)


def own_datasets(resolved: Mapping[str, Any]) -> set[str] | None:
    """A node's specialty: the datasets of top weight in its resolved config's mix,
    or None when every dataset weighs the same (no specialty).

    >>> ds = [{"name": "a", "weight": 6}, {"name": "b", "weight": 1}, {"name": "c"}]
    >>> own_datasets({"tasks": {"datasets": ds}})
    {'a'}
    >>> own_datasets({"tasks": {"datasets": [{"name": "a"}, {"name": "b"}]}}) is None
    True
    """
    weights = {x["name"]: float(x.get("weight", 1.0)) for x in resolved["tasks"]["datasets"]}
    top = max(weights.values())
    own = {k for k, w in weights.items() if w == top}
    return None if len(own) == len(weights) else own


def specialty_accuracy(held: Mapping[str, Any], own: set[str]) -> dict[str, float]:
    """Held-out strict accuracy on a node's own datasets and on the others' (from
    heldout.json's per_dataset, weighted by items).

    >>> per = {"a": {"items": 2, "accuracy": 1.0}, "b": {"items": 1, "accuracy": 0.0},
    ...        "c": {"items": 3, "accuracy": 0.5}}
    >>> specialty_accuracy({"per_dataset": per}, {"a"})
    {'own': 1.0, 'others': 0.375}
    """

    def acc(pick: bool) -> float:
        parts = [v for k, v in held["per_dataset"].items() if (k in own) == pick]
        return sum(v["accuracy"] * v["items"] for v in parts) / sum(v["items"] for v in parts)

    return {"own": round(acc(True), 4), "others": round(acc(False), 4)}


def read_extras(out: Path, rows: Sequence[Mapping[str, Any]]) -> Extras:
    """Commits, per-dataset held-out accuracy and item records of the rows' nodes."""
    ex = Extras()
    nodes = sorted({(r["config"], r["seed"], r["node"]) for r in rows})
    for config, seed, node in nodes:
        root = out / f"{config}-s{seed}"
        info = json.loads((root / "run.json").read_text())
        ex.commits.setdefault(config, {})[seed] = str(info.get("commit") or UNRECORDED)
        d = root / f"n{node}"
        held = json.loads((d / "heldout.json").read_text())
        for label, v in held.get("per_dataset", {}).items():
            by = ex.per_dataset.setdefault(config, {}).setdefault(label, {})
            by[(seed, node)] = float(v["accuracy"])
        resolved = d / "config.resolved.yaml"
        own = own_datasets(yaml.safe_load(resolved.read_text())) if resolved.is_file() else None
        if own is not None:
            for part, v in specialty_accuracy(held, own).items():
                ex.specialty.setdefault(config, {}).setdefault(part, {})[(seed, node)] = v
        path = d / "heldout_items.jsonl"
        if path.is_file():
            recs = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
            if own is not None:
                recs = [r | {"own": r["dataset"] in own} for r in recs]
            ex.items.setdefault(config, []).extend(recs)
    return ex


def commits_of(commits: Mapping[int, str]) -> str:
    """A configuration's commits with their seeds, short hashes.

    >>> commits_of({0: "a" * 40, 1: "a" * 40, 2: "b" * 40 + "+dirty"})
    'aaaaaaaaaaaa (0,1), bbbbbbbbbbbb+dirty (2)'
    >>> commits_of({0: "unrecorded"})
    'unrecorded (0)'
    """
    by: dict[str, list[int]] = defaultdict(list)
    for seed, c in sorted(commits.items()):
        head, plus, rest = c.partition("+")
        by[(head[:12] if c != UNRECORDED else c) + plus + rest].append(seed)
    return ", ".join(f"{c} ({','.join(map(str, s))})" for c, s in by.items())


def same_code(a: Mapping[int, str], b: Mapping[int, str]) -> str:
    """Did both arms run on one commit? 'one commit', 'DIFFERENT commits' or 'unrecorded'.

    >>> same_code({0: "x"}, {0: "x", 1: "x"}), same_code({0: "x"}, {0: "y"})
    ('one commit', 'DIFFERENT commits')
    >>> same_code({0: "x"}, {0: "unrecorded"})
    'unrecorded'
    """
    every = set(a.values()) | set(b.values())
    if UNRECORDED in every:
        return UNRECORDED
    return "one commit" if len(every) == 1 else "DIFFERENT commits"


def best_lone(cumulative: Mapping[str, Mapping[Key, float]], lone: Sequence[str]) -> str | None:
    """The lone arm with the higher mean cumulative reward per node (None: no lone arm).

    >>> best_lone({"none": {(0, 0): 2.0}, "self-replay": {(0, 0): 3.0}}, ("none", "self-replay"))
    'self-replay'
    """
    present = [n for n in lone if cumulative.get(n)]
    if not present:
        return None
    return max(present, key=lambda n: sum(cumulative[n].values()) / len(cumulative[n]))


def _p(d: Any) -> str:
    return f"{d.p:.3f} ({d.relabellings}{'' if d.exact else ' random'})"


def _units_cell(n: str, ref: str, lone: Collection[str], d: Any) -> str:
    def kind(name: str, k: int) -> str:
        return f"{k} {'node' if name in lone else 'swarm'}{'s' if k != 1 else ''}"

    return f"{kind(n, d.units_a)} / {kind(ref, d.units_b)}"


def _item_cell(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> str:
    if not a or not b:
        return "— (no item records)"
    d = item_diff(item_accuracy(a), item_accuracy(b))
    how = "paired" if d.paired else "unpaired"
    return f"{d.diff * 100:+.1f} [{d.lo * 100:+.1f}, {d.hi * 100:+.1f}] ({d.items} {how})"


def comparison_table(
    ref: str,
    names: Sequence[str],
    cumulative: Mapping[str, Mapping[Key, float]],
    accuracy: Mapping[str, Mapping[Key, float]],
    ex: Extras,
    lone: Collection[str],
) -> list[str]:
    """Every other configuration against ``ref``, units as sapo_stats.units makes them."""
    lines = [
        "",
        f"Against {ref}, swarms as the unit (a sharing arm's unit: one swarm, the mean of "
        "its nodes; a lone arm's: one node). Difference of the units' means, [95% cluster "
        "bootstrap, units resampled within each arm], two-sided permutation p (over how many "
        "relabellings of the pooled units; 'random': seeded Monte Carlo). Held-out: strict "
        "accuracy in points, by unit and by item (item bootstrap over the per-item records). "
        "With 1-3 units an arm's bootstrap is too narrow (one unit: no spread at all); the "
        "permutation p is the safer guide. code: whether both arms ran on one commit.",
        "",
        f"| config | units (arm / {ref}) | cumulative reward per node, difference | "
        "relative | p | held-out points, by unit | p | held-out points, by item | code |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for n in names:
        if n == ref or not cumulative.get(ref):
            continue
        c = unit_diff(units(cumulative[n], n not in lone), units(cumulative[ref], ref not in lone))
        h = unit_diff(
            units(accuracy.get(n, {}), n not in lone), units(accuracy.get(ref, {}), ref not in lone)
        )
        lines.append(
            f"| {n} | {_units_cell(n, ref, lone, c)} | {c.diff:+.2f} [{c.lo:+.2f}, {c.hi:+.2f}] "
            f"| {c.rel:+.1%} [{c.rel_lo:+.1%}, {c.rel_hi:+.1%}] | {_p(c)} "
            f"| {h.diff * 100:+.1f} [{h.lo * 100:+.1f}, {h.hi * 100:+.1f}] | {_p(h)} "
            f"| {_item_cell(ex.items.get(n, []), ex.items.get(ref, []))} "
            f"| {same_code(ex.commits.get(n, {}), ex.commits.get(ref, {}))} |"
        )
    return lines + dataset_table(ref, names, ex, lone) + specialty_table(ref, names, ex, lone)


def dataset_table(ref: str, names: Sequence[str], ex: Extras, lone: Collection[str]) -> list[str]:
    """Per dataset, held-out strict accuracy against ``ref`` (metrics.jsonl has no
    per-dataset reward): by unit (heldout.json's per_dataset) and by item."""
    mine = ex.per_dataset.get(ref, {})
    if not mine:
        return []
    lines = [
        "",
        f"Per dataset, against {ref}: metrics.jsonl carries no per-dataset reward, so this "
        "is held-out strict accuracy only: by unit from each node's heldout.json "
        "per_dataset (units, interval and p as above), by item from the item records.",
        "",
        f"| config | dataset | held-out accuracy (arm / {ref}) | points vs {ref}, by unit "
        "| p | points, by item |",
        "|---|---|---|---|---|---|",
    ]
    for n in names:
        for label, theirs in sorted(ex.per_dataset.get(n, {}).items()):
            if n == ref or label not in mine:
                continue
            d = unit_diff(units(theirs, n not in lone), units(mine[label], ref not in lone))
            pick = [r for r in ex.items.get(n, []) if r["dataset"] == label]
            base = [r for r in ex.items.get(ref, []) if r["dataset"] == label]
            # a dataset named twice in the mix is labelled name#k; records carry the name
            by_item = "— (named twice in the mix)" if "#" in label else _item_cell(pick, base)
            lines.append(
                f"| {n} | {label} | {d.mean_a:.3f} / {d.mean_b:.3f} "
                f"| {d.diff * 100:+.1f} [{d.lo * 100:+.1f}, {d.hi * 100:+.1f}] | {_p(d)} "
                f"| {by_item} |"
            )
    return lines


def specialty_table(ref: str, names: Sequence[str], ex: Extras, lone: Collection[str]) -> list[str]:
    """With nodes of different specialties: held-out strict accuracy on each node's own
    datasets and on the other nodes' against ``ref``, by unit and by item (an item is
    'own' for the nodes whose specialty its dataset is; arms share the node layout)."""
    mine = ex.specialty.get(ref, {})
    if not mine:
        return []
    lines = [
        "",
        f"Nodes of different specialties, against {ref}: held-out strict accuracy on each "
        "node's own datasets (top weight in its mix) and on the other nodes' datasets, by "
        "unit and by item (units, interval and p as above).",
        "",
        f"| config | held-out on | accuracy (arm / {ref}) | points vs {ref}, by unit | p "
        "| points, by item |",
        "|---|---|---|---|---|---|",
    ]
    for n in names:
        theirs = ex.specialty.get(n, {})
        for part, own in (("own", True), ("others", False)):
            if n == ref or part not in theirs or part not in mine:
                continue
            d = unit_diff(units(theirs[part], n not in lone), units(mine[part], ref not in lone))
            pick = [r for r in ex.items.get(n, []) if r.get("own") is own]
            base = [r for r in ex.items.get(ref, []) if r.get("own") is own]
            label = "own specialty" if own else "the others' datasets"
            lines.append(
                f"| {n} | {label} | {d.mean_a:.3f} / {d.mean_b:.3f} "
                f"| {d.diff * 100:+.1f} [{d.lo * 100:+.1f}, {d.hi * 100:+.1f}] | {_p(d)} "
                f"| {_item_cell(pick, base)} |"
            )
    return lines


def effort(rows: Sequence[Mapping[str, Any]], name: str) -> dict[str, float]:
    """Per node of one arm (means): what its updates did and what they cost.

    >>> rows = [{"config": "x", "seed": 0, "node": 0, "round": k, "groups_trained": g,
    ...          "tokens_trained": 10 * g, "tokens_masked": g, "replay_groups": 0,
    ...          "external_groups": 0, "tokens_generated": 7, "compute_s": 2.0 * k,
    ...          "reward": 0.5} for k, g in ((1, 0), (2, 3))]
    >>> e = effort(rows, "x")
    >>> e["steps"], e["groups"], e["tokens_net"], e["compute_s"], e["cumulative"]
    (1.0, 3.0, 27.0, 4.0, 1.0)
    """
    mine = [r for r in rows if r["config"] == name]
    nodes = {(r["seed"], r["node"]) for r in mine}
    k = max(1, len(nodes))
    total: dict[str, float] = defaultdict(float)
    last: dict[Key, float] = {}
    for r in mine:
        total["steps"] += r["groups_trained"] > 0
        total["groups"] += r["groups_trained"]
        total["replayed"] += r.get("replay_groups", 0)
        total["external"] += r["external_groups"]
        total["tokens"] += r["tokens_trained"]
        total["masked"] += r.get("tokens_masked", 0)
        total["generated"] += r["tokens_generated"]
        total["cumulative"] += r["reward"]
        key = (r["seed"], r["node"])
        last[key] = max(last.get(key, 0.0), r["compute_s"])
    out = {key: v / k for key, v in total.items()}
    out["tokens_net"] = out["tokens"] - out["masked"]
    out["compute_s"] = sum(last.values()) / k
    out["nodes"] = float(len(nodes))
    return out


def reward_within(rows: Sequence[Mapping[str, Any]], name: str, budget: float) -> float:
    """Mean per node of the cumulative reward over the rounds done within ``budget``
    compute seconds (rows carry cumulative compute_s).

    >>> rows = [{"config": "x", "seed": 0, "node": 0, "compute_s": c, "reward": 1.0}
    ...         for c in (1.0, 2.0, 3.0)]
    >>> reward_within(rows, "x", 2.5)
    2.0
    """
    per: dict[Key, float] = defaultdict(float)
    for r in rows:
        if r["config"] == name:
            per[(r["seed"], r["node"])] += r["reward"] if r["compute_s"] <= budget else 0.0
    return sum(per.values()) / len(per) if per else 0.0


def effort_table(
    rows: Sequence[Mapping[str, Any]],
    names: Sequence[str],
    accuracy: Mapping[str, Mapping[Key, float]],
) -> list[str]:
    """Equal-effort views: per arm and per node, the work its updates did, the compute
    it took, and reward at the compute every arm reached."""
    figures = {n: effort(rows, n) for n in names}
    budget = min((f["compute_s"] for f in figures.values()), default=0.0)
    lines = [
        "",
        "Equal effort, per node (means): optimizer steps = rounds whose update trained >= 1 "
        "group; tokens trained = every completion token of the trained groups (metrics "
        "tokens_trained) less those masked out of the loss (tokens_masked: peers' and "
        "replayed negatives not trained, peers' unlikely negative tokens); compute = "
        "generation + update seconds. Held-out accuracy is measured once, after the last "
        f"round; reward at equal compute sums the rounds done within {budget:.0f} compute s "
        "(the least any arm spent).",
        "",
        "| config | nodes | optimizer steps | groups trained (replayed / from peers) | tokens "
        "trained - masked = trained | tokens generated | compute s | cumulative reward "
        f"| reward per 1000 compute s | cumulative reward within {budget:.0f} compute s "
        "| held-out accuracy |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for n in names:
        f = figures[n]
        acc = accuracy.get(n, {})
        held = f"{sum(acc.values()) / len(acc):.3f}" if acc else "—"
        per_k = 1000 * f["cumulative"] / f["compute_s"] if f["compute_s"] else 0.0
        lines.append(
            f"| {n} | {f['nodes']:.0f} | {f['steps']:.1f} | {f['groups']:.1f} "
            f"({f['replayed']:.1f} / {f['external']:.1f}) | {f['tokens']:.0f} - "
            f"{f['masked']:.0f} = {f['tokens_net']:.0f} | {f['generated']:.0f} "
            f"| {f['compute_s']:.0f} | {f['cumulative']:.2f} | {per_k:.2f} "
            f"| {reward_within(rows, n, budget):.2f} | {held} |"
        )
    return lines


def commit_table(names: Sequence[str], ex: Extras) -> list[str]:
    """The commit(s) each configuration's runs ran on, with their seeds."""
    lines = ["", "| config | code its runs ran on (seeds) |", "|---|---|"]
    return lines + [f"| {n} | {commits_of(ex.commits.get(n, {}))} |" for n in names]


def unit_sections(
    rows: Sequence[Mapping[str, Any]],
    names: Sequence[str],
    cumulative: Mapping[str, Mapping[Key, float]],
    accuracy: Mapping[str, Mapping[Key, float]],
    ex: Extras,
    lone: Sequence[str],
) -> list[str]:
    """results.md's added sections: against none and against the better lone arm,
    equal effort, and the code each configuration ran on."""
    lines: list[str] = []
    if len(names) > 1 and cumulative.get("none"):
        lines += comparison_table("none", names, cumulative, accuracy, ex, lone)
    better = best_lone(cumulative, lone)
    if better:
        where = " (the comparison above)" if better == "none" and len(names) > 1 else ""
        lines += ["", f"The better lone arm by mean cumulative reward per node: {better}{where}."]
    if better and better != "none" and len(names) > 1:
        lines += comparison_table(better, names, cumulative, accuracy, ex, lone)
    return lines + effort_table(rows, names, accuracy) + commit_table(names, ex)

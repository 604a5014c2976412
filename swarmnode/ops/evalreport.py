"""``swarmnode eval``'s report: the text, the side by side with the base, the saved result.

- ``paired_difference``: the trained policy against the untrained base on the same
  held-out items, item by item (strict score: 1 for a fully right answer, else 0),
  with a 95% percentile bootstrap interval of the mean difference.
- ``format_eval``: the lines ``swarmnode eval`` prints.
- ``save_eval`` / ``load_eval``: ``<data_dir>/eval/round-NNNNNN.json``, the last eval
  of each checkpoint round, which ``swarmnode export`` puts in the model card.

Invariants:
- Items pair by (dataset, config, seed, index): the same item scored twice. Items
  only one side has are counted as ``unpaired``, never paired with another item.
- The bootstrap is seeded: the same records give the same interval.
- A result file is written whole (temporary file, then rename); a missing,
  unreadable or foreign file reads as "no eval was run".
"""

from __future__ import annotations

import json
import os
import random
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

RESAMPLES = 2000


def item_key(record: Mapping[str, Any]) -> tuple[str, str, int, int]:
    """The identity of a held-out item in an eval record."""
    config = json.dumps(record.get("config", {}), sort_keys=True)
    return (str(record["dataset"]), config, int(record["seed"]), int(record["index"]))


def bootstrap_interval(
    diffs: Sequence[float], resamples: int = RESAMPLES, seed: int = 0
) -> tuple[float, float]:
    """95% percentile bootstrap interval of the mean of ``diffs``.

    >>> bootstrap_interval([1.0] * 10)
    (1.0, 1.0)
    >>> lo, hi = bootstrap_interval([1.0, 0.0] * 20); lo < 0.5 < hi
    True
    """
    if not diffs:
        return (0.0, 0.0)
    rng = random.Random(seed)
    n = len(diffs)
    means = sorted(sum(rng.choices(diffs, k=n)) / n for _ in range(resamples))
    return (means[int(0.025 * resamples)], means[int(0.975 * resamples) - 1])


def paired_difference(
    trained: Sequence[Mapping[str, Any]], base: Sequence[Mapping[str, Any]]
) -> dict[str, Any]:
    """Trained minus base strict score over the items both scored (see module doc).

    >>> t = [{"dataset": "d", "seed": 9, "index": i, "score": 1.0} for i in range(3)]
    >>> b = [{"dataset": "d", "seed": 9, "index": i, "score": s} for i, s in enumerate([1, 0, .5])]
    >>> r = paired_difference(t, b)
    >>> r["items"], r["difference"], r["better"], r["worse"]
    (3, 0.667, 2, 0)
    """
    ts = {item_key(r): 1.0 if float(r["score"]) >= 1.0 else 0.0 for r in trained}
    bs = {item_key(r): 1.0 if float(r["score"]) >= 1.0 else 0.0 for r in base}
    common = sorted(ts.keys() & bs.keys())
    diffs = [ts[k] - bs[k] for k in common]
    per: dict[str, list[float]] = {}
    for k, d in zip(common, diffs, strict=True):
        per.setdefault(k[0], []).append(d)
    lo, hi = bootstrap_interval(diffs)
    n = len(diffs)
    return {
        "items": n,
        "unpaired": len(ts.keys() ^ bs.keys()),
        "trained": round(sum(ts[k] for k in common) / n, 3) if n else 0.0,
        "base": round(sum(bs[k] for k in common) / n, 3) if n else 0.0,
        "difference": round(sum(diffs) / n, 3) if n else 0.0,
        "interval": [round(lo, 3), round(hi, 3)],
        "better": sum(d > 0 for d in diffs),
        "worse": sum(d < 0 for d in diffs),
        "per_dataset": {name: round(sum(v) / len(v), 3) for name, v in sorted(per.items())},
    }


def compare(trained: Mapping[str, Any], base: Mapping[str, Any]) -> dict[str, Any] | None:
    """The paired difference of two ``evaluate`` results, or None when either lacks
    per-item ``records``."""
    a, b = trained.get("records"), base.get("records")
    if not isinstance(a, list) or not isinstance(b, list):
        return None
    return paired_difference(a, b)


def _signed(x: float) -> str:
    return f"{x:+.3f}"


def format_eval(
    result: Mapping[str, Any],
    base: Mapping[str, Any] | None = None,
    paired: Mapping[str, Any] | None = None,
) -> list[str]:
    """The lines ``swarmnode eval`` prints (with ``base``: two columns and the paired
    difference)."""
    vs = " against the untrained base" if base is not None else ""
    lines = [
        f"checkpoint round {result['round']}{vs}, {result['items']} held-out items, strict "
        f"accuracy (score 1.0); {result['seen_in_training']:.0%} of the questions also "
        "occur in training"
    ]
    base_per = base["per_dataset"] if base is not None else {}
    if base is not None:
        lines.append(f"  {'dataset':<28} {'trained':>7}  {'base':>7}")
    for name, d in sorted(result["per_dataset"].items()):
        flag = "  COLLAPSED: one answer for most items" if d["collapsed"] else ""
        if base is None:
            lines.append(
                f"  {name:<28} {d['accuracy']:.3f}  (mean score {d['mean_score']:.3f}){flag}"
            )
            continue
        b = base_per.get(name)
        shown = f"{b['accuracy']:7.3f}" if b else f"{'-':>7}"
        lines.append(f"  {name:<28} {d['accuracy']:7.3f}  {shown}{flag}")
    lo, hi = result["interval"]
    overall = f"  {'all (95% interval)':<28} {result['accuracy']:.3f}  ({lo:.3f}-{hi:.3f})"
    if base is not None:
        blo, bhi = base["interval"]
        overall += f"  base {base['accuracy']:.3f}  ({blo:.3f}-{bhi:.3f})"
    lines.append(overall)
    if base is not None:
        lines.append(paired_line(paired))
    return lines


def paired_line(paired: Mapping[str, Any] | None) -> str:
    """One line: the paired difference and its interval (or why there is none)."""
    if paired is None:
        return "  paired difference: not available (the eval result has no per-item records)"
    lo, hi = paired["interval"]
    return (
        f"  paired difference, trained - base: {_signed(paired['difference'])} "
        f"(95% bootstrap {_signed(lo)} to {_signed(hi)}); better on {paired['better']}, "
        f"worse on {paired['worse']} of {paired['items']} items"
    )


def eval_path(data_dir: Path, round_index: int) -> Path:
    return data_dir / "eval" / f"round-{round_index:06d}.json"


def save_eval(
    data_dir: Path,
    result: Mapping[str, Any],
    base: Mapping[str, Any] | None,
    paired: Mapping[str, Any] | None,
) -> Path:
    """Write the eval of checkpoint ``result['round']``; return the file."""
    path = eval_path(data_dir, int(result["round"]))
    path.parent.mkdir(parents=True, exist_ok=True)
    record = {"time": time.time(), "trained": result, "base": base, "paired": paired}
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(record, indent=1), encoding="utf-8")
    tmp.replace(path)
    return path


def load_eval(data_dir: Path, round_index: int) -> dict[str, Any] | None:
    """The saved eval of that checkpoint round, or None when none was run."""
    try:
        record = json.loads(eval_path(data_dir, round_index).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    trained = record.get("trained") if isinstance(record, dict) else None
    if not isinstance(trained, dict) or trained.get("round") != round_index:
        return None
    return record

"""Per-round metrics: one JSON line per round in ``<data_dir>/metrics.jsonl``.

Invariants:
- A line is written and flushed as soon as its round ends, so ``tail -f`` and a
  crash both see every finished round; lines are appended, never rewritten.
- The record's keys are stable (others may be added, none renamed): round, time,
  reward_mean, accuracy, format_reward, groups_trained, groups_skipped,
  gen_seconds, train_seconds, tokens_generated, ...
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from swarmnode.groups import RolloutGroup


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs) if xs else 0.0


def reward_summary(groups: Sequence[RolloutGroup], format_weight: float) -> dict[str, float]:
    """reward_mean (what training sees), accuracy (task score only), format_reward."""
    rewards = [r for g in groups for r in g.rewards]
    fmt = [f for g in groups for f in (g.format_rewards or [0.0] * len(g.rewards))]
    acc = [r - format_weight * f for r, f in zip(rewards, fmt, strict=True)]
    return {
        "reward_mean": round(_mean(rewards), 6),
        "accuracy": round(_mean(acc), 6),
        "format_reward": round(_mean(fmt), 6),
    }


class MetricsLog:
    """Append-only JSONL writer."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._file: IO[str] = path.open("a", encoding="utf-8")

    def write(self, record: dict[str, Any]) -> None:
        record = {"time": round(time.time(), 3), **record}
        self._file.write(json.dumps(record, separators=(",", ":")) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """All records of a metrics file (a torn last line is ignored)."""
    out: list[dict[str, Any]] = []
    if not path.is_file():
        return out
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out


def moving_average(xs: Sequence[float], window: int) -> list[float]:
    """Mean of the last ``window`` values at each position (fewer at the start).

    >>> moving_average([1.0, 3.0, 5.0], 2)
    [1.0, 2.0, 4.0]
    """
    out, total = [], 0.0
    for i, x in enumerate(xs):
        total += x
        if i >= window:
            total -= xs[i - window]
        out.append(total / min(i + 1, window))
    return out


def progress_line(rec: dict[str, Any]) -> str:
    """The human summary printed per round."""
    return (
        f"round {rec['round']:>5}  reward {rec['reward_mean']:.3f}  acc {rec['accuracy']:.3f}"
        f"  groups {rec['groups_trained']}/{rec['groups_trained'] + rec['groups_skipped']}"
        f"  gen {rec['gen_seconds']:.1f}s  train {rec['train_seconds']:.1f}s"
        f"  tok {rec['tokens_generated']}"
    )

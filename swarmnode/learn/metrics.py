"""Per-round metrics: one ``RoundRecord`` per round, a JSON line in ``<data_dir>/metrics.jsonl``.

Also ``<data_dir>/trained_items.jsonl``: one line per group trained on (``trained_items``),
so anyone can check which questions a node, or a whole swarm, has trained on.

Role: the round record's type, its file, and the reader every consumer uses
(``swarmnode status`` via the node, ``report``, the scripts).

Invariants:
- A line is written and flushed as soon as its round ends, so ``tail -f`` and a
  crash both see every finished round; lines are appended, never rewritten, but
  once, when a node resumes: lines of rounds after the checkpoint it restored (an
  attempt the restore undid: it was stopped before saving them) move to
  ``<name>.undone.jsonl`` (``JsonLines.rewind``), so each round appears once and a
  resumed run's files read like an uninterrupted one's.
- The line's keys are ``RoundRecord``'s field names: fields may be added, none
  renamed. ``read_rounds`` reads older files too: unknown keys are ignored, missing
  ones take their defaults (0: a node training alone has no network figures).
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from swarmnode.learn.groups import RolloutGroup


def _now() -> float:
    return round(time.time(), 3)


@dataclass(frozen=True, kw_only=True)
class RoundRecord:
    """What one finished round did (one line of metrics.jsonl)."""

    round: int
    time: float = field(default_factory=_now)  # unix seconds, when the round ended
    # The round's own rollouts (before any sampling).
    reward_mean: float = 0.0  # what training sees (task score + weighted format reward)
    accuracy: float = 0.0  # the task score alone
    format_reward: float = 0.0
    gen_seconds: float = 0.0
    tokens_generated: int = 0
    # The update.
    groups_trained: int = 0
    groups_skipped: int = 0  # no signal, or stopped before their micro-batch
    train_seconds: float = 0.0  # composing the batch + the GRPO step
    tokens_trained: int = 0
    tokens_masked: int = 0
    is_weighted: int = 0  # peers' completions trained with an importance weight
    is_weight_mean: float | None = None  # their mean weight (None: none weighted)
    loss: float = 0.0
    kl: float = 0.0
    grad_norm: float = 0.0
    # The batch's composition (SwarmSampler).
    local_groups: int = 0
    external_groups: int = 0
    external_peers: int = 0
    external_shortfall: int = 0  # external slots nobody could fill
    external_by_peer: dict[str, int] = field(default_factory=dict)  # peer -> groups trained on
    replay_groups: int = 0  # own past groups replayed into empty slots (sapo.self_replay)
    completed_groups: int = 0  # no-signal local groups completed with peers' answers
    completions_cut: int = 0  # peers' completions cut to rollout.max_new_tokens (total)
    local_signal: int = 0  # this round's own groups with signal (before completion)
    levels: dict[str, int] = field(default_factory=dict)  # curriculum: "k:dataset" -> level
    collapsed: list[str] = field(default_factory=list)  # datasets answered by one constant
    # The network side, after the round (zeros for a node training alone).
    published_bytes: int = 0
    queue_groups: int = 0
    queue_bytes: int = 0
    ingest_accepted: int = 0  # totals since start
    ingest_rejected: dict[str, int] = field(default_factory=dict)  # reason -> total
    peers: int = 0
    mesh: int = 0
    msgs_in: int = 0
    msgs_out: int = 0
    msgs_rejected: int = 0
    ingest_time_share: float = 0.0  # share of the last 30 s spent verifying peers' groups
    rss_mb: float = 0.0  # the process's resident memory after the round, MiB (0: not measured)

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RoundRecord:
        """A record from a metrics line or a status reply (unknown keys ignored)."""
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


def rss_mb() -> float:
    """This process's resident memory now, in MiB (where /proc is missing: the peak)."""
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
        return round(pages * os.sysconf("SC_PAGE_SIZE") / 2**20, 1)
    except (OSError, ValueError, IndexError):
        import resource

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB; bytes on macOS
        return round(peak / (2**20 if sys.platform == "darwin" else 1024), 1)


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs) if xs else 0.0


def reward_summary(
    groups: Sequence[RolloutGroup], format_weight: float
) -> tuple[float, float, float]:
    """(reward_mean, accuracy, format_reward) of a round's groups, rounded for the log.

    reward_mean is what training sees; accuracy is the task score alone."""
    rewards = [r for g in groups for r in g.rewards]
    fmt = [f for g in groups for f in (g.format_rewards or [0.0] * len(g.rewards))]
    acc = [r - format_weight * f for r, f in zip(rewards, fmt, strict=True)]
    return round(_mean(rewards), 6), round(_mean(acc), 6), round(_mean(fmt), 6)


class JsonLines:
    """Append-only JSON-lines writer: each line written and flushed at once."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._file: IO[str] = path.open("a", encoding="utf-8")

    def append(self, obj: dict[str, Any]) -> None:
        self._file.write(json.dumps(obj, separators=(",", ":")) + "\n")
        self._file.flush()

    @property
    def undone_path(self) -> Path:
        """Where ``rewind`` moves the lines of undone rounds: ``<stem>.undone.jsonl``."""
        return self.path.with_suffix(".undone.jsonl")

    def rewind(self, last_round: int) -> int:
        """Move the lines of rounds after ``last_round`` to ``<stem>.undone.jsonl``
        (appended there, oldest first); the file is replaced atomically and reopened.
        Lines without a round, or that do not parse, stay. Returns the lines moved."""
        keep: list[str] = []
        undone: list[str] = []
        for line in self.path.read_text(encoding="utf-8").splitlines():
            try:
                rnd = json.loads(line).get("round")
            except (json.JSONDecodeError, AttributeError):
                rnd = None
            (undone if isinstance(rnd, int) and rnd > last_round else keep).append(line)
        if not undone:
            return 0
        with self.undone_path.open("a", encoding="utf-8") as f:
            f.writelines(line + "\n" for line in undone)
            f.flush()
            os.fsync(f.fileno())
        self._file.close()
        tmp = self.path.with_suffix(".jsonl.tmp")
        tmp.write_text("".join(line + "\n" for line in keep), encoding="utf-8")
        os.replace(tmp, self.path)
        self._file = self.path.open("a", encoding="utf-8")
        return len(undone)

    def close(self) -> None:
        self._file.close()


class MetricsLog(JsonLines):
    """Append-only JSONL writer of round records (``metrics.jsonl``)."""

    def write(self, record: RoundRecord) -> None:
        self.append(record.to_json())


def trained_items(round_index: int, groups: Sequence[RolloutGroup]) -> list[dict[str, Any]]:
    """Lines of ``trained_items.jsonl``: one per group of an update that carried signal
    (the ones trained on): round, source (``local``, ``replay`` or the peer id) and the
    item (dataset, config with its size, seed, index). A resumed node may repeat the
    few rounds after its last checkpoint: the last line of a (round, item) counts."""
    return [
        {
            "round": round_index,
            "source": g.origin,
            "dataset": g.ref.dataset,
            "config": g.ref.config,
            "seed": g.ref.seed,
            "index": g.ref.index,
        }
        for g in groups
        if g.has_signal
    ]


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """All lines of a metrics file as raw dicts (a torn last line is ignored)."""
    out: list[dict[str, Any]] = []
    if not path.is_file():
        return out
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(rec, dict) and "round" in rec:
            out.append(rec)
    return out


def read_rounds(path: Path) -> list[RoundRecord]:
    """All round records of a metrics file, oldest first."""
    return [RoundRecord.from_json(d) for d in read_metrics(path)]


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


def progress_line(rec: RoundRecord, in_swarm: bool) -> str:
    """The human summary printed per round."""
    line = (
        f"round {rec.round:>5}  reward {rec.reward_mean:.3f}  acc {rec.accuracy:.3f}"
        f"  groups {rec.groups_trained}/{rec.groups_trained + rec.groups_skipped}"
        f"  gen {rec.gen_seconds:.1f}s  train {rec.train_seconds:.1f}s"
        f"  tok {rec.tokens_generated}"
    )
    if in_swarm:
        line += (
            f"  ext {rec.external_groups} from {rec.external_peers}p"
            f"  queue {rec.queue_groups}  peers {rec.peers}"
        )
    return line

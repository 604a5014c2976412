"""The curriculum: each dataset moves between its difficulty levels by recent accuracy.

A node alone saturates on easy tasks (most groups then carry no signal and it
generates for nothing) and learns nothing on tasks too hard for it. Each dataset of
the mix has levels (``DatasetSpec.levels``, level 0 = ``config``); after every round
the node's own completions of each dataset are judged strictly (right = task score
1.0), and when the last ``window`` of them reach ``promote_at`` the dataset moves one
level up, when they fall to ``demote_at`` one level down. The window restarts after
a move, so a decision always looks at one level only.

Invariants:
- Only the node's own groups count (peers' groups are at their own levels), and only
  items of a dataset's current level.
- Item references carry the exact config of their level, so peers regenerate and
  verify them; the ingestion catalog accepts every level of every dataset.
- Levels are part of the round record (``RoundRecord.levels``): a restarted node
  resumes at the levels of the round its checkpoint holds.
- Held-out evaluation stays at level 0, so accuracy compares across runs.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Mapping, Sequence

from swarmnode.config import CurriculumConfig
from swarmnode.learn.groups import RolloutGroup
from swarmnode.learn.tasks import TaskMix

log = logging.getLogger(__name__)


def level_key(mix: TaskMix, k: int) -> str:
    """The name of dataset k in ``RoundRecord.levels``: its index and name."""
    return f"{k}:{mix.datasets[k]}"


class Curriculum:
    """Moves the levels of a ``TaskMix`` (see module docstring)."""

    def __init__(self, cfg: CurriculumConfig, mix: TaskMix, format_weight: float) -> None:
        self.cfg = cfg
        self.mix = mix
        self.format_weight = format_weight
        self.recent: list[deque[bool]] = [deque(maxlen=cfg.window) for _ in mix.datasets]

    def levels(self) -> dict[str, int]:
        return {level_key(self.mix, k): lvl for k, lvl in enumerate(self.mix.levels)}

    def restore(self, levels: Mapping[str, int]) -> None:
        """Set levels from a round record (unknown or out-of-range entries are ignored)."""
        for k in range(len(self.mix.datasets)):
            lvl = levels.get(level_key(self.mix, k))
            if isinstance(lvl, int) and 0 <= lvl < len(self.mix.level_configs[k]):
                self.mix.levels[k] = lvl

    def observe(self, groups: Sequence[RolloutGroup]) -> list[str]:
        """Judge this round's own groups; move levels; return the moves made."""
        for g in groups:
            k = self.mix.dataset_of(g.ref) if g.is_local else None
            if k is None:
                continue
            fmt = g.format_rewards or [0.0] * len(g.rewards)
            for r, f in zip(g.rewards, fmt, strict=True):
                self.recent[k].append(r - self.format_weight * f >= 1.0 - 1e-9)
        moves = []
        for k, window in enumerate(self.recent):
            if len(window) < self.cfg.window:
                continue
            acc = sum(window) / len(window)
            top = len(self.mix.level_configs[k]) - 1
            lvl = self.mix.levels[k]
            step = 1 if acc >= self.cfg.promote_at and lvl < top else 0
            step = -1 if acc <= self.cfg.demote_at and lvl > 0 else step
            if step:
                self.mix.levels[k] = lvl + step
                window.clear()
                moves.append(f"{level_key(self.mix, k)} {lvl} -> {lvl + step} (acc {acc:.2f})")
        for m in moves:
            log.info("curriculum: %s", m)
        return moves

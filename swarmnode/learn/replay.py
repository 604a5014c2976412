"""Self-replay: a node's own past groups that carried signal, for the slots it can't fill.

A node alone finds a group with signal in only some rounds; its update then holds
fewer groups than the budget a sharing node fills with its peers' groups. Self-replay
is the strongest lone-node answer: keep the node's own recent groups that had signal
and fill the update's empty slots with them, trained exactly as a peer's group is
under ``train.external_negatives: false`` (only the completions that beat their
group's mean; ``grpo.TokenizedGroup.replay``). It is also the control that matches a
sharing node in update volume and optimizer steps.

Invariants:
- Bounded: at most ``size`` groups; when full the oldest is dropped (and counted).
- Only local groups with signal enter (``RolloutGroup.has_signal``); a group enters
  once, after the round that made it has composed its update, so a round never
  replays its own groups.
- A group is replayed at most ``uses`` times and never after ``freshness_s`` (the
  same window peers' groups live in), then it leaves.
- ``draw`` never returns two groups of one item, nor an item already in the update.
- Deterministic given the rng, the buffer's content and its clock.
"""

from __future__ import annotations

import random
import time
from collections import OrderedDict
from collections.abc import Callable, Collection, Sequence
from dataclasses import replace

from swarmnode.learn.groups import REPLAY, RolloutGroup


class ReplayBuffer:
    """The node's own groups with signal, replayed into empty update slots."""

    def __init__(
        self,
        size: int,
        uses: int,
        freshness_s: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if size < 1 or uses < 1:
            raise ValueError("size and uses must be >= 1")
        self.size, self.uses, self.freshness_s, self.clock = size, uses, freshness_s, clock
        self._groups: OrderedDict[int, tuple[RolloutGroup, int]] = OrderedDict()  # id -> uses left
        self._next = 0
        self.dropped = 0  # pushed out by newer groups before their uses ran out
        self.expired = 0  # older than freshness_s before their uses ran out

    def __len__(self) -> int:
        return len(self._groups)

    def add(self, groups: Sequence[RolloutGroup]) -> int:
        """Keep this round's local groups that carry signal; returns how many entered."""
        n = 0
        for g in groups:
            if not (g.is_local and g.has_signal):
                continue
            self._groups[self._next] = (replace(g, origin=REPLAY), self.uses)
            self._next += 1
            n += 1
            if len(self._groups) > self.size:
                self._groups.popitem(last=False)
                self.dropped += 1
        return n

    def draw(self, rng: random.Random, n: int, exclude: Collection[str] = ()) -> list[RolloutGroup]:
        """Up to ``n`` groups of distinct items, none whose ``ref.key`` is in ``exclude``."""
        self._expire()
        if n <= 0:
            return []
        keys = set(exclude)
        pool = list(self._groups)
        rng.shuffle(pool)
        out: list[RolloutGroup] = []
        for gid in pool:
            if len(out) >= n:
                break
            group, left = self._groups[gid]
            if group.ref.key in keys:
                continue
            keys.add(group.ref.key)
            out.append(group)
            if left <= 1:
                del self._groups[gid]
            else:
                self._groups[gid] = (group, left - 1)
        return out

    def _expire(self) -> None:
        cutoff = self.clock() - self.freshness_s
        for gid in [k for k, (g, _) in self._groups.items() if g.created < cutoff]:
            del self._groups[gid]
            self.expired += 1

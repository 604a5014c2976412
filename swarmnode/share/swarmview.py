"""The swarm as this node sees it, from what gossip already carries (no central server).

Role: ``PeerBook`` keeps, per peer that sent us groups, its claimed mean reward per
round (the ``rewards`` field of the wire format: informational, unverified), its model
name, when we last heard from it, and how many of its groups our ingestion accepted or
rejected. The dashboard's swarm view and ``/metrics`` read ``snapshot``.

Invariants:
- Bounded: at most ``MAX_PEERS`` peers (the one heard from least recently is dropped
  first) and ``MAX_ROUNDS`` claimed rewards per peer (oldest dropped first).
- Written and read on the event loop only (the ingest pump, the HTTP handlers), so it
  needs no lock.
- Claims are shown as claims: nothing here feeds training or peer scores.
"""

from __future__ import annotations

import time
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from swarmnode.learn.groups import RolloutGroup

MAX_PEERS = 256
MAX_ROUNDS = 200


@dataclass
class PeerRecord:
    """One peer as seen through gossip."""

    model: str = ""
    last_seen: float = 0.0  # unix seconds
    claimed: deque[tuple[int, float]] = field(default_factory=lambda: deque(maxlen=MAX_ROUNDS))
    groups_offered: int = 0
    groups_accepted: int = 0

    @property
    def groups_rejected(self) -> int:
        return self.groups_offered - self.groups_accepted


class PeerBook:
    """Per-peer claims and verdicts, bounded (see the module docstring)."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self._peers: OrderedDict[str, PeerRecord] = OrderedDict()

    def _record(self, peer: str) -> PeerRecord:
        rec = self._peers.pop(peer, None) or PeerRecord()
        self._peers[peer] = rec  # most recently heard from last
        while len(self._peers) > MAX_PEERS:
            self._peers.popitem(last=False)
        rec.last_seen = self.clock()
        return rec

    def heard(self, peer: str, round_index: int, groups: Sequence[RolloutGroup]) -> None:
        """A decoded message from ``peer``: its round, claimed rewards and model.

        >>> from swarmnode.learn.groups import ItemRef
        >>> g = RolloutGroup(ItemRef("d", {}, 0, 0), "q", ["a", "b"], [1.0, 0.0], model="m")
        >>> book = PeerBook(clock=lambda: 5.0)
        >>> book.heard("P", 3, [g]); book.verdicts("P", 1, 1)
        >>> book.snapshot({"P": 1})[0]["claimed"], book.snapshot({})[0]["groups_accepted"]
        ([[3, 0.5]], 1)
        """
        rec = self._record(peer)
        rewards = [r for g in groups for r in g.rewards]
        if rewards:
            mean = round(sum(rewards) / len(rewards), 4)
            if rec.claimed and rec.claimed[-1][0] == round_index:  # one round, split messages
                rec.claimed[-1] = (round_index, round((rec.claimed[-1][1] + mean) / 2, 4))
            else:
                rec.claimed.append((round_index, mean))
        if groups and groups[0].model:
            rec.model = groups[0].model[:80]

    def verdicts(self, peer: str, offered: int, accepted: int) -> None:
        """Ingestion's verdict on ``offered`` groups from ``peer``."""
        rec = self._record(peer)
        rec.groups_offered += offered
        rec.groups_accepted += accepted

    def snapshot(self, trained_from: Mapping[str, int]) -> list[dict[str, Any]]:
        """Every peer, most recently heard from first (JSON-able)."""
        return [
            {
                "peer": peer,
                "model": rec.model,
                "last_seen": round(rec.last_seen, 1),
                "claimed": [list(c) for c in rec.claimed],
                "groups_accepted": rec.groups_accepted,
                "groups_rejected": rec.groups_rejected,
                "groups_trained": trained_from.get(peer, 0),
            }
            for peer, rec in reversed(self._peers.items())
        ]

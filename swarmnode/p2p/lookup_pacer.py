"""When to run the next DHT lookup: back off while lookups teach us nothing new.

Role: the discovery loop asks ``due(now)`` every ``discovery_interval_s`` and, after a
lookup, tells ``done(now, learned)`` whether it learned anything (a peer with
addresses the peerstore did not have). A swarm smaller than ``target_peers`` (a LAN
of four) never reaches the target, and py-libp2p's iterative lookup through every
connected peer is not free: profiled on four idle nodes (``bench_gossip.py``), the
lookups took about 28% of each libp2p thread's CPU and answering the others' 6%.

Invariants:
- A lookup that learns something, or a drop in connected peers since the last
  lookup, resets the wait to ``base_s``; each lookup that learns nothing doubles
  it, up to ``max_s``. So a growing or shrinking swarm is searched at the base pace,
  a stable one about once every ``max_s``.
- Dialling the candidates already known does not wait for this: only the lookup
  backs off.
"""

from __future__ import annotations

MAX_S = 300.0  # the longest wait between two lookups that keep learning nothing


class LookupPacer:
    def __init__(self, base_s: float, max_s: float = MAX_S) -> None:
        self.base_s = base_s
        self.max_s = max(base_s, max_s)
        self.wait_s = base_s
        self._next = 0.0
        self._connected = 0
        self.skipped = 0  # ticks that did not look up (status: dht_lookups_deferred)

    def due(self, now: float, connected: int) -> bool:
        """Is a lookup due at ``now`` with ``connected`` peers?"""
        if connected < self._connected:  # someone left: search at the base pace again
            self.wait_s = self.base_s
            self._next = 0.0
        self._connected = connected
        if now >= self._next:
            return True
        self.skipped += 1
        return False

    def done(self, now: float, learned: bool) -> None:
        """A lookup ended at ``now``; ``learned``: it found peers we did not know."""
        self.wait_s = self.base_s if learned else min(self.wait_s * 2, self.max_s)
        self._next = now + self.wait_s

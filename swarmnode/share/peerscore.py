"""Peer scores from what a peer's messages turned out to be; bad peers are cut off.

Role: turn verdicts (an invalid wire message, a bad signature, a protocol error, a
group that failed verification, a false reward claim, a flood) into one decaying
number per peer, and tell the libp2p host whom to graylist. The same number is
py-libp2p's gossipsub v1.1 application-specific score (P6), so gossipsub's own
gates (GRAFT refused, no gossip, not chosen for the mesh) follow it too.

Invariants:
- A score decays towards 0 with ``half_life_s``: a peer that stops misbehaving
  recovers; an honest peer's verified groups earn a little credit, capped at
  ``MAX_CREDIT`` so credit cannot be banked to pay for a later attack.
- Below ``graylist_score`` a peer is graylisted: the host disconnects it and drops
  whatever it forwards or originates, unverified, until ``graylist_s`` has passed.
- Bounded: at most ``max_peers`` peers are tracked (the one nearest 0 is forgotten
  first, never a graylisted one while others are nearer 0).
- Thread-safe: ingestion (asyncio side) and the libp2p thread both report verdicts.
"""

from __future__ import annotations

import math
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

# Penalty (negative) or credit (positive) per verdict. A wire-invalid or forged
# message is what no honest implementation sends; a rate-limited one may be an
# over-eager honest peer, so it costs little each (a flood of them still adds up).
VERDICT_WEIGHTS: dict[str, float] = {
    "invalid": -10.0,  # rejected by the wire decoder (schema, limits, version, msgpack)
    "signature": -10.0,  # unsigned, badly signed or wrongly keyed (charged to the forwarder)
    "protocol": -25.0,  # an undecodable RPC frame or one that made py-libp2p raise
    "wrong_swarm": -2.0,  # a different swarm's message on our topic
    "rate_limited": -0.5,  # over its message or group rate (a flood)
    "failed_verification": -10.0,  # out of catalog, question mismatch, unregenerable
    "false_claim": -2.0,  # a verified group whose claimed rewards were not ours
    "accepted": 1.0,  # a verified group with signal, queued for training
}
MAX_CREDIT = 20.0


@dataclass
class _Peer:
    score: float = 0.0
    stamp: float = 0.0
    verdicts: Counter[str] = field(default_factory=Counter)
    graylisted_until: float = 0.0


class PeerScores:
    """Decaying per-peer scores keyed by base58 peer ID."""

    def __init__(
        self,
        graylist_score: float = -100.0,
        graylist_s: float = 600.0,
        half_life_s: float = 120.0,
        max_peers: int = 4096,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.graylist_score = graylist_score
        self.graylist_s = graylist_s
        self.decay_per_s = math.log(2) / half_life_s
        self.max_peers = max_peers
        self.clock = clock
        self._peers: dict[str, _Peer] = {}
        self._lock = threading.Lock()
        self.graylisted_total = 0

    def _decayed(self, p: _Peer, now: float) -> float:
        p.score *= math.exp(-self.decay_per_s * max(0.0, now - p.stamp))
        p.stamp = now
        return p.score

    def report(self, peer: str, verdict: str, n: int = 1) -> None:
        """Record ``n`` verdicts of one kind (a key of VERDICT_WEIGHTS) for ``peer``."""
        weight = VERDICT_WEIGHTS[verdict]
        now = self.clock()
        with self._lock:
            p = self._peers.get(peer)
            if p is None:
                p = self._peers[peer] = _Peer(stamp=now)
                if len(self._peers) > self.max_peers:
                    self._forget_one(now)
            score = self._decayed(p, now) + weight * n
            p.score = min(score, MAX_CREDIT) if weight > 0 else score
            p.verdicts[verdict] += n
            if p.score < self.graylist_score and p.graylisted_until <= now:
                p.graylisted_until = now + self.graylist_s
                self.graylisted_total += 1

    def _forget_one(self, now: float) -> None:
        victim = min(
            self._peers,
            key=lambda k: (self._peers[k].graylisted_until > now, abs(self._peers[k].score)),
        )
        del self._peers[victim]

    def score(self, peer: str) -> float:
        now = self.clock()
        with self._lock:
            p = self._peers.get(peer)
            return 0.0 if p is None else self._decayed(p, now)

    def is_graylisted(self, peer: str) -> bool:
        now = self.clock()
        with self._lock:
            p = self._peers.get(peer)
            return p is not None and p.graylisted_until > now

    def graylisted(self) -> set[str]:
        now = self.clock()
        with self._lock:
            return {k for k, p in self._peers.items() if p.graylisted_until > now}

    def snapshot(self, limit: int = 50) -> dict[str, dict[str, Any]]:
        """The ``limit`` lowest-scored peers: score, graylisted?, verdict counts."""
        now = self.clock()
        with self._lock:
            rows = [
                (self._decayed(p, now), k, p.graylisted_until > now, dict(p.verdicts))
                for k, p in self._peers.items()
            ]
        rows.sort()
        return {
            k: {"score": round(s, 2), "graylisted": g, "verdicts": v} for s, k, g, v in rows[:limit]
        }

"""How often to publish, so a node hears about the same traffic in a swarm of 10 or 10,000.

Role: the swarm-size control of gossip. Every node publishes one message a round; in
a swarm of N nodes with rounds of T seconds each node reads N / T messages a second
(and, as a gossipsub relay, writes each to D - 1 mesh peers), while it trains on a
few peer groups a round. At 1,000 peers that is 100 messages a second to verify and
relay for perhaps 2 groups used: almost all of it waste (docs/reliability.md,
"Scale"). So each node publishes a round with probability ``p`` and adjusts ``p``
to keep the rate of peer messages it hears near ``swarm.target_msgs_per_s``. Every
node doing the same drives the swarm's total rate to about that target whatever N
is, with no one counting the swarm.

Invariants:
- ``p`` stays in [``p_min``, 1]: a node never goes silent (group completion and the
  swarm view need to hear it now and then), and with fewer messages than the target
  every node publishes every round.
- The decision for a round is a deterministic hash of (peer ID, round): restarts and
  tests reproduce it; different nodes' choices are independent.
- ``OwnPace``: whatever ``p`` says, a node never publishes faster than half of what
  its peers accept from one originator under its own settings
  (``swarm.origin_msgs_per_s`` / ``origin_groups_per_s``): peers drop the excess and
  lower the sender's score, so a node whose rounds run faster than that (a fast GPU,
  a tiny model) would otherwise be graylisted by honest peers. A round over the pace
  is not published (counted), never queued: queued rounds would only arrive late.
- The rate is measured over the last ``window_s`` seconds of the transport's count
  of delivered peer messages; with less than ``min_window_s`` of history, ``p`` is
  left as it is. Each update moves ``p`` by the square root of the ratio
  target / heard (damped), so a swarm of nodes updating together does not oscillate.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections import deque
from collections.abc import Callable

from swarmnode.share.ratelimit import TokenBucket


class PublishRate:
    """Publish probability driven by the heard message rate (module docstring)."""

    def __init__(
        self,
        target_msgs_per_s: float,
        peer_id: str,
        p_min: float = 0.05,
        window_s: float = 60.0,
        min_window_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if target_msgs_per_s <= 0 or not 0 < p_min <= 1:
            raise ValueError("target_msgs_per_s must be > 0 and p_min in (0, 1]")
        self.target, self.peer_id, self.p_min = target_msgs_per_s, peer_id, p_min
        self.window_s, self.min_window_s, self.clock = window_s, min_window_s, clock
        self.p = 1.0
        self.heard_per_s: float | None = None
        self._seen: deque[tuple[float, int]] = deque()  # (time, cumulative messages in)

    def observe(self, msgs_in_total: int) -> None:
        """Note the transport's cumulative count of delivered peer messages."""
        now = self.clock()
        self._seen.append((now, msgs_in_total))
        while len(self._seen) > 2 and now - self._seen[1][0] >= self.window_s:
            self._seen.popleft()
        t0, n0 = self._seen[0]
        if now - t0 < self.min_window_s:
            return
        self.heard_per_s = rate = (msgs_in_total - n0) / (now - t0)
        factor = math.sqrt(self.target / rate) if rate > 0 else 2.0
        self.p = min(1.0, max(self.p_min, self.p * min(2.0, max(0.5, factor))))

    def publish(self, round_index: int) -> bool:
        """Whether this round is published: a coin with bias ``p``, fixed per round."""
        digest = hashlib.blake2b(f"{self.peer_id}:{round_index}".encode(), digest_size=8)
        return int.from_bytes(digest.digest(), "big") / 2**64 < self.p


class OwnPace:
    """This node's own messages and groups a second, at ``share`` of what peers accept.

    Two token buckets (messages, groups) at ``share`` of the peers' per-originator
    rates, with ``share`` of their bursts; ``admit`` decides before any encoding,
    ``charge`` bills what a round really cost (a round split into several messages
    goes into debt, which later rounds pay back)."""

    def __init__(
        self,
        msgs_per_s: float,
        msgs_burst: float,
        groups_per_s: float,
        share: float = 0.5,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not 0 < share <= 1:
            raise ValueError("share must be in (0, 1]")
        now, self.clock = clock(), clock
        self.msgs = TokenBucket(msgs_per_s * share, max(1.0, msgs_burst * share), now)
        self.groups = TokenBucket(groups_per_s * share, groups_per_s * share, now)

    def admit(self, n_groups: int) -> bool:
        """Whether a round of ``n_groups`` may be published now (then it is charged one
        message and its groups; nothing is charged if not). A round larger than one
        second of the group rate is admitted when the bucket is full and goes into debt."""
        now = self.clock()
        if not self.msgs.take(1, now):
            return False
        need = min(n_groups, self.groups.burst)
        if not self.groups.take(need, now):
            self.msgs.tokens += 1  # refund: this round is not sent
            return False
        if n_groups > need:
            self.groups.reserve(n_groups - need, now)
        return True

    def charge_extra_messages(self, n: int) -> None:
        """A round that went out as 1 + ``n`` messages: bill the ``n`` beyond the first."""
        if n > 0:
            self.msgs.reserve(n, self.clock())

"""The node's CPU outside training, and which peers wait when it is over its cap.

Role: the part of read pricing (``framing.ReadBudget``) that holds for any mix of
peers. Per-peer budgets cap what one identity can make this node read, but
identities are free: five Sybils, each under every per-peer rate, still took a
fifth of the core a CPU node trains on (docs/reliability.md). What their messages
really cost is CPU outside the trainer thread (the libp2p thread reading,
decrypting, parsing and relaying them to the mesh; the exchange decoding and
queueing them), so that is what is capped: ``swarm.max_net_share`` of a core.

Invariants:
- ``share`` is CPU seconds a wall second of every Python thread of the process but
  the trainer's (``TRAINER_THREAD``; ``non_trainer_cpu``), an EWMA over ``TAU_S``,
  updated at most once per ``TICK_S`` (a thread that ended takes its CPU with it:
  a tick never counts less than 0).
- A read account (a peer, or the newcomers' pool: ``ratelimit.Tenure``) is charged
  units as it is read, 1 per frame plus 1 per message in it; its rate of units is an
  EWMA over ``TAU_S`` too. The cost of reading is taken as proportional to units.
- While nobody is limited and the share is at or under ``cap``, nobody waits here.
  Over the cap, the total rate that would fit (units a second x cap / share) is split
  by weighted max-min fairness (water-filling): an account using less than its
  level keeps what it uses (a peer at the swarm's normal rate does not wait while
  heavier ones put the node over the cap), the heavier ones are held to their level
  by a token bucket (burst: 2 s) and wait out their debt before their next read, so
  flow control stops their writes. When alike peers are together over the cap, all
  of them are held: honest traffic at the cap's edge then backs up and the level
  keeps falling (bench_gossip on a quiet machine, 8 nodes at a batch a second,
  about 0.10 of a core each: docs/experiments/2026-12-03-benchpoll; issue 28).
- Fair by tenure: an account's level is the water level times its ``weight`` (the
  minutes the node has known it, 1 to ``MAX_WEIGHT``; the newcomers' pool 1), so
  the peers known longest are held back last. In a tiny-model run the heaviest
  reader was the honest peer, and an equal split held it back in most rounds.
- The cap holds newer peers for older ones, never alike peers for each other: a
  level is set only while some account that reads weighs at least ``TENURE_RATIO``
  x the lightest account the level would hold. Peers the node has known
  about as long (a young swarm, where all are newcomers in one pool; a node that
  just joined; a mesh known for an hour) cannot be told from each other by anything
  but their rate, and holding them all back only delays what must be read anyway:
  the backlog grew for as long as the run lasted and the meshes fell apart
  (bench_gossip, 8 nodes at a batch a second, each node's CPU at the 0.1 cap:
  docs/experiments/2026-12-03-benchpoll). Per-peer budgets and the newcomers' pool
  still bound them; fresh identities (a Sybil flood) are newcomers against the
  peers known longer, and held. So is an honest node that joins while the older
  peers alone keep this node at its cap, until it graduates (bench_gossip --join-at
  60, quiet: its batches reached the others at p99 4.7 s, all delivered).
- Under ``RELAX_BELOW`` x cap the level rises by ``RELAX`` a tick until it no
  longer binds; in between it holds.
- The level never falls below ``FLOOR_UNITS_S``: an overloaded node still reads
  every peer a little. It is not set while all accounts together read under
  ``MIN_UNITS_S``: then the CPU is the node's own (start-up, DHT), and holding peers
  back would buy nothing (a node's start-up held its honest peers to the floor).
  Accounts are bounded (``max_accounts``, least recently charged forgotten).
- Nobody is held back in the first ``STARTUP_S`` of the node's life: its start-up
  (dials, handshakes, the DHT) is CPU of its own, and a node joining a running
  swarm, over the cap while it started, held its honest peers to the fit it
  computed then for ~40 s (``bench_gossip --join-at 60``: p99 13.9 s at the
  joiner). The per-peer budgets and the newcomers' pool bound reading meanwhile.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Any

from swarmnode.share.ratelimit import Clock, TokenBucket

TICK_S = 1.0
TAU_S = 5.0
RELAX = 1.25  # level x this per tick once the share is well under the cap
RELAX_BELOW = 0.8  # "well under": this share of the cap
FLOOR_UNITS_S = 1.0  # the least an account is read, units a second
# Below this many units a second from all accounts together, reading is not what holds
# the CPU over the cap (the node's own start-up, its DHT...): nobody is held back.
MIN_UNITS_S = 20.0
TRAINER_THREAD = "swarmnode-trainer"  # the name prefix of the node's training thread
STARTUP_S = 30.0  # the cap does not bind this long after the node starts
MAX_WEIGHT = 60.0  # an account known for an hour or more weighs 60 newcomers
# The cap binds only if some account that reads weighs this many times the lightest
# it would hold (it holds newer peers for older ones, not alike peers for each other).
TENURE_RATIO = 2.0
HELD_AT = 0.9  # an account reading at this share of its level or more counts as held


def no_tenure(account: str) -> float:
    """Every account weighs the same (plain max-min fairness)."""
    return 1.0


def batch_thread(on: bool = True) -> bool:
    """The calling thread under SCHED_BATCH (``on``) or back under SCHED_OTHER (Linux);
    threads it starts later inherit it. False where the OS has no such policy or
    refused. A SCHED_BATCH thread that wakes does not preempt the running one: it
    waits for the end of its time slice, and whatever woke it meanwhile is handled
    in one go. The node runs every thread but the trainer's so: under five Sybils
    the trainer was preempted 34-46 times a second, 67-69 without (calm: 11-17);
    the flood's round time was the same within its interval either way
    (docs/experiments/2026-12-06-batch-wake).
    """
    setter = getattr(os, "sched_setscheduler", None)
    policy = getattr(os, "SCHED_BATCH" if on else "SCHED_OTHER", None)
    if setter is None or policy is None:
        return False
    try:
        setter(0, policy, os.sched_param(0))  # 0: the calling thread (Linux)
    except OSError:
        return False
    return True


def non_trainer_cpu() -> float:
    """CPU seconds used so far by this process's Python threads, the trainer's aside."""
    total = 0.0
    for t in threading.enumerate():
        if t.ident is None or t.name.startswith(TRAINER_THREAD):
            continue
        try:
            total += time.clock_gettime(time.pthread_getcpuclockid(t.ident))
        except OSError:  # it ended meanwhile
            continue
    return total


def water_level(
    demands: Iterable[float], total: float, weights: Iterable[float] | None = None
) -> float:
    """The level L with sum(min(d, L * w)) = total (weighted max-min fairness; every
    weight 1 by default); inf if all fit.

    >>> water_level([1.0, 5.0, 5.0], 5.0)
    2.0
    >>> water_level([1.0, 2.0], 10.0)
    inf
    >>> water_level([10.0, 10.0], 4.0, [1.0, 3.0])  # 1 and 3
    1.0
    """
    ds = list(demands)
    ws = [1.0] * len(ds) if weights is None else list(weights)
    pairs = sorted(zip(ds, ws, strict=True), key=lambda p: p[0] / p[1])
    left, wsum = total, sum(ws)
    for d, w in pairs:
        if d / w * wsum > left:
            return left / wsum
        left -= d
        wsum -= w
    return math.inf


class NetShare:
    """The CPU share, and each account's fair rate of units while it is over ``cap``."""

    def __init__(
        self,
        cap: float,
        clock: Clock = time.monotonic,
        cpu: Callable[[], float] = non_trainer_cpu,
        max_accounts: int = 4096,
        weight: Callable[[str], float] = no_tenure,
        startup_s: float | None = None,  # None: STARTUP_S
    ) -> None:
        self.cap, self.clock, self.cpu, self.max_accounts = cap, clock, cpu, max_accounts
        self.weight = weight
        self.share = 0.0
        self.level: float | None = None  # units a second per unit of weight; None = no limit
        self._t, self._cpu = clock(), cpu()
        self._binds_from = self._t + (STARTUP_S if startup_s is None else startup_s)
        self._used: OrderedDict[str, float] = OrderedDict()  # units since the last tick
        self._rate: dict[str, float] = {}  # account -> EWMA units a second
        self._buckets: dict[str, TokenBucket] = {}

    def charge(self, account: str, units: float) -> float:
        """Charge ``units`` read from ``account``; seconds it should wait (0.0 if none)."""
        now = self.clock()
        if now - self._t >= TICK_S:
            self._tick(now)
        self._used[account] = self._used.get(account, 0.0) + units
        self._used.move_to_end(account)
        while len(self._used) > self.max_accounts:
            old, _ = self._used.popitem(last=False)
            self._rate.pop(old, None)
            self._buckets.pop(old, None)
        if self.level is None:
            return 0.0
        bucket = self._buckets.get(account)
        if bucket is None:
            rate = self.level * self._weight(account)
            bucket = self._buckets[account] = TokenBucket(rate, 2 * rate, now)
        return bucket.reserve(units, now)

    def _weight(self, account: str) -> float:
        return min(MAX_WEIGHT, max(1.0, self.weight(account)))

    def _tick(self, now: float) -> None:
        dt = now - self._t
        alpha = 1.0 - math.exp(-dt / TAU_S)
        cpu = self.cpu()
        self.share += alpha * (max(0.0, cpu - self._cpu) / dt - self.share)
        self._t, self._cpu = now, cpu
        for account, used in self._used.items():  # every account still remembered
            r = self._rate.get(account, 0.0)
            self._rate[account] = r + alpha * (used / dt - r)
            self._used[account] = 0.0
        total = sum(self._rate.values())
        if now < self._binds_from:
            return
        if self.share > self.cap and total >= MIN_UNITS_S:
            accounts = list(self._rate)
            fit = water_level(
                (self._rate[a] for a in accounts),
                total * self.cap / self.share,
                [self._weight(a) for a in accounts],
            )
            level = max(FLOOR_UNITS_S, fit if self.level is None else min(self.level, fit))
            self._set_level(level if self._older_kept(level) else None)
        elif self.level is not None and self.share < RELAX_BELOW * self.cap:
            level = self.level * RELAX
            heaviest = max((r / self._weight(a) for a, r in self._rate.items()), default=0.0)
            self._set_level(None if level > 2 * heaviest else level)

    def _older_kept(self, level: float) -> bool:
        """Whether ``level`` holds some account (its rate per unit of weight is at
        ``HELD_AT`` x the level or over) while another that reads has been known
        ``TENURE_RATIO`` x as long."""
        held, oldest = math.inf, 0.0
        for account, rate in self._rate.items():
            if rate <= 0.0:
                continue
            w = self._weight(account)
            oldest = max(oldest, w)
            if rate / w >= HELD_AT * level:  # over the level, or held to it already
                held = min(held, w)
        return oldest >= TENURE_RATIO * held

    def _set_level(self, level: float | None) -> None:
        if level == math.inf:
            level = None
        self.level = level
        if level is None:
            self._buckets.clear()
            return
        for account, bucket in self._buckets.items():
            rate = level * self._weight(account)
            bucket.rate, bucket.burst = rate, 2 * rate
            bucket.tokens = min(bucket.tokens, bucket.burst)

    def report(self) -> dict[str, Any]:
        return {
            "net_share": round(self.share, 4),
            "net_share_cap": self.cap,
            "net_share_level": None if self.level is None else round(self.level, 2),
        }

"""Pricing what peers make this node do: token buckets, a time budget, a quiet log.

Role: small, dependency-free building blocks that keep one stranger (or a few
hundred Sybils) from buying more of this node's time than configured.

- ``TokenBucket`` / ``PeerBuckets``: per-peer rates (messages or groups a second)
  with a burst; excess is refused *before* any expensive work and counted by the
  caller.
- ``Tenure``: when each peer first did something valid; a peer younger than
  ``newcomer_s`` is charged to one shared ``NEWCOMERS`` key, so fresh identities
  (a Sybil flood) together get a bounded budget (``framing.ReadBudget``).
- ``TimeShare``: the fraction of wall time a worker spent busy over a sliding
  window, and how long to wait so that it stays under a configured share.
- ``RepeatFilter``: a logging filter that lets the same message template through a
  few times per interval and then only a summary, so a flood cannot grow the log.

Invariants:
- Every structure is bounded: ``PeerBuckets`` forgets the least recently seen peer
  past ``max_peers``, ``Tenure`` the least recently heard; ``RepeatFilter`` keeps at
  most ``max_keys`` templates.
- Time comes from an injectable clock (monotonic by default), so tests never sleep.
- Thread-safe where both threads touch them (``PeerBuckets``, ``TimeShare``,
  ``RepeatFilter``); ``Tenure`` is used by the libp2p thread only.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable

Clock = Callable[[], float]
NEWCOMERS = "<newcomers>"  # the shared key (no base58 peer ID looks like it)


class TokenBucket:
    """``rate`` tokens a second, at most ``burst`` saved up; starts full."""

    __slots__ = ("burst", "rate", "stamp", "tokens")

    def __init__(self, rate: float, burst: float, now: float) -> None:
        if rate <= 0 or burst <= 0:
            raise ValueError("rate and burst must be > 0")
        self.rate, self.burst = rate, burst
        self.tokens, self.stamp = burst, now

    def take(self, n: float, now: float) -> bool:
        """Spend ``n`` tokens if there are that many; False (and spend none) if not."""
        self.tokens = min(self.burst, self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now
        if self.tokens >= n:
            self.tokens -= n
            return True
        return False

    def reserve(self, n: float, now: float) -> float:
        """Spend ``n`` tokens even into debt; return the seconds until the debt is paid
        (0.0 if there were enough). A caller that waits that long before its next
        piece of work keeps to ``rate`` on average, whatever it was charged."""
        self.tokens = min(self.burst, self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now
        self.tokens -= n
        return 0.0 if self.tokens >= 0 else -self.tokens / self.rate


class PeerBuckets:
    """One ``TokenBucket`` per peer key, bounded to ``max_peers`` (LRU forgets).

    A forgotten peer comes back with a full bucket: with ``max_peers`` well above the
    number of peers that really talk to us, that costs at most one burst per churn."""

    def __init__(
        self, rate: float, burst: float, max_peers: int = 4096, clock: Clock = time.monotonic
    ) -> None:
        self.rate, self.burst, self.max_peers, self.clock = rate, burst, max_peers, clock
        self._buckets: OrderedDict[str, TokenBucket] = OrderedDict()
        self._lock = threading.Lock()

    def take(self, peer: str, n: float = 1.0) -> bool:
        now = self.clock()
        with self._lock:
            return self._bucket(peer, now).take(n, now)

    def reserve(self, peer: str, n: float = 1.0) -> float:
        """``TokenBucket.reserve`` on ``peer``'s bucket: seconds to wait, 0.0 if none."""
        now = self.clock()
        with self._lock:
            return self._bucket(peer, now).reserve(n, now)

    def _bucket(self, peer: str, now: float) -> TokenBucket:
        bucket = self._buckets.get(peer)
        if bucket is None:
            bucket = self._buckets[peer] = TokenBucket(self.rate, self.burst, now)
            while len(self._buckets) > self.max_peers:
                self._buckets.popitem(last=False)
        else:
            self._buckets.move_to_end(peer)
        return bucket

    def __len__(self) -> int:
        with self._lock:
            return len(self._buckets)


class Tenure:
    """How long each peer has been known, and which budget it pays from: its own once
    its first valid act (``note``) is ``newcomer_s`` old, ``NEWCOMERS`` before that.
    ``newcomer_s`` = 0: every peer its own budget, from the start (its tenure is still
    kept: the CPU cap weighs peers by it).

    >>> t = Tenure(60.0, clock=lambda: now)
    >>> now = 0.0; t.note("a"); t.account("a"), t.account("b")
    ('<newcomers>', '<newcomers>')
    >>> now = 60.0; t.account("a"), t.age("a"), t.age("b")
    ('a', 60.0, 0.0)
    """

    def __init__(self, newcomer_s: float, max_peers: int = 16_384, clock: Clock = time.monotonic):
        self.newcomer_s, self.max_peers, self.clock = newcomer_s, max_peers, clock
        self._first: OrderedDict[str, float] = OrderedDict()

    def note(self, peer: str, at: float | None = None) -> None:
        """``peer`` did something valid (now, or ``at``): its tenure starts if it had
        none, or starts earlier if ``at`` is older than what was noted."""
        when = self.clock() if at is None else at
        first = self._first.get(peer)
        if first is not None:
            self._first.move_to_end(peer)
            if when >= first:
                return
        self._first[peer] = when
        while len(self._first) > self.max_peers:
            self._first.popitem(last=False)

    def __contains__(self, peer: object) -> bool:
        """Whether ``peer``'s tenure has started (no clock: any thread may ask)."""
        return peer in self._first

    def started(self, peer: str) -> float:
        """When ``peer``'s tenure began, on this clock (now, for a peer never noted)."""
        first = self._first.get(peer)
        return self.clock() if first is None else first

    def age(self, peer: str) -> float:
        """Seconds since ``peer``'s first valid act (0 for a peer never noted)."""
        first = self._first.get(peer)
        return 0.0 if first is None else max(0.0, self.clock() - first)

    def account(self, peer: str) -> str:
        if self.newcomer_s <= 0 or self.age(peer) >= self.newcomer_s:
            return peer
        return NEWCOMERS


class TimeShare:
    """Busy time over the last ``window_s`` seconds, as a share of wall time.

    ``record(start, end)`` notes one busy interval; ``share()`` is the busy fraction
    of the window; ``wait_s()`` is how long to stay idle before the next piece of work
    so that the share, including the next piece of work, stays under ``max_share``."""

    def __init__(self, max_share: float, window_s: float = 30.0, clock: Clock = time.monotonic):
        if not 0 < max_share <= 1:
            raise ValueError("max_share must be in (0, 1]")
        self.max_share, self.window_s, self.clock = max_share, window_s, clock
        # spans in the order they were recorded, with the sum of their lengths: a
        # share costs O(spans straddling the window's start), not O(spans) (a flood
        # records hundreds a window, and every offer asks)
        self._spans: deque[tuple[float, float]] = deque()
        self._sum = 0.0
        self._lock = threading.Lock()
        self.busy_total_s = 0.0

    def record(self, start: float, end: float) -> None:
        length = max(0.0, end - start)
        with self._lock:
            self._spans.append((start, end))
            self._sum += length
            self.busy_total_s += length
            self._trim(end)

    def _trim(self, now: float) -> None:
        cutoff = now - self.window_s
        while self._spans and self._spans[0][1] <= cutoff:
            s, e = self._spans.popleft()
            self._sum -= max(0.0, e - s)
        if not self._spans:
            self._sum = 0.0  # no float drift carried across idle periods

    def _busy(self, now: float) -> float:
        cutoff = now - self.window_s
        busy = self._sum
        for s, e in self._spans:  # only the oldest spans can start before the cutoff
            if s >= cutoff:
                break
            busy -= min(max(0.0, e - s), cutoff - s)
        return max(0.0, busy)

    def share(self) -> float:
        now = self.clock()
        with self._lock:
            self._trim(now)
            return self._busy(now) / self.window_s

    def wait_s(self) -> float:
        """Seconds to wait until busy / window <= max_share (0 when already under)."""
        now = self.clock()
        with self._lock:
            self._trim(now)
            # Room is kept for the next piece of work, estimated as the mean recent span,
            # so that the share *after* it stays within budget.
            reserve = self._sum / len(self._spans) if self._spans else 0.0
            excess = self._busy(now) + reserve - self.max_share * self.window_s
            if excess <= 0:
                return 0.0
            # Busy time leaves the window as the window slides past old spans; waiting
            # ``excess`` seconds is enough when it all lies in spans already closed.
            return min(excess, self.window_s)


class RepeatFilter(logging.Filter):
    """Let each (logger, template) through ``burst`` times per ``interval_s``.

    Past that, records are dropped and counted; the next record let through for that
    template carries "(N similar suppressed)". Bounded: at most ``max_keys`` templates
    are tracked (the stalest is forgotten)."""

    def __init__(
        self,
        burst: int = 5,
        interval_s: float = 60.0,
        max_keys: int = 1024,
        clock: Clock = time.monotonic,
    ) -> None:
        super().__init__()
        self.burst, self.interval_s, self.max_keys, self.clock = burst, interval_s, max_keys, clock
        self._state: OrderedDict[tuple[str, str], list[float]] = OrderedDict()
        self._lock = threading.Lock()
        self.suppressed = 0

    def filter(self, record: logging.LogRecord) -> bool:
        key = (record.name, str(record.msg))
        now = self.clock()
        with self._lock:
            st = self._state.get(key)
            if st is None or now - st[0] >= self.interval_s:
                hidden = int(st[2]) if st is not None else 0
                self._state[key] = st = [now, 0.0, 0.0]
                self._state.move_to_end(key)
                while len(self._state) > self.max_keys:
                    self._state.popitem(last=False)
                if hidden:
                    record.msg = f"{record.msg} ({hidden} similar suppressed)"
            st[1] += 1
            if st[1] <= self.burst:
                return True
            st[2] += 1
            self.suppressed += 1
            return False


_LIBP2P_FILTER = RepeatFilter()


def quiet_network_logs(prefixes: tuple[str, ...] = ("libp2p", "swarmnode.p2p")) -> RepeatFilter:
    """Attach one shared ``RepeatFilter`` to every logger named after ``prefixes``.

    Filters on a logger apply only to records logged on it (not to children), so it is
    attached to each existing module logger; call after importing libp2p. Idempotent."""
    names = [
        n
        for n in [*prefixes, *logging.Logger.manager.loggerDict]
        if any(n == p or n.startswith(p + ".") for p in prefixes)
    ]
    for name in names:
        lg = logging.getLogger(name)
        if _LIBP2P_FILTER not in lg.filters:
            lg.addFilter(_LIBP2P_FILTER)
    return _LIBP2P_FILTER

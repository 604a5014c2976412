"""Reading a peer's pubsub stream: buffered varint frames, paced per peer.

Role: the cost side of what one connected peer can make this node read. The
hardened pubsub read loop (``gossip.HardenedPubsub.continuously_read_stream``) takes
its frames from here.

Why: under a flood from one peer, py-libp2p's read loop spent the libp2p thread on
reading (one yamux read, with its window bookkeeping, per varint byte and per
body), parsing and verifying the signed peer record of every frame, as fast as the
peer could write; the training thread lost the CPU and the GIL to it. Dropping the
excess after reading it is too late: the reading is the cost.

Invariants:
- ``FrameReader`` reads the stream in chunks of up to ``CHUNK`` bytes and cuts
  varint-length-prefixed frames from its buffer; a frame claiming more than
  ``max_len`` bytes raises ``MessageTooLarge`` before its body is read; the buffer
  never holds more than ``max_len + CHUNK`` bytes. A stream that ends mid-frame
  raises ``IncompleteReadError``; one that ends between frames, ``StreamEOF`` (as
  py-libp2p's own reader would).
- ``ReadBudget`` prices each peer's reading: ``frames_per_s`` frames and
  ``bytes_per_s`` bytes, each with a burst of 2 seconds' worth. A peer over either
  is not read until its debt is paid: nothing is dropped here, the peer's yamux
  receive window fills and flow control stops its writes, so a flood costs the
  flooder its own send queue, not this node's CPU. Other peers' streams are
  untouched (each has its own budget). Pauses are counted (``throttled.reads``,
  ``throttled.ms``; ``throttled.pool`` where the newcomers' pool was the brake).
- Newcomers share one budget too: until the first valid message a peer handed us
  (signature checked, or a copy of a message that was) is ``newcomer_s`` old, its
  reading is charged to its own budget and to one pool shared by all newcomers.
  Identities cost nothing to make, so per-identity budgets multiply
  with a Sybil flood; the pool caps fresh identities together at ``pool_peers``
  peers' budgets (each reservation queues behind the pool's debt, so newcomers
  share it about evenly). The pool grows with the newcomers that read from it:
  ``k`` distinct ones in the last ``POOL_WINDOW_S`` get ``min(k, pool_peers)``
  budgets; its burst is always ``pool_peers`` budgets' (2 s of each). At one
  budget, a swarm's young honest mesh backed up: every peer of a
  new swarm is a newcomer, and each forwards every message (8 nodes at one batch a
  second read ~64 frames a second into a pool of 50; latency grew for the whole
  run). ``ratelimit.Tenure`` keeps the times, bounded.
- With ``max_net_share``, every account (a tenured peer, or the newcomers' pool) is
  also held to its fair share of the CPU the node may spend outside training: past
  the cap the heaviest wait, light ones not, and a peer known longer has the larger
  share (``netshare``: weighted by minutes known), counted as
  ``throttled.net_share`` (``throttled.net_share.newcomers`` where the account held
  was the newcomers' pool). A frame counts 1 plus its messages.
- A paused reader wakes at the first multiple of ``WAKE_GRID_S`` (on trio's clock) at
  or after its debt is paid, never before: readers whose debts end within the same
  tenth of a second wake in one batch of the trio loop. Each wake-up of the libp2p
  thread takes the core from the trainer (the kernel preempts it for the waking
  thread) and costs it more than the reading: under five Sybils the thread woke 90-166
  times a second, the trainer was preempted 100-176 times a second (11-13 calm) and
  spent 9-11% more CPU a round on the same work (embedded model, one core).
"""

from __future__ import annotations

import math
from collections import OrderedDict
from typing import Any

import trio
from libp2p.io.exceptions import IncompleteReadError, MessageTooLarge
from libp2p.network.stream.exceptions import StreamEOF

from swarmnode.p2p.netshare import NetShare
from swarmnode.share.inbox import Counters
from swarmnode.share.ratelimit import NEWCOMERS, PeerBuckets, Tenure, TokenBucket

CHUNK = 64 * 1024
POOL_WINDOW_S = 5.0  # a newcomer that read within this long counts toward the pool's size
WAKE_GRID_S = 0.1  # paused readers wake on this grid, together


def wake_at(t: float) -> float:
    """The first multiple of ``WAKE_GRID_S`` at or after ``t``."""
    return math.ceil(t / WAKE_GRID_S) * WAKE_GRID_S


def _varint(buf: bytearray) -> tuple[int, int] | None:
    """(value, bytes used) of the unsigned varint opening ``buf``; None if incomplete."""
    value = shift = 0
    for i, b in enumerate(buf[:10]):
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, i + 1
        shift += 7
    if len(buf) >= 10:
        raise IncompleteReadError("varint length prefix longer than 10 bytes")
    return None


class FrameReader:
    """Varint-length-prefixed frames from a libp2p stream, read in chunks."""

    def __init__(self, stream: Any, max_len: int) -> None:
        self.stream, self.max_len = stream, max_len
        self.buf = bytearray()

    async def next(self, before_read: Any = None) -> bytes:
        """The next frame. ``before_read`` (async, optional) runs before each read of
        the stream, with the number of bytes the last read returned."""
        last = 0
        while True:
            head = _varint(self.buf)
            if head is not None:
                size, used = head
                if size > self.max_len:
                    raise MessageTooLarge(f"frame of {size} bytes > {self.max_len}")
                if len(self.buf) >= used + size:
                    frame = bytes(self.buf[used : used + size])
                    del self.buf[: used + size]
                    return frame
            if before_read is not None:
                await before_read(last)
            try:
                chunk = await self.stream.read(CHUNK)
            except StreamEOF:
                if self.buf:
                    raise IncompleteReadError("stream ended inside a frame") from None
                raise
            if not chunk:
                if self.buf:
                    raise IncompleteReadError("stream ended inside a frame")
                raise StreamEOF("stream ended")
            last = len(chunk)
            self.buf += chunk


class ReadBudget:
    """Per-peer frames and bytes a second; ``pace`` waits out a peer's debt."""

    def __init__(
        self,
        frames_per_s: float,
        bytes_per_s: float,
        counters: Counters,
        newcomer_s: float = 0.0,
        max_net_share: float | None = None,
        pool_peers: int = 1,
    ) -> None:
        if pool_peers < 1:
            raise ValueError("pool_peers must be >= 1")
        # trio's clock: the reader sleeps on it (and tests can mock it)
        self.frames = PeerBuckets(frames_per_s, 2 * frames_per_s, clock=trio.current_time)
        self.bytes = PeerBuckets(bytes_per_s, 2 * bytes_per_s, clock=trio.current_time)
        self.counters = counters
        self.tenure = Tenure(newcomer_s, clock=trio.current_time)
        self.net = (
            None
            if max_net_share is None
            else NetShare(max_net_share, trio.current_time, weight=self.minutes_known)
        )
        self.rates = (frames_per_s, bytes_per_s)
        self.pool_peers = pool_peers
        self._pool: tuple[TokenBucket, TokenBucket] | None = None
        # newcomer -> when it last read, or reads next if it waits on the pool's debt;
        # least recently charged first, at most 4 x pool_peers kept
        self._readers: OrderedDict[str, float] = OrderedDict()

    def minutes_known(self, account: str) -> float:
        """``NetShare``'s weight: minutes since the account's first valid act (the
        newcomers' pool, never noted: 0)."""
        return self.tenure.age(account) / 60.0

    def pool_size(self, peer: str, now: float) -> int:
        """Note that newcomer ``peer`` reads now; the pool's size in budgets: the
        distinct newcomers that read, or wait (on the pool or their own budget) to
        read, within ``POOL_WINDOW_S``, 1 to ``pool_peers``. (Counting only reads, a
        debt longer than the window made the waiting readers drop out, the pool
        shrink and the debt grow.)"""
        self._readers[peer] = max(now, self._readers.get(peer, now))
        self._readers.move_to_end(peer)
        while len(self._readers) > 4 * self.pool_peers:  # the least recent forgotten
            self._readers.popitem(last=False)
        k = sum(1 for when in self._readers.values() if now - when <= POOL_WINDOW_S)
        return max(1, min(self.pool_peers, k))

    def _reserve_pool(self, peer: str, frames: int, nbytes: int) -> float:
        now = trio.current_time()
        size = self.pool_size(peer, now)
        if self._pool is None:  # it starts full, with the burst of all its budgets:
            # a node joining a swarm is handed every peer's recent messages at once
            (fr, br), k = self.rates, 2 * self.pool_peers
            self._pool = (TokenBucket(fr, k * fr, now), TokenBucket(br, k * br, now))
        wait = 0.0
        for bucket, rate, n in zip(self._pool, self.rates, (frames, nbytes), strict=True):
            bucket.rate = size * rate  # the burst stays that of pool_peers budgets
            if n:
                wait = max(wait, bucket.reserve(n, now))
        return wait

    async def pace(
        self, peer: str, frames: int, nbytes: int, msgs: int = 0, until: trio.Event | None = None
    ) -> None:
        """Charge ``frames`` frames (carrying ``msgs`` messages) and ``nbytes`` bytes to
        ``peer``'s budget (or the newcomers' pool); sleep off any debt, or until
        ``until`` is set (the connection closed: nothing left to pace, and a reader
        asleep on a dead connection kept it and its tasks alive for as long as the
        pool's debt lasted, which a Sybil flood made minutes)."""
        account = self.tenure.account(peer)
        wait = max(  # every peer keeps to its own budget...
            self.frames.reserve(peer, frames) if frames else 0.0,
            self.bytes.reserve(peer, nbytes) if nbytes else 0.0,
        )
        if account == NEWCOMERS:  # ...and newcomers together to the pool's
            pool_wait = self._reserve_pool(peer, frames, nbytes)
            if pool_wait > wait:
                self.counters.add("throttled.pool")
                wait = pool_wait
        if self.net is not None and frames + msgs:
            net_wait = self.net.charge(account, frames + msgs)
            if net_wait > 0:
                self.counters.add("throttled.net_share")
                if account == NEWCOMERS:  # which side of the tenure line the cap held
                    self.counters.add("throttled.net_share.newcomers")
                wait = max(wait, net_wait)
        if account == NEWCOMERS:
            # it reads again when the longest wait is over, its own budget's, the pool's
            # or the CPU cap's: noting a shorter one, a newcomer still asleep dropped out
            # of the pool's count after POOL_WINDOW_S and the pool shrank under the rest
            self._readers[peer] = trio.current_time() + wait
        if wait > 0:
            self.counters.add("throttled.reads")
            self.counters.add("throttled.ms", int(wait * 1000))
            deadline = wake_at(trio.current_time() + wait)
            if until is None:
                await trio.sleep_until(deadline)
                return
            with trio.move_on_at(deadline):
                await until.wait()

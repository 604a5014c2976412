"""IngestGuard: the ingestion time budget around ``IngestQueue.offer``.

Role: wrap the one verification call a node makes per received message so that
verification never takes more than ``sapo.ingest_max_share`` of wall time over a
30 s window: before verifying, the guard waits (in the worker thread, holding the
single in-flight offer) until the share is back under budget, while newer messages
wait in the transport's bounded, drop-oldest inbox, which counts what it drops.
(Verdicts on peers are the queue's own: ``IngestQueue.verdicts``.)

Hook: ``exchange.RolloutExchange``'s pump awaits ``guard.await_budget()`` on its
event loop (cancellable, so a stop is prompt) and then runs ``guard.offer(peer,
groups)`` in a worker thread.

Invariants:
- Offers are serialised by the caller (one in flight).
- ``report()["ingest_time_share"]`` is the measured ingestion share, for
  ``metrics.jsonl`` and status.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from typing import Protocol

from swarmnode.learn.groups import RolloutGroup
from swarmnode.share.ratelimit import TimeShare


class _Queue(Protocol):
    def offer(self, peer: str, groups: Sequence[RolloutGroup]) -> int: ...


class IngestGuard:
    def __init__(
        self,
        queue: _Queue,
        max_share: float,
        window_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.queue = queue
        self.budget = TimeShare(max_share, window_s, clock)
        self.clock, self.sleep = clock, sleep
        self.waited_s = 0.0

    async def await_budget(self) -> None:
        """Wait on the event loop until the next offer fits the time share."""
        while (wait := self.budget.wait_s()) > 0:
            self.waited_s += wait
            await asyncio.sleep(wait)

    def offer(self, peer: str, groups: Sequence[RolloutGroup]) -> int:
        """Wait for budget, then verify; returns groups kept."""
        while (wait := self.budget.wait_s()) > 0:
            self.waited_s += wait
            self.sleep(wait)
        start = self.clock()
        try:
            return self.queue.offer(peer, groups)
        finally:
            self.budget.record(start, self.clock())

    def report(self) -> dict[str, float]:
        return {
            "ingest_time_share": round(self.budget.share(), 3),
            "ingest_busy_s": round(self.budget.busy_total_s, 1),
            "ingest_budget_wait_s": round(self.waited_s, 1),
        }

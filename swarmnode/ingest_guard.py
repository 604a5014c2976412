"""IngestGuard: the ingestion time budget and peers' verdicts around ``IngestQueue.offer``.

Role: wrap the one verification call a node makes per received message so that
(1) verification never takes more than ``sapo.ingest_max_share`` of wall time over
a 30 s window: before verifying, the guard waits (in the worker thread, holding
the single in-flight offer) until the share is back under budget, while newer
messages wait in the transport's bounded, drop-oldest inbox, which counts what it
drops; and (2) each offer's outcome moves the sender's peer score: accepted groups
earn credit, failed verification and false reward claims cost (``PeerScores``).

Hook: ``exchange.RolloutExchange``'s pump awaits ``guard.await_budget()`` on its
event loop (cancellable, so a stop is prompt) and then runs ``guard.offer(peer,
groups)`` in a worker thread; the scores are its transport's ``peer_scores``.

Invariants:
- Offers are serialised by the caller (one in flight), so the verdicts read from
  the queue's counters before/after one offer are exactly that offer's.
- ``share()`` is the measured ingestion share, for ``metrics.jsonl`` and status.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from swarmnode.groups import RolloutGroup
from swarmnode.p2p.peerscore import PeerScores
from swarmnode.ratelimit import TimeShare

# IngestQueue refusal reasons that mean "this peer sent something false or unusable
# on purpose"; stale, duplicate, no_signal and the like can happen to honest peers.
FAILED_VERIFICATION = frozenset(
    {"out_of_catalog", "unregenerable", "question_mismatch", "heldout", "verifier_error"}
)


class _Queue(Protocol):
    stats: Any

    def offer(self, peer: str, groups: Sequence[RolloutGroup]) -> int: ...


class IngestGuard:
    def __init__(
        self,
        queue: _Queue,
        scores: PeerScores | None,
        max_share: float,
        window_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.queue = queue
        self.scores = scores
        self.budget = TimeShare(max_share, window_s, clock)
        self.clock, self.sleep = clock, sleep
        self.waited_s = 0.0

    async def await_budget(self) -> None:
        """Wait on the event loop until the next offer fits the time share."""
        while (wait := self.budget.wait_s()) > 0:
            self.waited_s += wait
            await asyncio.sleep(wait)

    def offer(self, peer: str, groups: Sequence[RolloutGroup]) -> int:
        """Wait for budget, verify, report the verdicts; returns groups kept."""
        while (wait := self.budget.wait_s()) > 0:
            self.waited_s += wait
            self.sleep(wait)
        stats = self.queue.stats
        before = (stats.accepted, Counter(stats.rejected), stats.claims_false)
        start = self.clock()
        try:
            return self.queue.offer(peer, groups)
        finally:
            self.budget.record(start, self.clock())
            if self.scores is not None:
                self._report(peer, before)

    def _report(self, peer: str, before: tuple[int, Counter[str], int]) -> None:
        stats = self.queue.stats
        accepted = stats.accepted - before[0]
        failed = sum(
            n - before[1].get(r, 0) for r, n in stats.rejected.items() if r in FAILED_VERIFICATION
        )
        false_claims = stats.claims_false - before[2]
        assert self.scores is not None
        if accepted:
            self.scores.report(peer, "accepted", accepted)
        if failed:
            self.scores.report(peer, "failed_verification", failed)
        if false_claims:
            self.scores.report(peer, "false_claim", false_claims)

    def report(self) -> dict[str, float]:
        return {
            "ingest_time_share": round(self.budget.share(), 3),
            "ingest_busy_s": round(self.budget.busy_total_s, 1),
            "ingest_budget_wait_s": round(self.waited_s, 1),
        }

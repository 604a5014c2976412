"""The node's network side: publish this node's groups, pump peers' into the ingest queue.

``RolloutExchange`` is the one object between a ``Transport`` and the node's rounds:

- publish: each round's groups leave as one wire message (halved until each part
  fits, ``encode_round``);
- ingest pump: a task on the event loop takes what the transport received, decodes it
  and hands it to ``IngestGuard.offer`` (``IngestQueue.offer``, verification, within
  the ingestion time budget) in a worker thread; the queue's verdicts (on arrival,
  or when a group is drawn with ``sapo.verify: when_drawn``) move the sender's score
  in the transport's ``peer_scores`` (graylisting): whoever makes the queue wires
  them there (``IngestQueue(verdicts=...)``, node.py);
- fail-stop: a dead transport or a crashed pump is recorded, shown in status
  (``swarm_failure``), asks the node to stop, and ``check()`` raises ``SwarmError``;
- status: ``status()`` reads the queue, the guard and the transport once into one
  ``ExchangeStatus``, from which both ``swarmnode status`` and each round record's
  network figures (``ExchangeStatus.with_figures``) come.

The data path reads in one direction: rollout (trainer) -> ``publish`` -> wire ->
transport -> pump -> ``IngestQueue`` -> ``SwarmSampler`` (node-side) -> GRPO.

Invariants:
- The event loop never does slow work: decoding a message (at most 1 MiB, strictly
  bounded) is done on the loop unless the libp2p transport's validator already
  decoded it (``Received.batch``, once per message), verification and encoding in
  worker threads.
- At most one ``offer`` is in flight, so verification never competes with more
  than itself for the CPU; while it runs, messages wait in the transport's bounded
  inbox.
- The pump wakes in batches: it takes up to ``PUMP_BATCH`` waiting messages, offers
  them in one worker call, then sleeps to the next multiple of ``PUMP_GRID_S``, so
  a flood wakes the loop and a worker ~10 times a second, not 3 times a message
  (under five Sybils the node's other threads woke 60-90 times a second, 86-100
  before: docs/experiments/2026-12-06-batch-wake).
  A message waits at most ``PUMP_GRID_S`` longer for it while fewer than
  ``PUMP_BATCH`` wait; the pump takes at most ``PUMP_BATCH / PUMP_GRID_S`` (320)
  messages a second, and the bounded inbox holds or drops (counted) the rest.
- Verification takes at most ``sapo.ingest_max_share`` of wall time: past it the pump
  waits on the loop (cancellable) before the next offer, and newer messages wait in
  the transport's bounded, drop-oldest inbox, which counts what it drops. The share
  is ``ingest_time_share`` in each round record and in status.
- Start-up costs are not charged to the share: the pump imports reasoning-gym before
  its first offer.
- Every wait has a timeout: the transport is polled every ``POLL_S``; an offer
  slower than ``SLOW_OFFER_S`` is logged (and waited for: it is bounded work, and a
  second concurrent one would break the invariant above).
- Fail-stop: a node that silently trained alone while claiming to be in a swarm
  would be worse than one that stops; the daemon checkpoints and exits 1.
- With ``swarm.target_msgs_per_s`` set, a round is published only on
  ``PublishRate``'s coin (``published.rounds_skipped`` counts the others), so a
  large swarm's total traffic stays near the target (swarmnode/share/publish_rate.py).
- A round is published only within ``OwnPace`` (half of what peers accept from one
  originator under this node's swarm settings); ``published.rounds_over_pace``
  counts the others, so a fast node is never rate-limited, scored down and
  graylisted by honest peers for rounds they would drop anyway.
- A batch that does not encode is halved until it does; a single group that still
  cannot be sent is dropped and counted (``publish_dropped``), never fatal.
- With J = 0 in a swarm, groups are still verified (cheap: see scripts/bench_swarm.py),
  so ``status`` shows what the swarm offers before one turns sharing on.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from swarmnode.config import Config
from swarmnode.errors import SwarmnodeError
from swarmnode.learn.groups import RolloutGroup
from swarmnode.learn.metrics import RoundRecord
from swarmnode.learn.tasks import preload
from swarmnode.share.ingest import IngestQueue
from swarmnode.share.ingest_guard import IngestGuard
from swarmnode.share.publish_rate import OwnPace, PublishRate
from swarmnode.share.swarmview import PeerBook
from swarmnode.share.transport import Received, Transport, TransportError, TransportStats
from swarmnode.share.wire import WireError, decode_batch, encode_batch

log = logging.getLogger("swarmnode.share.exchange")

POLL_S = 1.0  # how often the pump wakes without messages (checks the transport)
SLOW_OFFER_S = 30.0  # an offer slower than this is logged
PUMP_BATCH = 32  # messages offered in one worker call, at most
PUMP_GRID_S = 0.1  # after a batch the pump sleeps to the next multiple of this
DEAD_TRANSPORT = "the transport stopped unexpectedly (see the log above)"


class SwarmError(SwarmnodeError):
    """The network side failed while the node ran; the message says what."""

    exit_code = 1
    label = "swarm"


def encode_round(
    swarm: str, round_index: int, groups: Sequence[RolloutGroup], dropped: Counter[str]
) -> list[bytes]:
    """One message for the round's groups; halves on WireError until each part fits.

    A single group that cannot be encoded is left out and counted in ``dropped``."""
    if not groups:
        return []
    try:
        return [encode_batch(swarm, round_index, groups)]
    except WireError as err:
        if len(groups) == 1:
            dropped[err.reason] += 1
            log.warning("not publishing a group of round %d: %s", round_index, err)
            return []
    half = len(groups) // 2
    return encode_round(swarm, round_index, groups[:half], dropped) + encode_round(
        swarm, round_index, groups[half:], dropped
    )


@dataclass(frozen=True)
class IngestFigures:
    """What ingestion has done since start (the queue's and the guard's reports)."""

    queue_groups: int = 0  # peers' groups waiting
    queue_bytes: int = 0  # their text
    ingest_accepted: int = 0
    ingest_rejected: dict[str, int] = field(default_factory=dict)  # reason -> groups
    ingest_evicted: dict[str, int] = field(default_factory=dict)  # reason -> groups
    ingest_claims_false: int = 0  # groups whose claimed rewards differed from ours
    ingest_unverified: int = 0  # of accepted: queued on the cheap checks (when_drawn)
    ingest_late_verified: int = 0  # of those: verified when drawn
    ingest_late_verify_s: float = 0.0
    ingest_time_share: float = 0.0  # share of wall time verifying (sapo.ingest_max_share)
    ingest_busy_s: float = 0.0
    ingest_budget_wait_s: float = 0.0
    per_peer: dict[str, int] = field(default_factory=dict)  # peer -> groups waiting
    offers: int = 0  # messages handed to verification


@dataclass(frozen=True)
class ExchangeStatus:
    """The network side at one moment (``RolloutExchange.status``), JSON-able."""

    network: TransportStats
    ingest: IngestFigures = IngestFigures()
    swarm_failure: str | None = None  # why the network side failed, if it did
    decode_failures: dict[str, int] = field(default_factory=dict)  # reason -> messages
    published: dict[str, int] = field(default_factory=dict)  # messages, groups, bytes...
    publish_dropped: dict[str, int] = field(default_factory=dict)  # reason -> groups
    publish_p: float = 1.0  # the share of rounds published (swarm.target_msgs_per_s)
    heard_msgs_per_s: float | None = None  # what that share is set from

    def to_json(self) -> dict[str, Any]:
        """The exchange's keys of ``swarmnode status``'s node part (the network's are
        its swarm part)."""
        return {
            "swarm_failure": self.swarm_failure,
            "decode_failures": self.decode_failures,
            "published": self.published,
            "publish_dropped": self.publish_dropped,
            "publish_p": self.publish_p,
            "heard_msgs_per_s": self.heard_msgs_per_s,
            "ingest": dataclasses.asdict(self.ingest),
        }

    def with_figures(self, rec: RoundRecord) -> RoundRecord:
        """``rec`` with these ingestion and network figures filled in."""
        ing, net = self.ingest, self.network
        return dataclasses.replace(
            rec,
            queue_groups=ing.queue_groups,
            queue_bytes=ing.queue_bytes,
            ingest_accepted=ing.ingest_accepted,
            ingest_rejected=ing.ingest_rejected,
            peers=net["num_peers"],
            mesh=net["mesh_size"],
            msgs_in=net["msgs_in"],
            msgs_out=net["msgs_out"],
            msgs_rejected=net["rejected_total"],
            ingest_time_share=ing.ingest_time_share,
        )


class RolloutExchange:
    """Publish, ingest pump and fail-stop of one trainer node in a swarm."""

    def __init__(
        self,
        cfg: Config,
        transport: Transport,
        queue: IngestQueue,
        on_failure: Callable[[], None],
    ) -> None:
        self.cfg = cfg
        self.transport = transport
        self.queue = queue
        self.guard = IngestGuard(queue, cfg.sapo.ingest_max_share)
        self.on_failure = on_failure
        self.failure: str | None = None
        self.decode_failures: Counter[str] = Counter()
        self.publish_dropped: Counter[str] = Counter()
        self.published = Counter({"messages": 0, "groups": 0, "bytes": 0})
        self.offers = 0
        self.rate: PublishRate | None = None  # built at the first publish (needs the peer ID)
        sw = cfg.swarm
        self.pace = OwnPace(sw.origin_msgs_per_s, sw.origin_msgs_burst, sw.origin_groups_per_s)
        self.peers = PeerBook()  # what gossip says about each peer (dashboard)
        self._task: asyncio.Task[None] | None = None
        self._stopping = threading.Event()  # a batch being offered stops between messages

    # -- lifecycle ---------------------------------------------------------------

    async def start(self) -> None:
        """Bring the transport up and start the pump (peers may send while the model loads)."""
        await self.transport.start()
        self._task = asyncio.get_running_loop().create_task(self._pump(), name="ingest-pump")
        self._task.add_done_callback(self._task_done)

    async def stop(self) -> None:
        """Cancel the pump, stop the transport; a crash found here is recorded (``check``)."""
        self._stopping.set()
        if self._task is not None and not self._task.done():
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, TimeoutError):
                await asyncio.wait_for(self._task, SLOW_OFFER_S)
        try:
            await self.transport.stop()
        except TransportError as err:
            self._fail(str(err))

    def check(self) -> None:
        """Raise SwarmError if the network side has failed."""
        if self.failure is not None:
            raise SwarmError(self.failure)

    def _fail(self, message: str) -> None:
        if self.failure is None:
            self.failure = message
            log.error("swarm failure: %s; stopping the node", message)
            self.on_failure()

    def _task_done(self, task: asyncio.Task[None]) -> None:
        if task.cancelled():
            return
        err = task.exception()
        if isinstance(err, SwarmError):
            self._fail(str(err))
        elif err is not None:
            log.error("ingest pump crashed", exc_info=err)
            self._fail(f"ingest pump crashed: {err!r}")

    # -- intake ------------------------------------------------------------------

    async def _pump(self) -> None:
        transport, guard = self.transport, self.guard
        # The first regeneration would import reasoning-gym inside the first offer and
        # charge seconds of start-up to the time share, which then held every peer's
        # groups back for a whole window (a restarted node trained alone ~30 s).
        await asyncio.to_thread(preload)
        while True:
            item = await transport.receive(timeout=POLL_S)
            if not transport.running:
                raise SwarmError(DEAD_TRANSPORT)
            if item is None:
                continue
            items = [item]
            while len(items) < PUMP_BATCH and (more := await transport.receive(0.0)) is not None:
                items.append(more)
            work = [d for d in map(self._decoded, items) if d is not None]
            if work:
                await guard.await_budget()  # past the ingestion time share: wait here
                for (peer, groups), kept in zip(work, await self._offer(work), strict=False):
                    self.peers.verdicts(peer, len(groups), kept)
                    self.offers += 1
            await asyncio.sleep(PUMP_GRID_S - time.monotonic() % PUMP_GRID_S)

    def _decoded(self, item: Received) -> tuple[str, list[RolloutGroup]] | None:
        """The sender and groups of one message (counted in ``decode_failures`` and
        None if it does not decode); the dashboard hears of them here."""
        try:  # decoded by the transport's validator (our decoder), or here
            batch = item.batch if item.batch is not None else decode_batch(item.payload)
            groups = batch.rollout_groups(item.peer_id)
        except WireError as err:
            self.decode_failures[err.reason] += 1
            return None
        self.peers.heard(item.peer_id, batch.round, groups)
        return item.peer_id, groups

    async def _offer(self, work: list[tuple[str, list[RolloutGroup]]]) -> list[int]:
        """Offer each message's groups in turn in one worker call; the groups kept of
        each, fewer entries than ``work`` if the exchange stopped meanwhile. Waited for
        however long it takes (one offer at a time), logged past ``SLOW_OFFER_S``."""
        guard, stopping = self.guard, self._stopping

        def offer_all() -> list[int]:
            kept = []
            for peer, groups in work:
                if stopping.is_set():
                    break
                kept.append(guard.offer(peer, groups))
            return kept

        offer = asyncio.ensure_future(asyncio.to_thread(offer_all))
        t0 = time.monotonic()
        while True:
            try:
                return await asyncio.wait_for(asyncio.shield(offer), SLOW_OFFER_S)
            except TimeoutError:
                n = sum(len(groups) for _, groups in work)
                log.warning("verifying %d groups has taken %.0fs", n, time.monotonic() - t0)

    # -- each round --------------------------------------------------------------

    async def publish(self, round_index: int, groups: Sequence[RolloutGroup]) -> int:
        """Share the round's groups (one message unless too large); return bytes queued."""
        if not self.cfg.sapo.publish or not groups:
            return 0
        if not self._publish_this_round(round_index):
            self.published["rounds_skipped"] += 1
            return 0
        if not self.pace.admit(len(groups)):
            self.published["rounds_over_pace"] += 1
            return 0
        if not self.transport.running:  # died since the pump last looked
            self._fail(DEAD_TRANSPORT)
            return 0
        payloads = await asyncio.to_thread(
            encode_round, self.cfg.swarm.name, round_index, list(groups), self.publish_dropped
        )
        try:
            for p in payloads:
                await self.transport.publish(p)
        except TransportError as err:  # died while the batch was encoded
            self._fail(f"{DEAD_TRANSPORT}: {err}")
            return 0
        self.pace.charge_extra_messages(len(payloads) - 1)
        self.published["messages"] += len(payloads)
        self.published["groups"] += len(groups)
        self.published["bytes"] += sum(len(p) for p in payloads)
        return sum(len(p) for p in payloads)

    def _publish_this_round(self, round_index: int) -> bool:
        """``swarm.target_msgs_per_s`` unset: always. Else ``PublishRate``'s coin."""
        target = self.cfg.swarm.target_msgs_per_s
        if target is None:
            return True
        if self.rate is None:
            self.rate = PublishRate(target, self.transport.peer_id)
        self.rate.observe(int(self.transport.stats()["msgs_in"]))
        return self.rate.publish(round_index)

    def status(self) -> ExchangeStatus:
        """The queue's, the guard's and the transport's figures, read once."""
        budget = self.guard.report()
        ingest = IngestFigures(
            **self.queue.report(),
            ingest_time_share=budget["ingest_time_share"],
            ingest_busy_s=budget["ingest_busy_s"],
            ingest_budget_wait_s=budget["ingest_budget_wait_s"],
            per_peer=self.queue.per_peer(),
            offers=self.offers,
        )
        rate = self.rate
        return ExchangeStatus(
            network=self.transport.stats(),
            ingest=ingest,
            swarm_failure=self.failure,
            decode_failures=dict(self.decode_failures),
            published=dict(self.published),
            publish_dropped=dict(self.publish_dropped),
            publish_p=round(rate.p, 4) if rate else 1.0,
            heard_msgs_per_s=round(rate.heard_per_s, 2) if rate and rate.heard_per_s else None,
        )

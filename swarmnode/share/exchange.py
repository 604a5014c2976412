"""The node's network side: publish this node's groups, pump peers' into the ingest queue.

``RolloutExchange`` is the one object between a ``Transport`` and the node's rounds:

- publish: each round's groups leave as one wire message (halved until each part
  fits, ``encode_round``);
- ingest pump: a task on the event loop takes what the transport received, decodes it
  and hands it to ``IngestGuard.offer`` (``IngestQueue.offer``, verification, within
  the ingestion time budget) in a worker thread; the queue's verdicts (on arrival,
  or when a group is drawn with ``sapo.verify: when_drawn``) move the sender's score
  in the transport's ``peer_scores`` (graylisting);
- fail-stop: a dead transport or a crashed pump is recorded, shown in status
  (``swarm_failure``), asks the node to stop, and ``check()`` raises ``SwarmError``.

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
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from swarmnode.config import Config
from swarmnode.errors import SwarmnodeError
from swarmnode.learn.groups import RolloutGroup
from swarmnode.learn.metrics import RoundRecord
from swarmnode.learn.tasks import preload
from swarmnode.share.ingest import IngestQueue
from swarmnode.share.ingest_guard import IngestGuard
from swarmnode.share.publish_rate import PublishRate
from swarmnode.share.swarmview import PeerBook
from swarmnode.share.transport import Transport, TransportError
from swarmnode.share.wire import WireError, decode_batch, encode_batch

log = logging.getLogger("swarmnode.share.exchange")

POLL_S = 1.0  # how often the pump wakes without messages (checks the transport)
SLOW_OFFER_S = 30.0  # an offer slower than this is logged
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
        scores = transport.peer_scores
        if scores is not None:  # ingestion's verdicts move the senders' scores
            queue.verdicts = scores.report
        self.on_failure = on_failure
        self.failure: str | None = None
        self.decode_failures: Counter[str] = Counter()
        self.publish_dropped: Counter[str] = Counter()
        self.published = Counter({"messages": 0, "groups": 0, "bytes": 0})
        self.offers = 0
        self.rate: PublishRate | None = None  # built at the first publish (needs the peer ID)
        self.peers = PeerBook()  # what gossip says about each peer (dashboard)
        self._task: asyncio.Task[None] | None = None

    # -- lifecycle ---------------------------------------------------------------

    async def start(self) -> None:
        """Bring the transport up and start the pump (peers may send while the model loads)."""
        await self.transport.start()
        self._task = asyncio.get_running_loop().create_task(self._pump(), name="ingest-pump")
        self._task.add_done_callback(self._task_done)

    async def stop(self) -> None:
        """Cancel the pump, stop the transport; a crash found here is recorded (``check``)."""
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
            try:  # decoded by the transport's validator (our decoder), or here
                batch = item.batch if item.batch is not None else decode_batch(item.payload)
                groups = batch.rollout_groups(item.peer_id)
            except WireError as err:
                self.decode_failures[err.reason] += 1
                continue
            self.peers.heard(item.peer_id, batch.round, groups)
            await guard.await_budget()  # past the ingestion time share: wait here
            offer = asyncio.ensure_future(asyncio.to_thread(guard.offer, item.peer_id, groups))
            t0 = time.monotonic()
            while True:
                try:
                    await asyncio.wait_for(asyncio.shield(offer), SLOW_OFFER_S)
                    break
                except TimeoutError:
                    log.warning(
                        "verifying %d groups has taken %.0fs", len(groups), time.monotonic() - t0
                    )
            self.peers.verdicts(item.peer_id, len(groups), offer.result())
            self.offers += 1

    # -- each round --------------------------------------------------------------

    async def publish(self, round_index: int, groups: Sequence[RolloutGroup]) -> int:
        """Share the round's groups (one message unless too large); return bytes queued."""
        if not self.cfg.sapo.publish or not groups:
            return 0
        if not self._publish_this_round(round_index):
            self.published["rounds_skipped"] += 1
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

    def with_figures(self, rec: RoundRecord) -> RoundRecord:
        """``rec`` with the queue's and the transport's figures filled in."""
        rep = self.queue.report()
        st = self.transport.stats()
        return dataclasses.replace(
            rec,
            queue_groups=rep["queue_groups"],
            queue_bytes=rep["queue_bytes"],
            ingest_accepted=rep["ingest_accepted"],
            ingest_rejected=rep["ingest_rejected"],
            peers=st["num_peers"],
            mesh=st["mesh_size"],
            msgs_in=st["msgs_in"],
            msgs_out=st["msgs_out"],
            msgs_rejected=st["rejected_total"],
            ingest_time_share=self.guard.report()["ingest_time_share"],
        )

    def status(self) -> dict[str, Any]:
        """The network-side part of ``swarmnode status`` (JSON-able)."""
        ingest: dict[str, Any] = self.queue.report()
        ingest["per_peer"] = self.queue.per_peer()
        ingest["offers"] = self.offers
        ingest.update(self.guard.report())
        return {
            "swarm_failure": self.failure,
            "decode_failures": dict(self.decode_failures),
            "published": dict(self.published),
            "publish_dropped": dict(self.publish_dropped),
            "publish_p": round(self.rate.p, 4) if self.rate else 1.0,
            "heard_msgs_per_s": (
                round(self.rate.heard_per_s, 2) if self.rate and self.rate.heard_per_s else None
            ),
            "ingest": ingest,
        }

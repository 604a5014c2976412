"""The network side of a trainer node: gossip out, verified ingestion in, sampling.

``SwarmLink`` glues the pieces the daemon needs around its rounds:
``GossipTransport`` (libp2p in its own trio thread), the ``IngestQueue`` that
verifies what peers share, the ``SwarmSampler`` that composes each update, and the
figures that ``metrics.jsonl`` and ``swarmnode status`` show.

Data flow: transport inbox (bounded, drop-oldest) -> ingest task on the event loop
(decode) -> ``IngestQueue.offer`` in a worker thread (regenerate, re-score) ->
queue (bounded) -> ``SwarmSampler.compose`` at the end of each round.

Invariants:
- The event loop never does slow work: decoding a message (at most 1 MiB, strictly
  bounded) is done on the loop, verification and encoding in worker threads.
- At most one ``offer`` is in flight, so verification never competes with more
  than itself for the CPU; while it runs, messages wait in the bounded inbox.
- Every wait has a timeout: the inbox is polled every second; an offer slower than
  ``SLOW_OFFER_S`` is logged (and waited for: it is bounded work, and a second
  concurrent one would break the invariant above).
- Fail-stop: if the libp2p thread dies or the ingest task raises, the failure is
  logged, shown in status (``swarm_failure``), the node's stop is requested and
  ``check()`` raises ``SwarmError``; the daemon checkpoints and exits non-zero. A
  node that silently trained alone while claiming to be in a swarm would be worse.
- A batch that does not encode is halved until it does; a single group that still
  cannot be sent is dropped and counted (``publish_dropped``), never fatal.
- With ``swarm.enabled`` false there is no transport and no queue: the sampler sees
  no external groups and reports the shortfall when J > 0. With J = 0 in a swarm,
  groups are still verified (cheap: see scripts/bench_swarm.py), so ``status`` shows
  what the swarm offers before one turns sharing on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from swarmnode.config import Config
from swarmnode.groups import RolloutGroup
from swarmnode.ingest import Catalog, IngestQueue, Scorer
from swarmnode.sampler import Composition, SwarmSampler

log = logging.getLogger("swarmnode.swarm")

POLL_S = 1.0  # how often the ingest task wakes without messages (checks the transport)
SLOW_OFFER_S = 30.0  # an offer slower than this is logged
DEAD_THREAD = "the libp2p thread stopped unexpectedly (see the log above)"


class SwarmError(Exception):
    """The network side failed while the node ran; the message says what."""


def encode_round(
    swarm: str, round_index: int, groups: Sequence[RolloutGroup], dropped: Counter[str]
) -> list[bytes]:
    """One message for the round's groups; halves on WireError until each part fits.

    A single group that cannot be encoded is left out and counted in ``dropped``."""
    from swarmnode.p2p.wire import WireError, encode_batch

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


class SwarmLink:
    """Transport + ingestion + sampler of one trainer node."""

    def __init__(self, cfg: Config, data_dir: Path, on_failure: Callable[[], None]) -> None:
        self.cfg = cfg
        self.data_dir = Path(data_dir)
        self.on_failure = on_failure
        self.transport: Any = None  # GossipTransport when swarm.enabled
        if cfg.swarm.enabled:
            from swarmnode.p2p.transport import GossipTransport

            self.transport = GossipTransport(cfg.swarm, self.data_dir)
        self.queue: IngestQueue | None = None
        self.sampler = SwarmSampler(cfg.sapo, None, seed=cfg.train.seed)
        self.failure: str | None = None
        self.decode_failures: Counter[str] = Counter()
        self.publish_dropped: Counter[str] = Counter()
        self.published = Counter({"messages": 0, "groups": 0, "bytes": 0})
        self.trained_from: Counter[str] = Counter()  # peer -> external groups trained on
        self.offers = 0
        self._task: asyncio.Task[None] | None = None

    # -- lifecycle ---------------------------------------------------------------

    async def start_network(self) -> None:
        """Bring libp2p up (before the model loads: peers can connect meanwhile)."""
        if self.transport is not None:
            await self.transport.start()

    def start_ingest(self, score: Scorer) -> None:
        """Start verifying what peers send, with the trainer's own scorer."""
        if self.transport is None:
            return
        cfg = self.cfg
        catalog = Catalog([*cfg.tasks.datasets, *cfg.sapo.extra_catalog])
        self.queue = IngestQueue(cfg.sapo, catalog, score)
        self.sampler.queue = self.queue
        self._task = asyncio.get_running_loop().create_task(self._ingest(), name="ingest")
        self._task.add_done_callback(self._task_done)

    async def stop(self) -> None:
        """Cancel ingestion, stop libp2p; a crash found here is recorded (see ``check``)."""
        if self._task is not None and not self._task.done():
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, TimeoutError):
                await asyncio.wait_for(self._task, SLOW_OFFER_S)
        if self.transport is not None:
            from swarmnode.p2p.transport import TransportError

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
            log.error("ingest task crashed", exc_info=err)
            self._fail(f"ingest task crashed: {err!r}")

    # -- intake ------------------------------------------------------------------

    async def _ingest(self) -> None:
        from swarmnode.p2p.wire import WireError, decode_batch

        transport, queue = self.transport, self.queue
        assert transport is not None and queue is not None
        while True:
            item = await transport.inbox.get(timeout=POLL_S)
            if not transport.running:
                raise SwarmError(DEAD_THREAD)
            if item is None:
                continue
            try:  # validated in the libp2p thread already; re-checked, never trusted
                groups = decode_batch(item.payload).rollout_groups(item.peer_id)
            except WireError as err:
                self.decode_failures[err.reason] += 1
                continue
            offer = asyncio.ensure_future(asyncio.to_thread(queue.offer, item.peer_id, groups))
            t0 = time.monotonic()
            while True:
                try:
                    await asyncio.wait_for(asyncio.shield(offer), SLOW_OFFER_S)
                    break
                except TimeoutError:
                    log.warning(
                        "verifying %d groups has taken %.0fs", len(groups), time.monotonic() - t0
                    )
            self.offers += 1

    # -- each round --------------------------------------------------------------

    async def publish(self, round_index: int, groups: Sequence[RolloutGroup]) -> int:
        """Share the round's groups (one message unless too large); return bytes queued."""
        if self.transport is None or not self.cfg.sapo.publish or not groups:
            return 0
        if not self.transport.running:  # died since the ingest task last looked
            self._fail(DEAD_THREAD)
            return 0
        payloads = await asyncio.to_thread(
            encode_round, self.cfg.swarm.name, round_index, list(groups), self.publish_dropped
        )
        for p in payloads:
            await self.transport.publish(p)
        self.published["messages"] += len(payloads)
        self.published["groups"] += len(groups)
        self.published["bytes"] += sum(len(p) for p in payloads)
        return sum(len(p) for p in payloads)

    def compose(self, round_index: int, local: Sequence[RolloutGroup]) -> Composition:
        """This round's training batch (call from a worker thread: it takes the queue lock)."""
        return self.sampler.compose(round_index, local)

    def round_metrics(self, comp: Composition, published_bytes: int) -> dict[str, Any]:
        """The round's network figures (call on the event loop)."""
        by_peer = Counter(g.origin for g in comp.groups if not g.is_local)
        self.trained_from.update(by_peer)
        rec: dict[str, Any] = {
            "local_groups": comp.local,
            "external_groups": comp.external,
            "external_peers": comp.external_peers,
            "external_shortfall": comp.shortfall,
            "external_by_peer": dict(by_peer),
            "published_bytes": published_bytes,
        }
        if self.queue is not None:
            rep = self.queue.report()
            rec.update(
                queue_groups=rep["queue_groups"],
                queue_bytes=rep["queue_bytes"],
                ingest_accepted=rep["ingest_accepted"],
                ingest_rejected=rep["ingest_rejected"],
            )
        if self.transport is not None:
            st = self.transport.stats()
            rec.update(
                peers=st["num_peers"],
                mesh=st["mesh_size"],
                msgs_in=st["msgs_in"],
                msgs_out=st["msgs_out"],
                msgs_rejected=st["rejected_total"],
            )
        return rec

    def status(self) -> dict[str, Any]:
        """The network-side part of ``swarmnode status`` (JSON-able)."""
        out: dict[str, Any] = {
            "swarm_failure": self.failure,
            "decode_failures": dict(self.decode_failures),
            "published": dict(self.published),
            "publish_dropped": dict(self.publish_dropped),
            "trained_from": dict(self.trained_from),
            "sapo": {
                "mode": self.cfg.sapo.mode,
                "local_groups": self.cfg.sapo.local_groups,
                "external_groups": self.cfg.sapo.external_groups,
            },
        }
        if self.queue is not None:
            out["ingest"] = self.queue.report()
            out["ingest"]["per_peer"] = self.queue.per_peer()
            out["ingest"]["offers"] = self.offers
        if self.cfg.sapo.mode == "adaptive":
            trust = self.sampler.peer_trust.copy()  # written by the round thread
            out["peer_trust"] = {p: round(t, 3) for p, t in trust.items()}
        return out

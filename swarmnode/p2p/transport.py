"""GossipTransport: the asyncio node's handle on the libp2p swarm.

Role: start the libp2p host (``host.P2PHost``) in a dedicated trio thread and expose
it as a ``swarmnode.share.transport.Transport``: ``start``, ``publish``, ``receive``,
``stats``, ``stop``.

Why a dedicated trio thread and not trio guest mode on the uvloop loop: in guest
mode trio's tasks run *as callbacks of the asyncio loop*, so anything that holds the
asyncio loop (a slow synchronous call, a long ``json.dumps``, an accidental
blocking call in the trainer's glue) would also freeze gossipsub heartbeats,
validators and peer handshakes. py-libp2p 0.8.1 is pure trio (its own
``anyio_service`` manager, trio channels, trio sockets), so it runs unmodified under
``trio.run`` in its own thread, and the issue's rule "a 60-second training step
must not stall gossip" then holds even when the asyncio loop itself is blocked:
messages keep arriving, are validated and stamped in the trio thread, and wait in
the bounded inbox. Cost: Python code in both threads shares the GIL; the heavy work
(torch generation/backward) releases it. ``p2p.netproc`` runs this transport in a
child process instead (``swarm.net_process``), where it shares no GIL with training.

Invariants:
- The two threads share only ``bridge`` objects (bounded, drop-oldest, counted) and
  a stats snapshot. Calls into trio use ``TrioToken.run_sync_soon``, which never
  waits for the trio thread.
- Every wait here has a timeout: start-up (``startup_timeout``), shutdown
  (``cfg.shutdown_timeout_s`` plus a margin for the thread join).
- A crash of the trio thread is not swallowed: it is logged, counted
  (``thread_crashed``), visible in ``stats()["running"]`` and re-raised by ``stop``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from pathlib import Path
from typing import Any

import trio

from swarmnode.config import SwarmConfig
from swarmnode.p2p.bridge import Outbox
from swarmnode.p2p.host import HostInfo, P2PHost
from swarmnode.p2p.identity import identity_path, load_or_create_identity, load_psk
from swarmnode.p2p.netshare import batch_thread
from swarmnode.share.inbox import Counters, Inbox
from swarmnode.share.peerscore import PeerScores
from swarmnode.share.transport import Received, Transport, TransportError, TransportStats
from swarmnode.share.wire import MAX_MESSAGE_BYTES, WireError

log = logging.getLogger("swarmnode.p2p")


class _ToSwarmnodeLog(logging.Handler):
    """Hands py-libp2p's records to the root logger's handlers, one line each (py-libp2p
    puts whole exception chains in a message)."""

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if "\n" in message:
            record.msg, record.args = " | ".join(message.splitlines()), ()
        logging.getLogger().handle(record)


def route_libp2p_logging() -> None:
    """Send py-libp2p's records through swarmnode's handlers, one line each, errors only
    (warnings too when swarmnode logs at debug): its peer routing warns every few
    seconds, in seven lines, about each peer that does not run the DHT.

    py-libp2p's import cuts its loggers off (no handler, no propagation), so its
    warnings reached stderr raw through logging's last-resort handler. Left alone when
    ``LIBP2P_DEBUG`` is set: then py-libp2p's own logging setup is wanted."""
    if os.environ.get("LIBP2P_DEBUG"):
        return
    libp2p = logging.getLogger("libp2p")
    debug = logging.getLogger("swarmnode").getEffectiveLevel() <= logging.DEBUG
    level = logging.WARNING if debug else logging.ERROR
    # The level sits on the handler too: some py-libp2p modules set their own logger
    # to INFO, and a child's records reach this handler whatever the parent's level.
    handler = _ToSwarmnodeLog(level)
    libp2p.handlers[:] = [handler]
    libp2p.propagate = False
    libp2p.setLevel(level)


__all__ = ["GossipTransport", "TransportError"]


class GossipTransport(Transport):
    """Publish and receive rollout batches on ``/swarmnode/<name>/rollouts/1``."""

    def __init__(self, cfg: SwarmConfig, data_dir: Path, startup_timeout: float = 30.0) -> None:
        route_libp2p_logging()
        self.cfg = cfg
        self.data_dir = Path(data_dir)
        self.startup_timeout = startup_timeout
        self.counters = Counters()
        self.inbox = Inbox(cfg.inbox_size, self.counters)
        self.outbox = Outbox(cfg.outbox_size, self.counters)
        self.scores = PeerScores(cfg.graylist_score, cfg.graylist_s)  # shared with the host
        self.info: HostInfo | None = None
        self._host: P2PHost | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._started_at = 0.0

    @property
    def peer_id(self) -> str:
        if self.info is None:
            raise TransportError("transport not started")
        return self.info.peer_id

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    @property
    def peer_scores(self) -> PeerScores:
        return self.scores

    async def start(self) -> None:
        """Bring the host up: listening, subscribed, bootstrap dialling in the background."""
        if self._thread is not None:
            raise TransportError("already started")
        key_pair, created = load_or_create_identity(identity_path(self.data_dir, self.cfg.key_file))
        if created:
            log.info("created a new identity in %s", self.data_dir)
        psk = load_psk(Path(self.cfg.psk_file).expanduser()) if self.cfg.psk_file else None
        self._host = P2PHost(
            self.cfg, key_pair, psk, self.inbox, self.outbox, self.counters, self.scores
        )
        loop = asyncio.get_running_loop()
        self.inbox.bind(loop)
        started: asyncio.Future[HostInfo] = loop.create_future()

        def report(result: HostInfo | BaseException) -> None:
            if started.done():
                return
            if isinstance(result, BaseException):
                started.set_exception(result)
            else:
                started.set_result(result)

        def notify(result: HostInfo | BaseException) -> None:
            if not loop.is_closed():
                loop.call_soon_threadsafe(report, result)

        self._thread = threading.Thread(
            target=self._thread_main, args=(notify,), name="swarmnode-libp2p", daemon=True
        )
        self._thread.start()
        try:
            self.info = await asyncio.wait_for(started, self.startup_timeout)
        except TimeoutError:
            await self._shutdown()
            raise TransportError(f"libp2p host did not start in {self.startup_timeout}s") from None
        except Exception as err:
            await self._shutdown()
            raise TransportError(f"libp2p host failed to start: {err!r}") from err
        if self.cfg.listen and not self.info.listen_addrs:  # py-libp2p only logs each failure
            await self._shutdown()
            listen = ", ".join(self.cfg.listen)
            raise TransportError(f"swarm.listen: could not listen on any of {listen}")
        self._started_at = time.time()
        log.info("libp2p up as %s on %s", self.info.peer_id, ", ".join(self.info.listen_addrs))

    def _thread_main(self, notify: Any) -> None:
        host = self._host
        assert host is not None
        if self.cfg.batch_threads:  # its wake-ups wait for the trainer's time slice
            batch_thread()

        async def main() -> None:
            self._token = trio.lowlevel.current_trio_token()
            self.outbox.bind(lambda: self._call_soon(host.wake_publisher))
            async with trio.open_nursery() as nursery:
                info = await nursery.start(host.run)
                notify(info)

        try:
            trio.run(main)
        except BaseException as err:  # the thread's top: record, log, report; never lost
            if host.stop_event.is_set():
                # A py-libp2p teardown race after stop() was asked: the node is going
                # away anyway, so count and log it rather than fail the caller's stop.
                self.counters.add("shutdown_error")
                log.warning("libp2p raised while shutting down: %r", err, exc_info=err)
                return
            self._error = err
            self.counters.add("thread_crashed")
            log.error("libp2p thread ended with an error: %r", err, exc_info=err)
            notify(err)

    def _call_soon(self, fn: Any) -> None:
        token = self._token
        if token is None:
            return
        try:
            token.run_sync_soon(fn)
        except trio.RunFinishedError:
            self.counters.add("call_after_stop")

    async def publish(self, payload: bytes) -> None:
        """Queue one encoded batch for publishing; returns at once (bounded outbox)."""
        if not self.running:
            raise TransportError("transport not running")
        if len(payload) > MAX_MESSAGE_BYTES:
            raise WireError("too_large", f"{len(payload)} bytes > {MAX_MESSAGE_BYTES}")
        self.outbox.put(bytes(payload))

    async def receive(self, timeout: float) -> Received | None:
        """The next validated message from the inbox, or None after ``timeout`` seconds."""
        return await self.inbox.get(timeout=timeout)

    def stats(self) -> TransportStats:
        """Identity, addresses, peers, mesh, counters (``TransportStats``, with the keys
        only this transport gives)."""
        snap = self._host.snapshot() if self._host is not None else {}
        counters = self.counters.snapshot()
        rejected = {
            k.removeprefix("rejected."): v for k, v in counters.items() if k.startswith("rejected.")
        }
        return {
            "running": self.running,
            "peer_id": self.info.peer_id if self.info else None,
            "listen_addrs": snap.get("listen_addrs", self.info.listen_addrs if self.info else []),
            "topic": snap.get("topic"),
            "connected_peers": snap.get("connected_peers", []),
            "num_peers": len(snap.get("connected_peers", [])),
            "topic_peers": snap.get("topic_peers", 0),
            "mesh_size": snap.get("mesh_size", 0),
            "dht_routing_table": snap.get("dht_routing_table", 0),
            "dht_lookups_deferred": snap.get("dht_lookups_deferred", 0),
            "peer_scores": snap.get("peer_scores", {}),  # lowest first; see p2p.peerscore
            "graylisted": snap.get("graylisted", []),
            # reachability (AutoNAT), relay slots held/served, direct vs relayed peers
            "nat": snap.get("nat", {}),
            # CPU share outside training, its cap, the level heavy peers are held to
            "reading": snap.get("reading", {}),
            "msgs_in": counters.get("msgs_in", 0),
            "msgs_out": counters.get("msgs_out", 0),
            "bytes_in": counters.get("bytes_in", 0),
            "bytes_out": counters.get("bytes_out", 0),
            "rejected": rejected,
            "rejected_total": sum(rejected.values()),
            "inbox_len": len(self.inbox),
            "inbox_dropped": counters.get("inbox_dropped", 0),
            "outbox_dropped": counters.get("outbox_dropped", 0),
            "counters": counters,
            "uptime_s": time.time() - self._started_at if self._started_at else 0.0,
        }

    async def stop(self) -> None:
        """Shut the host down (bounded by cfg.shutdown_timeout_s) and join the thread.

        Raises TransportError if the libp2p thread had crashed while running."""
        await self._shutdown()
        err = self._error
        if err is not None and not isinstance(err, KeyboardInterrupt):
            self._error = None
            raise TransportError(f"libp2p thread failed: {err!r}") from err

    async def _shutdown(self) -> None:
        thread, host = self._thread, self._host
        if thread is None or host is None:
            return
        self._call_soon(host.stop_event.set)
        join_timeout = self.cfg.shutdown_timeout_s + 5.0
        await asyncio.get_running_loop().run_in_executor(None, thread.join, join_timeout)
        if thread.is_alive():
            self.counters.add("stop_timeout")
            log.error("libp2p thread still alive %.0fs after stop; abandoning it", join_timeout)
        self._thread = None

"""The ``bootstrap`` role daemon: a node that only routes gossip (no model, no GPU).

Role: keep a well-known address up that new nodes dial first. Its transport joins
the topic (so it relays and keeps meshes together) and serves the DHT so nodes learn
each other; the node answers the control endpoint and discards what it receives.
It runs under the same runner as the trainer (``daemon.run_daemon``): ``swarmnode
start`` with ``swarm.role: bootstrap``.

Invariants:
- Never trains, never touches torch: importable and runnable on a small VPS.
- The loop wakes at least every ``POLL_S`` (taking and discarding what arrived, so
  nothing piles up) and logs a stats line every ``log_every_s``; it ends when
  ``stop`` is set, and shutdown happens in ``finally`` with the transport's timeouts.
- Fail-stop: a transport that dies ends the loop, and ``stop`` re-raises its error.
- The control socket and the monitor get ``status`` (one
  ``ops.status.BootstrapStatus``, built there only), never the node.
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

from swarmnode.config import Config
from swarmnode.learn.metrics import rss_mb
from swarmnode.ops.control import ControlServer
from swarmnode.ops.monitor import MonitorServer, start_monitor
from swarmnode.ops.status import BootstrapStatus
from swarmnode.share.transport import Transport

log = logging.getLogger("swarmnode.bootstrap")

POLL_S = 1.0


class BootstrapNode:
    """A routing-only swarm member (``transport`` given: tests)."""

    def __init__(
        self, cfg: Config, transport: Transport | None = None, log_every_s: float = 60.0
    ) -> None:
        if transport is None:
            from swarmnode.p2p.transport import GossipTransport

            transport = GossipTransport(cfg.swarm, Path(cfg.node.data_dir))
        self.cfg = cfg
        self.data_dir = Path(cfg.node.data_dir)
        self.transport = transport
        self.stop = threading.Event()
        self.log_every_s = log_every_s
        self.state = "starting"
        self.monitor: MonitorServer | None = None  # /metrics and the dashboard

    def status(self) -> BootstrapStatus:
        """What this node says about itself (``swarmnode status``, the monitor)."""
        return BootstrapStatus(
            name=self.cfg.node.name,
            state=self.state,
            swarm=self.cfg.swarm.name,
            network=self.transport.stats(),
            rss_mb=rss_mb(),
            now=time.time(),
        )

    async def run(self) -> None:
        """Route until ``stop`` is set or the transport dies."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        control = ControlServer(self.data_dir, self.status)
        await control.start()  # first: refuses a second node on the same data_dir
        try:
            self.monitor = await start_monitor(self.cfg.monitor, self.status)
            await self.transport.start()
            for addr in self.transport.stats()["listen_addrs"]:
                log.info("bootstrap address: %s", addr)
            self.state = "routing"
            next_log = time.monotonic() + self.log_every_s
            while not self.stop.is_set():
                await self.transport.receive(POLL_S)  # relayed already: keep nothing
                if not self.transport.running:  # crashed: stop() below re-raises it
                    log.error("the transport stopped; shutting the bootstrap node down")
                    break
                if time.monotonic() >= next_log:
                    st = self.transport.stats()
                    log.info(
                        "peers=%d mesh=%d in=%d out=%d rejected=%s",
                        st["num_peers"],
                        st["mesh_size"],
                        st["msgs_in"],
                        st["msgs_out"],
                        st["rejected"],
                    )
                    next_log = time.monotonic() + self.log_every_s
        finally:
            self.state = "stopping"
            if self.monitor is not None:
                await self.monitor.stop()
            await control.stop()
            await self.transport.stop()

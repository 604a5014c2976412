"""The ``bootstrap`` role: a libp2p node that only routes gossip (no model, no GPU).

Role: keep a well-known address up that new nodes dial first. It joins the topic
(so it relays and keeps meshes together), serves the DHT so nodes learn each
other, answers the control endpoint, and discards what it receives.

Invariants:
- Never trains, never touches torch: importable and runnable on a small VPS.
- The wait loop wakes at least every second (drains the inbox, so nothing piles
  up) and logs a stats line every ``log_every_s``; it exits when ``stop_event``
  is set, and shutdown happens in ``finally`` with the transport's own timeouts.

Run directly: ``python -m swarmnode.p2p.standalone configs/bootstrap.yaml``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys
import time
from pathlib import Path

from swarmnode.config import Config, ConfigError, load_config
from swarmnode.p2p.control import ControlServer
from swarmnode.p2p.transport import GossipTransport

log = logging.getLogger("swarmnode.p2p")


async def run_bootstrap(
    cfg: Config, data_dir: Path, stop_event: asyncio.Event, log_every_s: float = 60.0
) -> None:
    """Run a routing-only node until ``stop_event`` is set."""
    transport = GossipTransport(cfg.swarm, data_dir)
    control = ControlServer(data_dir, transport, lambda: {"role": "bootstrap"})
    data_dir.mkdir(parents=True, exist_ok=True)
    await control.start()  # first: refuses a second node on the same data_dir
    try:
        await transport.start()
        for addr in transport.stats()["listen_addrs"]:
            log.info("bootstrap address: %s", addr)
        next_log = time.monotonic() + log_every_s
        while not stop_event.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop_event.wait(), 1.0)
            transport.inbox.drain()  # relayed already; a bootstrap node keeps nothing
            if not transport.running:  # crashed: stop() below re-raises it (fail-stop)
                log.error("libp2p thread stopped; shutting the bootstrap node down")
                break
            if time.monotonic() >= next_log:
                st = transport.stats()
                log.info(
                    "peers=%d mesh=%d in=%d out=%d rejected=%s",
                    st["num_peers"],
                    st["mesh_size"],
                    st["msgs_in"],
                    st["msgs_out"],
                    st["rejected"],
                )
                next_log = time.monotonic() + log_every_s
    finally:
        await control.stop()
        await transport.stop()


def serve_bootstrap(cfg: Config) -> None:
    """Run the bootstrap role until SIGINT/SIGTERM (``swarmnode start`` with role bootstrap)."""

    async def amain() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await run_bootstrap(cfg, Path(cfg.node.data_dir), stop)

    try:
        import uvloop
    except ImportError:  # uvloop is optional off Linux/macOS
        asyncio.run(amain())
    else:
        uvloop.run(amain())


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m swarmnode.p2p.standalone CONFIG.yaml", file=sys.stderr)
        return 2
    try:
        cfg = load_config(args[0], {"swarm.enabled": True, "swarm.role": "bootstrap"})
    except ConfigError as err:
        print(err, file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    serve_bootstrap(cfg)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

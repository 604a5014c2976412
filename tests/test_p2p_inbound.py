"""A peer cannot shut a node out by connecting many times (swarmnode/p2p/inbound.py).

py-libp2p held one inbound slot (of 250) and one task for every inbound connection
ever made, for the life of the swarm: after 250 connections a node accepted no
more. Here the node's cap is lowered to 3 so that the test needs a handful of
connections, not hundreds. Real hosts on loopback; every wait has a deadline.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import trio
from libp2p import new_host
from libp2p.peer.peerinfo import info_from_p2p_addr
from multiaddr import Multiaddr

from swarmnode.p2p.transport import GossipTransport
from tests.helpers import P2P_TIMEOUT, swarm_cfg, wait_for

CAP = 3
CONNECTIONS = 3 * CAP


def _come_and_go(target: str, results: list[str], done: threading.Event) -> None:
    """Connect, wait until the node lists us, leave; ``CONNECTIONS`` times, each a new
    host (a new identity, as a Sybil would)."""
    info = info_from_p2p_addr(Multiaddr(target))
    loopback = Multiaddr("/ip4/127.0.0.1/tcp/0")

    async def once() -> None:
        host = new_host(listen_addrs=[loopback])
        async with host.run(listen_addrs=[loopback]):
            try:
                with trio.fail_after(P2P_TIMEOUT / 3):
                    await host.connect(info)
                    # accepted and kept: it stays up while we are connected
                    await trio.sleep(0.3)
                    ok = info.peer_id in host.get_connected_peers()
                results.append("ok" if ok else "reset")
            except Exception as err:  # refused: what the old handler did past the cap
                results.append(type(err).__name__)
            with trio.move_on_after(5):
                await host.disconnect(info.peer_id)

    async def main() -> None:
        for _ in range(CONNECTIONS):
            await once()
            await trio.sleep(0.2)

    try:
        trio.run(main)
    finally:
        done.set()


def test_connections_that_closed_give_their_inbound_slot_back(tmp_path: Path) -> None:
    async def main() -> None:
        node = GossipTransport(swarm_cfg(), tmp_path / "node")
        await node.start()
        assert node._host is not None and node._token is not None
        network = node._host.host.get_network()
        node._token.run_sync_soon(
            lambda: setattr(network, "_inbound_limiter", trio.CapacityLimiter(CAP))
        )
        results: list[str] = []
        done = threading.Event()
        peer = threading.Thread(
            target=_come_and_go, args=(node.info.listen_addrs[0], results, done), daemon=True
        )
        try:
            await wait_for(lambda: network._inbound_limiter.total_tokens == CAP, "the cap set")
            tasks = node.stats()["reading"]["tasks"]
            peer.start()
            await wait_for(done.is_set, f"{CONNECTIONS} connections", timeout=4 * P2P_TIMEOUT)
            assert results == ["ok"] * CONNECTIONS
            await wait_for(
                lambda: network._inbound_limiter.borrowed_tokens == 0, "every slot given back"
            )
            await wait_for(lambda: node.stats()["connected_peers"] == [], "all gone")
            # no task left behind per connection (a few come and go with the timers)
            await wait_for(
                lambda: node.stats()["reading"]["tasks"] < tasks + CONNECTIONS,
                "the handlers' tasks ended",
            )
        finally:
            peer.join(P2P_TIMEOUT)
            await node.stop()

    asyncio.run(main())

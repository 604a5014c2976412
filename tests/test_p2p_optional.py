"""Optional protocols are optional: a peer that serves only identify and meshsub.

libp2p's ping and Kademlia are optional (js-libp2p runs neither by default). A raw
py-libp2p host with every other handler removed connects to a node's
GossipTransport, whose liveness check runs every half second: the node must take
it for alive (asked through its yamux connection), keep it connected long past
the two missed pings that used to cut it, never ask it for the DHT, keep
exchanging valid messages with it both ways, and log nothing at WARNING or above
from py-libp2p about it. Real hosts on loopback; every wait has a deadline.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from pathlib import Path

import pytest
import trio
from libp2p import new_host
from libp2p.host.ping import ID as PING_PROTOCOL
from libp2p.identity.identify_push.identify_push import ID_PUSH
from libp2p.peer.peerinfo import info_from_p2p_addr
from libp2p.pubsub.gossipsub import GossipSub
from libp2p.pubsub.pubsub import Pubsub
from libp2p.tools.anyio_service import background_trio_service
from multiaddr import Multiaddr

from swarmnode.p2p.gossip import GOSSIP_PROTOCOLS, topic_for
from swarmnode.p2p.transport import GossipTransport
from swarmnode.share.wire import decode_batch
from tests.helpers import P2P_TIMEOUT, batch, swarm_cfg, wait_for

LOOPBACK = Multiaddr("/ip4/127.0.0.1/tcp/0")
TOPIC = topic_for("default")
ROUNDS = 8  # liveness rounds the peer must pass; two missed pings used to cut it
NODE_THREAD = "swarmnode-libp2p"


class MinimalPeer:
    """identify and meshsub only: py-libp2p's host with its ping and identify-push
    handlers removed (and no DHT). Publishes a batch every ``every_s`` and collects
    what it hears, until ``stop``; counts the times it found itself disconnected."""

    def __init__(self, target: str, every_s: float = 0.3) -> None:
        self.target, self.every_s = target, every_s
        self.stop = threading.Event()
        self.ready = threading.Event()
        self.protocols: list[str] = []
        self.heard: list[int] = []
        self.sent = 0
        self.dropped = 0
        self.peer_id = ""
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            trio.run(self._main)
        except BaseException as err:  # reported by the test, not lost in the thread
            self.error = err

    async def _main(self) -> None:
        host = new_host(listen_addrs=[LOOPBACK])
        for protocol in (PING_PROTOCOL, ID_PUSH):
            host.remove_stream_handler(protocol)
        gossipsub = GossipSub(list(GOSSIP_PROTOCOLS), 6, 4, 12, heartbeat_interval=1)
        pubsub = Pubsub(host, gossipsub, strict_signing=True)
        info = info_from_p2p_addr(Multiaddr(self.target))
        self.peer_id = host.get_id().to_base58()
        async with (
            host.run(listen_addrs=[LOOPBACK]),
            background_trio_service(pubsub),
            background_trio_service(gossipsub),
        ):
            await pubsub.wait_until_ready()
            sub = await pubsub.subscribe(TOPIC)
            self.protocols = [str(p) for p in host.get_mux().get_protocols() if p]
            with trio.fail_after(P2P_TIMEOUT):
                await host.connect(info)
                while info.peer_id not in gossipsub.mesh.get(TOPIC, set()):
                    await trio.sleep(0.05)
            self.ready.set()
            with trio.move_on_after(4 * P2P_TIMEOUT):
                while not self.stop.is_set():
                    if info.peer_id not in host.get_connected_peers():
                        self.dropped += 1
                        with trio.fail_after(P2P_TIMEOUT):
                            await host.connect(info)
                    self.sent += 1
                    await pubsub.publish(TOPIC, batch(1000 + self.sent))
                    with trio.move_on_after(self.every_s):
                        while True:
                            msg = await sub.get()
                            self.heard.append(decode_batch(msg.data).round)


def test_a_peer_serving_only_identify_and_meshsub_stays_and_exchanges(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LIBP2P_DEBUG", raising=False)
    # swarmnode at debug routes py-libp2p's warnings too, so that any would be seen
    monkeypatch.setattr(logging.getLogger("swarmnode"), "level", logging.DEBUG)
    caplog.set_level(logging.WARNING)

    async def main() -> None:
        node = GossipTransport(swarm_cfg(ping_interval_s=0.5), tmp_path / "node")
        await node.start()
        peer = MinimalPeer(node.info.listen_addrs[0])  # type: ignore[union-attr]
        thread = threading.Thread(target=peer.run, name="minimal-peer", daemon=True)
        thread.start()
        heard: list[tuple[str, int]] = []

        def counter(name: str) -> int:
            return int(node.stats()["counters"].get(name, 0))

        def drain() -> int:
            heard.extend((r.peer_id, decode_batch(r.payload).round) for r in node.inbox.drain())
            return len([s for s, _ in heard if s == peer.peer_id])

        try:
            await asyncio.get_running_loop().run_in_executor(None, peer.ready.wait, P2P_TIMEOUT)
            assert peer.ready.is_set(), f"the minimal peer did not join: {peer.error!r}"
            assert {PING_PROTOCOL, ID_PUSH, "/ipfs/kad/1.0.0"}.isdisjoint(peer.protocols)
            start = counter("ping_via_muxer")
            for round_ in range(ROUNDS):
                await node.publish(batch(round_))
                await wait_for(
                    lambda r=round_: counter("ping_via_muxer") >= start + r + 1,  # type: ignore[misc]
                    f"liveness round {round_} answered by the peer's connection",
                )
            await wait_for(lambda: drain() >= ROUNDS, "the peer's batches, one per round")
            await wait_for(lambda: len(set(peer.heard)) >= ROUNDS - 1, "the node's batches")
            await wait_for(lambda: counter("dht.skipped_no_kad") >= 1, "a DHT lookup skipped it")
            counters = node.stats()["counters"]
            assert counters.get("ping_unsupported", 0) == 0  # its muxer was asked, never ping
            assert counters.get("ping_missed", 0) == 0
            assert counters.get("peers_unresponsive", 0) == 0 and peer.dropped == 0
            assert node.stats()["connected_peers"] == [peer.peer_id]
        finally:
            peer.stop.set()
            thread.join(P2P_TIMEOUT)
            await node.stop()
        loud = [
            f"{r.levelname} {r.name}: {r.getMessage()}"
            for r in caplog.records
            if r.threadName == NODE_THREAD
            and r.name.startswith("libp2p")
            and r.levelno >= logging.WARNING
        ]
        assert loud == []
        assert peer.error is None

    asyncio.run(main())

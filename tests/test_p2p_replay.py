"""A peer that redials is not handed the recent messages again (swarmnode/p2p/gossip.py).

py-libp2p replays the message cache's window to every newly subscribed peer and
forgets it on disconnect, so each redial (and each fresh identity) bought a replay:
writes the node paid for nothing. Real hosts on loopback, in one trio run; every
wait has a deadline.
"""

from __future__ import annotations

from typing import Any

import trio
from libp2p import new_host
from libp2p.peer.peerinfo import PeerInfo
from libp2p.pubsub.gossipsub import GossipSub
from libp2p.pubsub.pubsub import Pubsub
from libp2p.tools.anyio_service import background_trio_service
from multiaddr import Multiaddr

from swarmnode.p2p.gossip import GOSSIP_PROTOCOLS, HardenedPubsub, topic_for
from swarmnode.share.inbox import Counters

LOOPBACK = Multiaddr("/ip4/127.0.0.1/tcp/0")
TOPIC = topic_for("default")
DEADLINE_S = 30.0
REDIALS = 4


def _gossipsub() -> GossipSub:
    return GossipSub(list(GOSSIP_PROTOCOLS), 6, 4, 12, heartbeat_interval=0.2)


def test_a_redialling_peer_gets_the_recent_messages_once_and_still_hears_new_ones() -> None:
    counters = Counters()
    replays: list[Any] = []
    heard: list[bytes] = []

    async def main() -> None:
        node_host = new_host(listen_addrs=[LOOPBACK])
        node_gs = _gossipsub()
        node = HardenedPubsub(node_host, node_gs, strict_signing=True, counters=counters)
        send_recent = node_gs.send_recent_messages

        async def counted(peer_id: Any, topic: str) -> None:
            replays.append(peer_id)
            await send_recent(peer_id, topic)

        node_gs.send_recent_messages = counted  # type: ignore[method-assign]
        peer_host = new_host(listen_addrs=[LOOPBACK])
        peer_gs = _gossipsub()
        peer = Pubsub(peer_host, peer_gs, strict_signing=True)
        async with (
            node_host.run(listen_addrs=[LOOPBACK]),
            background_trio_service(node),
            background_trio_service(node_gs),
            peer_host.run(listen_addrs=[LOOPBACK]),
            background_trio_service(peer),
            background_trio_service(peer_gs),
            trio.open_nursery() as nursery,
        ):
            await node.wait_until_ready()
            await peer.wait_until_ready()
            await node.subscribe(TOPIC)
            sub = await peer.subscribe(TOPIC)

            async def listen() -> None:
                while True:
                    heard.append((await sub.get()).data)

            nursery.start_soon(listen)
            target = PeerInfo(node_host.get_id(), node_host.get_addrs())
            pid = peer_host.get_id()
            for dial in range(REDIALS + 1):
                with trio.fail_after(DEADLINE_S):
                    await peer_host.connect(target)
                    while pid not in node.peer_topics.get(TOPIC, set()) or pid not in node.peers:
                        await trio.sleep(0.01)
                    await trio.sleep(0.3)  # the replay, if any, has run
                    # a message published now still reaches the peer
                    data = f"after dial {dial}".encode()
                    await node.publish(TOPIC, data)
                    while data not in heard:
                        await trio.sleep(0.01)
                with trio.move_on_after(DEADLINE_S):
                    await peer_host.disconnect(node_host.get_id())
                with trio.fail_after(DEADLINE_S):
                    while pid in node.peers:
                        await trio.sleep(0.01)
            nursery.cancel_scope.cancel()
        assert not node.manager.did_error

    trio.run(main)
    assert len(replays) == 1, f"replayed {len(replays)} times for one peer"
    assert counters.get("pubsub.replay_skipped") >= REDIALS
    assert len(heard) >= REDIALS + 1


def test_a_peers_signed_record_is_consumed_once_not_per_control_frame() -> None:
    """py-libp2p peers attach their signed peer record to every RPC frame; gossipsub's
    ``handle_rpc`` verified and stored it again for every control frame (GRAFT, IHAVE,
    IDONTWANT...), on top of the read loop's check."""
    counters = Counters()
    consumed: list[Any] = []

    async def main() -> None:
        node_host = new_host(listen_addrs=[LOOPBACK])
        store = node_host.get_peerstore()
        consume = store.consume_peer_record

        def counted(envelope: Any, ttl: int) -> bool:
            consumed.append(envelope)
            return bool(consume(envelope, ttl))

        store.consume_peer_record = counted  # type: ignore[method-assign]
        node_gs = _gossipsub()
        node = HardenedPubsub(node_host, node_gs, strict_signing=True, counters=counters)
        peer_host = new_host(listen_addrs=[LOOPBACK])
        peer_gs = _gossipsub()
        peer = Pubsub(peer_host, peer_gs, strict_signing=True)
        async with (
            node_host.run(listen_addrs=[LOOPBACK]),
            background_trio_service(node),
            background_trio_service(node_gs),
            peer_host.run(listen_addrs=[LOOPBACK]),
            background_trio_service(peer),
            background_trio_service(peer_gs),
        ):
            await node.wait_until_ready()
            await peer.wait_until_ready()
            await node.subscribe(TOPIC)
            await peer.subscribe(TOPIC)
            with trio.fail_after(DEADLINE_S):
                await peer_host.connect(PeerInfo(node_host.get_id(), node_host.get_addrs()))
                for i in range(20):  # each makes the stock peer send IDONTWANT frames
                    await node.publish(TOPIC, f"m{i}".encode())
                    await trio.sleep(0.05)
                while counters.get("frames_in") < 10:
                    await trio.sleep(0.05)
        assert not node.manager.did_error

    trio.run(main)
    assert counters.get("frames_in") >= 10
    assert len(consumed) <= 2, f"{len(consumed)} records consumed for one unchanged record"

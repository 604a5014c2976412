"""What a stock py-libp2p peer makes the node do again and again, done once
(swarmnode/p2p/gossip.py): the replay of recent messages on each redial, and the
check of its signed peer record on each control frame. Real hosts on loopback, in
one trio run; every wait has a deadline.
"""

from __future__ import annotations

from typing import Any

import trio
from libp2p.peer.peerinfo import PeerInfo

from swarmnode.p2p.gossip import topic_for
from swarmnode.share.inbox import Counters
from tests.helpers import hardened_and_stock

TOPIC = topic_for("default")
DEADLINE_S = 30.0
REDIALS = 4


def test_a_redialling_peer_gets_the_recent_messages_once_and_still_hears_new_ones() -> None:
    """py-libp2p replays the message cache's window to every newly subscribed peer and
    forgets it on disconnect, so each redial bought a replay: writes the node paid for
    nothing."""
    counters = Counters()
    replays: list[Any] = []
    heard: list[bytes] = []

    async def main() -> None:
        async with (
            hardened_and_stock(counters) as (node_host, node, peer_host, peer),
            trio.open_nursery() as nursery,
        ):
            send_recent = node.router.send_recent_messages

            async def counted(peer_id: Any, topic: str) -> None:
                replays.append(peer_id)
                await send_recent(peer_id, topic)

            node.router.send_recent_messages = counted
            sub = await peer.subscribe(TOPIC)  # the helper's subscription

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
            assert not node.manager.did_error
            nursery.cancel_scope.cancel()

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
        async with hardened_and_stock(counters) as (node_host, node, peer_host, _peer):
            store = node_host.get_peerstore()
            consume = store.consume_peer_record

            def counted(envelope: Any, ttl: int) -> bool:
                consumed.append(envelope)
                return bool(consume(envelope, ttl))

            store.consume_peer_record = counted
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

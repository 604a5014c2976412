"""What a stock py-libp2p peer makes the node do again and again, done once
(swarmnode/p2p/gossip.py): the replay of recent messages on each redial, and the
check of its signed peer record on each control frame. Real hosts on loopback, in
one trio run; every wait has a deadline.
"""

from __future__ import annotations

from typing import Any

import pytest
import trio
from libp2p.peer.peerinfo import PeerInfo
from libp2p.stream_muxer.yamux.yamux import YamuxStream

from swarmnode.p2p import yamux_write
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


@pytest.mark.parametrize("writer", ["stock", "resetting"])
def test_a_peer_whose_write_stalled_learns_our_subscription_again(
    writer: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A py-libp2p peer whose write waits 5 s for flow-control credit (we held its
    reads: the read pacing, the CPU cap) gives up on its stream: it forgets our
    subscriptions, opens a new stream and sends its own, but never heard ours again,
    as nothing of ours changed. It then neither grafted us nor published to us while
    the connection lasted: five Sybils held by the CPU cap went silent that way after
    15 s (bench_flood, 2026-12-06), and so would an honest peer. The stall is real
    (py-libp2p's yamux write, its timeout, its recovery); only the exhausted window is
    set by hand. ``stock``: py-libp2p's write leaves the old stream open;
    ``resetting``: swarmnode's write wrapper (yamux_write) resets it."""
    monkeypatch.setattr(
        YamuxStream,
        "write",
        yamux_write._whole_write if writer == "resetting" else yamux_write._ORIGINAL,
    )
    counters = Counters()
    heard: list[bytes] = []

    async def main() -> None:
        async with (
            hardened_and_stock(counters) as (node_host, node, peer_host, peer),
            trio.open_nursery() as nursery,
        ):
            sub = await node.subscribe(TOPIC)

            async def listen() -> None:
                while True:
                    heard.append((await sub.get()).data)

            nursery.start_soon(listen)
            nid = node_host.get_id()

            def meshed() -> bool:
                return nid in peer.peer_topics.get(TOPIC, set()) and nid in peer.router.mesh.get(
                    TOPIC, set()
                )

            with trio.fail_after(DEADLINE_S):
                await peer_host.connect(PeerInfo(nid, node_host.get_addrs()))
                while not meshed():
                    await trio.sleep(0.01)
            stalled = peer.peers[nid]
            stalled.muxed_stream.send_window = 0  # no credit left: the next write waits
            await peer.publish(TOPIC, b"stalled")
            with trio.fail_after(DEADLINE_S):  # py-libp2p gives up after 5 s
                while peer.peers.get(nid) is stalled:
                    await trio.sleep(0.05)
            with trio.fail_after(DEADLINE_S):
                while not meshed():
                    await trio.sleep(0.05)
                await peer.publish(TOPIC, b"after the stall")
                while b"after the stall" not in heard:
                    await trio.sleep(0.05)
            assert not node.manager.did_error
            nursery.cancel_scope.cancel()

    trio.run(main)
    assert counters.get("pubsub.resubscribed") >= 1
    if writer == "stock":  # the old stream was left open: reset by the node
        assert counters.get("pubsub.inbound_replaced") >= 1

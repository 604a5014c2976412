"""Real libp2p hosts on loopback: relay through a bootstrap, survive its loss, PSK
isolation, hostile peers, and delivery while the asyncio loop is blocked.

Every wait polls with a deadline; nothing asserts on a fixed sleep.
"""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from swarmnode.p2p.identity import create_psk
from swarmnode.p2p.transport import GossipTransport, TransportError
from swarmnode.share import wire
from swarmnode.share.wire import decode_batch
from tests.helpers import P2P_TIMEOUT as TIMEOUT
from tests.helpers import batch, raw_peer, swarm_cfg, wait_for


class Collector:
    """Drains a transport's inbox into (sender, round) pairs while tests poll."""

    def __init__(self, t: GossipTransport) -> None:
        self.t = t
        self.got: list[tuple[str, int, float]] = []

    def poll(self) -> None:
        for r in self.t.inbox.drain():
            decoded = decode_batch(r.payload)
            assert r.batch == decoded  # the validator's decode travels with the message
            self.got.append((r.peer_id, decoded.round, r.received_at))

    def has(self, sender: str, round_: int) -> bool:
        self.poll()
        return any(s == sender and rd == round_ for s, rd, _ in self.got)

    def has_round(self, round_: int) -> bool:
        self.poll()
        return any(rd == round_ for _, rd, _ in self.got)


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_three_nodes_via_bootstrap_then_without_it(tmp_path: Path) -> None:
    async def main() -> None:
        boot = GossipTransport(swarm_cfg(), tmp_path / "boot")
        await boot.start()
        addr = boot.info.listen_addrs[0]  # type: ignore[union-attr]
        nodes = [GossipTransport(swarm_cfg(bootstrap=[addr]), tmp_path / f"n{i}") for i in range(3)]
        try:
            for n in nodes:
                await n.start()
            cols = [Collector(n) for n in nodes]
            ids = [n.peer_id for n in nodes]
            await wait_for(lambda: all(n.stats()["mesh_size"] >= 1 for n in nodes), "meshes")

            async def exchange(round_: int) -> None:
                for n in nodes:
                    await n.publish(batch(round_))
                await wait_for(
                    lambda: all(
                        c.has(ids[j], round_)
                        for i, c in enumerate(cols)
                        for j in range(3)
                        if j != i
                    ),
                    f"every node to get both peers' round {round_}",
                )

            await exchange(1)
            # Nodes learn each other (DHT via the bootstrap) and connect directly...
            await wait_for(
                lambda: all(
                    set(ids) - {n.peer_id} <= set(n.stats()["connected_peers"]) for n in nodes
                ),
                "direct connections between the non-bootstrap nodes",
            )
            await boot.stop()  # ...so losing the bootstrap does not split the swarm.
            await wait_for(
                lambda: all(boot.peer_id not in n.stats()["connected_peers"] for n in nodes),
                "bootstrap gone",
            )
            await exchange(2)
            st = nodes[0].stats()
            assert st["msgs_out"] == 2 and st["msgs_in"] >= 4
            assert st["rejected_total"] == 0
        finally:
            for n in nodes:
                await n.stop()
            await boot.stop()

    run(main())


def test_peer_id_survives_restart(tmp_path: Path) -> None:
    async def main() -> tuple[str, str]:
        a = GossipTransport(swarm_cfg(), tmp_path / "a")
        await a.start()
        first = a.peer_id
        await a.stop()
        b = GossipTransport(swarm_cfg(), tmp_path / "a")
        await b.start()
        second = b.peer_id
        await b.stop()
        return first, second

    first, second = run(main())
    assert first == second


def test_a_host_that_can_listen_nowhere_fails_to_start_and_names_the_field(
    tmp_path: Path,
) -> None:
    """py-libp2p logs a listener it cannot open and goes on: the node came up with no
    address at all. An address of no interface here (TEST-NET-3) must fail start."""

    async def main() -> None:
        node = GossipTransport(swarm_cfg(listen=["/ip4/203.0.113.7/tcp/0"]), tmp_path / "a")
        with pytest.raises(TransportError, match=r"swarm\.listen: could not listen on any of"):
            await node.start()
        assert not node.running

    run(main())


def test_wrong_psk_can_neither_connect_nor_receive(tmp_path: Path) -> None:
    key_a, key_b = tmp_path / "a.key", tmp_path / "b.key"
    create_psk(key_a)
    create_psk(key_b)

    async def main() -> None:
        hub = GossipTransport(swarm_cfg(psk_file=str(key_a)), tmp_path / "hub")
        await hub.start()
        addr = hub.info.listen_addrs[0]  # type: ignore[union-attr]
        friend = GossipTransport(swarm_cfg(psk_file=str(key_a), bootstrap=[addr]), tmp_path / "f")
        outsider = GossipTransport(swarm_cfg(psk_file=str(key_b), bootstrap=[addr]), tmp_path / "o")
        try:
            await friend.start()
            await outsider.start()
            await wait_for(lambda: friend.stats()["mesh_size"] >= 1, "friend in the mesh")
            await hub.publish(batch(7))
            col = Collector(friend)
            await wait_for(lambda: col.has(hub.peer_id, 7), "friend receives")  # control
            c = outsider.counters
            await wait_for(
                lambda: c.get("bootstrap_dial_failed") + c.get("bootstrap_dial_timeout") >= 1,
                "outsider's dial to fail",
            )
            assert outsider.stats()["connected_peers"] == []
            assert outsider.stats()["msgs_in"] == 0 and len(outsider.inbox) == 0
            assert outsider.peer_id not in hub.stats()["connected_peers"]
        finally:
            for t in (outsider, friend, hub):
                await t.stop()

    run(main())


def test_hostile_messages_rejected_counted_and_node_keeps_working(tmp_path: Path) -> None:
    good = decode_batch(batch(1))
    assert good.round == 1
    wrong_version = batch(2).replace(b"\xa1v\x02", b"\xa1v\x07", 1)
    oversized = b"\x00" * (wire.MAX_MESSAGE_BYTES + 10)  # fits a gossip frame, not our limit
    sends = [
        (b"\xc1 not msgpack", True),
        (wrong_version, True),
        (oversized, True),
        (batch(3, swarm="other-swarm"), True),
        (batch(4), False),  # well-formed but unsigned
        (batch(5), True),  # the one good message, sent last
    ]

    async def main() -> None:
        node = GossipTransport(swarm_cfg(), tmp_path / "node")
        await node.start()
        addr = node.info.listen_addrs[0]  # type: ignore[union-attr]
        other = GossipTransport(swarm_cfg(bootstrap=[addr]), tmp_path / "other")
        await other.start()
        col = Collector(node)
        try:
            finished = threading.Event()
            # The last act: a truncated protobuf RPC frame straight on a meshsub stream.
            bad_rpc = b"\x0a\x05ab"
            sender = threading.Thread(
                target=raw_peer, args=(addr, sends, finished.is_set, bad_rpc), daemon=True
            )
            sender.start()
            want = {
                "msgpack": 1,
                "version": 1,
                "too_large": 1,
                "wrong_swarm": 1,
                "signature": 1,
                "rpc_decode": 1,
            }
            await wait_for(
                lambda: all(node.stats()["rejected"].get(k, 0) >= v for k, v in want.items()),
                "every hostile message counted by reason",
            )
            await wait_for(lambda: col.has_round(5), "the good message from the raw peer")
            finished.set()
            sender.join(TIMEOUT)
            assert [r for _, r, _ in col.got] == [5]  # nothing hostile reached the inbox
            # ...and the node still works with a well-behaved peer.
            await wait_for(lambda: other.stats()["mesh_size"] >= 1, "other in mesh")
            await other.publish(batch(6))
            await wait_for(lambda: col.has(other.peer_id, 6), "delivery after the attack")
            assert node.stats()["running"]
        finally:
            await other.stop()
            await node.stop()

    run(main())


def _burn_cpu(seconds: float) -> float:
    end = time.monotonic() + seconds
    x = 0
    while time.monotonic() < end:
        x += 1  # pure Python: holds the GIL as much as any CPU-bound step can
    return time.time()


def test_blocked_loop_and_busy_thread_do_not_delay_delivery(tmp_path: Path) -> None:
    block_s = 3.0

    async def main() -> None:
        a = GossipTransport(swarm_cfg(), tmp_path / "a")
        await a.start()
        b = GossipTransport(
            swarm_cfg(bootstrap=[a.info.listen_addrs[0]]),
            tmp_path / "b",  # type: ignore[union-attr]
        )
        await b.start()
        col = Collector(b)
        try:
            await wait_for(
                lambda: a.stats()["mesh_size"] >= 1 and b.stats()["mesh_size"] >= 1, "mesh"
            )
            # 1. The asyncio loop itself is blocked (a synchronous "training step").
            await a.publish(batch(1))
            time.sleep(block_s)  # deliberately blocks this event loop
            block_end = time.time()
            await wait_for(lambda: col.has(a.peer_id, 1), "message 1")
            # Received (validated, stamped in the libp2p thread) while the loop was blocked.
            assert col.got[-1][2] < block_end
            # 2. A CPU-bound step in the loop's executor, with the loop free.
            loop = asyncio.get_running_loop()
            burn = loop.run_in_executor(None, _burn_cpu, block_s)
            await a.publish(batch(2))
            await wait_for(lambda: col.has(a.peer_id, 2), "message 2")
            burn_end = await burn
            assert col.got[-1][2] < burn_end
        finally:
            await b.stop()
            await a.stop()

    run(main())


@pytest.mark.parametrize("idontwant", [False, True])
def test_a_stock_peer_sends_idontwant_frames_only_if_the_node_speaks_v12(
    tmp_path: Path, idontwant: bool
) -> None:
    """A stock py-libp2p peer offers /meshsub/1.2.0 first and then sends an IDONTWANT
    frame to its v1.2 mesh peers for every message it publishes. By default the node
    serves 1.1.0 and 1.0.0 only, so the peer falls back to 1.1.0 and reads cost one
    frame per message; with ``swarm.idontwant`` the frames come back."""
    n = 6

    async def main() -> None:
        node = GossipTransport(swarm_cfg(idontwant=idontwant), tmp_path / "node")
        await node.start()
        col = Collector(node)
        addr = node.info.listen_addrs[0]  # type: ignore[union-attr]
        finished = threading.Event()
        peer = threading.Thread(
            target=raw_peer,
            args=(addr, [(batch(r), True) for r in range(n)], finished.is_set),
            daemon=True,
        )
        try:
            peer.start()
            await wait_for(
                lambda: col.poll() or {r for _, r, _ in col.got} == set(range(n)), "every message"
            )
            await asyncio.sleep(1.0)  # an IDONTWANT rides its own frame, queued beside
            c = node.stats()["counters"]
            assert c.get("msgs_read", 0) == n
            if idontwant:
                assert c.get("control.idontwant", 0) >= n
            else:
                assert c.get("control.idontwant", 0) == 0
                # a frame per message, besides the subscription and GRAFT
                assert c.get("frames_in", 0) <= n + 2
        finally:
            finished.set()
            peer.join(TIMEOUT)
            await node.stop()

    run(main())

"""The node never dials itself, nor trips over a peer that left (p2p/discovery.py).

Not by its own peer ID (a bootstrap list shared by every node of a compose file
names the node too), and not at one of its own addresses under another peer's ID
(in Docker every node listens on 4001 and a peer advertises 127.0.0.1:4001: the
node dialled itself and failed the security handshake). Real hosts on loopback;
every wait has a deadline.
"""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import pytest
import trio
from libp2p import new_host
from libp2p.peer.id import ID
from libp2p.peer.peerinfo import PeerInfo, info_from_p2p_addr
from libp2p.peer.peerstore import PeerStoreError
from multiaddr import Multiaddr

from swarmnode.p2p.discovery import Discovery
from swarmnode.p2p.identity import identity_path, load_or_create_identity
from swarmnode.p2p.nat import NatTraversal
from swarmnode.p2p.transport import GossipTransport
from swarmnode.share.inbox import Counters
from tests.helpers import P2P_TIMEOUT, free_port, swarm_cfg, wait_for


def test_a_bootstrap_list_naming_the_node_itself_is_not_dialled(tmp_path: Path) -> None:
    async def main() -> None:
        cfg = swarm_cfg()
        key, _ = load_or_create_identity(identity_path(tmp_path / "node", cfg.key_file))
        me = ID.from_pubkey(key.public_key).to_base58()
        port = free_port()
        own = f"/ip4/127.0.0.1/tcp/{port}/p2p/{me}"
        node = GossipTransport(
            swarm_cfg(listen=[f"/ip4/127.0.0.1/tcp/{port}"], bootstrap=[own]), tmp_path / "node"
        )
        await node.start()
        try:
            await wait_for(
                lambda: node.stats()["counters"].get("dial.self_skipped", 0) == 1,
                "its own bootstrap entry skipped",
            )
            counters = node.stats()["counters"]
            assert not [k for k in counters if k.startswith("bootstrap_dial")]
        finally:
            await node.stop()

    asyncio.run(main())


def _announcing_peer(target: str, announce: str, left: threading.Event) -> None:
    """Connects, announcing only ``announce`` (the node's own address), and leaves."""

    async def main() -> None:
        loopback = Multiaddr("/ip4/127.0.0.1/tcp/0")
        host = new_host(listen_addrs=[loopback], announce_addrs=[Multiaddr(announce)])
        info = info_from_p2p_addr(Multiaddr(target))
        async with host.run(listen_addrs=[loopback]):
            with trio.fail_after(P2P_TIMEOUT):
                await host.connect(info)
                await trio.sleep(1.0)  # the node identifies us meanwhile (not asserted)
        left.set()

    trio.run(main)


def test_a_peer_advertising_the_nodes_own_address_is_not_dialled_there(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def main() -> None:
        node = GossipTransport(swarm_cfg(), tmp_path / "node")
        await node.start()
        full = node.info.listen_addrs[0]  # type: ignore[union-attr]
        left = threading.Event()
        peer = threading.Thread(
            target=_announcing_peer, args=(full, full.split("/p2p/")[0], left), daemon=True
        )
        try:
            peer.start()
            await wait_for(left.is_set, "the peer came and went")
            await wait_for(
                lambda: node.stats()["counters"].get("dial.own_addr_skipped", 0) >= 1,
                "a dial of the node's own address refused",
            )
            # the peer's own connection closes when it leaves (seen late on a loaded
            # machine); what must never happen is a dial that reached anything
            await wait_for(lambda: node.stats()["connected_peers"] == [], "the peer gone")
            counters = node.stats()["counters"]
            assert counters.get("peer_dial_ok", 0) == 0  # nothing reached, not even itself
        finally:
            peer.join(P2P_TIMEOUT)
            await node.stop()

    asyncio.run(main())
    # what dialling itself logged, once per dial: "failed to upgrade security for peer
    # <the other's ID>: handshake failed when upgrading to secure connection"
    assert not [r for r in caplog.records if "upgrade security" in r.getMessage()]


class _ExpiringStore:
    """A peerstore where one peer's addresses expire once another peer is dialled."""

    def __init__(self, peers: list[ID]) -> None:
        self.peers, self.expired = peers, peers[0]

    def peers_with_addrs(self) -> list[ID]:
        return list(self.peers)

    def addrs(self, peer: ID) -> list[Multiaddr]:
        if peer == self.expired:
            raise PeerStoreError("peer ID is expired")
        return [Multiaddr("/ip4/127.0.0.1/tcp/9")]


class _DialHost:
    def __init__(self, store: _ExpiringStore) -> None:
        self.store = store
        self.dialled: list[ID] = []

    def get_peerstore(self) -> _ExpiringStore:
        return self.store

    def get_network(self) -> _DialHost:
        return self  # no unblock_peer: nothing to lift

    async def connect(self, info: PeerInfo) -> None:
        self.dialled.append(info.peer_id)


def test_a_candidate_whose_addresses_expired_meanwhile_is_skipped() -> None:
    """Found by the chaos test: py-libp2p's peerstore raised PeerStoreError for a
    candidate whose addresses expired while the loop dialled the ones before it,
    and the discovery task, the libp2p thread and the node ended."""
    peers = [ID(f"peer-{i}".encode()) for i in range(3)]
    store = _ExpiringStore(peers)
    host, counters = _DialHost(store), Counters()
    cfg = swarm_cfg()
    discovery = Discovery(
        cfg, counters, NatTraversal(cfg, counters, None), ID(b"me"), lambda p: False
    )
    discovery.host = host
    trio.run(discovery._dial_candidates, set())
    assert sorted(host.dialled, key=str) == sorted(peers[1:], key=str)
    assert counters.snapshot()["dial.addrs_expired"] == 1


def test_a_peer_known_before_is_redialled_soon_after_it_comes_back(tmp_path: Path) -> None:
    """A peer the node was connected to goes away long enough that plain doubling
    (2, 4, 8, 16, 32 s...) would wait half a minute, then comes back, on the same
    address and identity, knowing nobody: only the node can dial it. Its redials are
    capped at ``redial_backoff_max_s`` and py-libp2p's own 60 s refusal to redial a
    peer whose addresses failed is lifted before each, so the node finds it again
    within the cap (the code before: within its doubled backoff, or 60 s)."""
    cap = 2.0

    async def main() -> None:
        port = free_port()
        a = GossipTransport(swarm_cfg(redial_backoff_max_s=cap, dial_timeout_s=2.0), tmp_path / "a")
        await a.start()
        b: GossipTransport | None = None
        try:
            a_addr = a.info.listen_addrs[0]  # type: ignore[union-attr]
            b_listen = [f"/ip4/127.0.0.1/tcp/{port}"]
            b = GossipTransport(swarm_cfg(listen=b_listen, bootstrap=[a_addr]), tmp_path / "b")
            await b.start()
            b_id = b.info.peer_id  # type: ignore[union-attr]
            await wait_for(lambda: b_id in a.stats()["connected_peers"], "A and B connected")
            await b.stop()
            # Away for five failed redials: doubling would now wait 32 s.
            await wait_for(
                lambda: a.stats()["counters"].get("peer_dial_failed", 0) >= 5,
                "A's redials to B to fail five times",
                timeout=90,
            )
            b = GossipTransport(swarm_cfg(listen=b_listen), tmp_path / "b")  # knows nobody
            await b.start()
            assert b.info.peer_id == b_id  # same identity, same address
            back = time.monotonic()
            await wait_for(
                lambda: b_id in a.stats()["connected_peers"],
                "A to redial B",
                timeout=cap + 8.0,  # the cap, a discovery tick, a dial; doubling: 32 s
            )
            print(f"redialled {time.monotonic() - back:.1f} s after B came back")
            assert not b.stats()["counters"].get("bootstrap_dial_ok")  # A dialled, not B
            assert a.stats()["counters"].get("dial.redial_capped", 0) >= 5
        finally:
            if b is not None and b.running:
                await b.stop()
            await a.stop()

    asyncio.run(main())

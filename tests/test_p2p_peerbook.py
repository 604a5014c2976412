"""The node's peerstore never evicts the node itself (swarmnode/p2p/peerbook.py).

py-libp2p caps its peerstore at 1,000 peers and evicts those without addresses
first: the node's own entry (no addresses) went once the chaos test had shown the
node 1,269 identities, and with it its keys; identify and every publish failed.
The cap is lowered here so that a few entries fill it.
"""

from __future__ import annotations

from libp2p import new_host
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.peer.id import ID
from multiaddr import Multiaddr

from swarmnode.p2p import peerbook
from swarmnode.share.inbox import Counters

CAP = 5


def _stranger(i: int) -> ID:
    return ID.from_pubkey(create_new_key_pair(bytes([i]) * 32).public_key)


def test_a_full_peerstore_keeps_the_node_and_its_connected_peers() -> None:
    host = new_host(listen_addrs=[Multiaddr("/ip4/127.0.0.1/tcp/0")])
    counters = Counters()
    peerbook.protect(host, counters)
    store = host.get_peerstore()
    store.max_peers = CAP
    connected = _stranger(200)
    store.add_protocols(connected, ["/meshsub/1.1.0"])  # an entry without addresses
    host.get_connected_peers = lambda: [connected]  # type: ignore[method-assign]
    for i in range(3 * CAP):  # strangers with an address each: every add enforces the cap
        store.add_addrs(_stranger(i), [Multiaddr(f"/ip4/127.0.0.1/tcp/{1000 + i}")], 3600)
    assert host.get_public_key() is not None and host.get_private_key() is not None
    assert store.has_peer(connected)
    assert len(store.peer_ids()) <= CAP + 1  # the cap, plus the connected peer
    assert counters.snapshot()["peerstore.evicted"] >= 2 * CAP

"""The node's peerstore never forgets the node itself, nor a peer it is connected to.

Role: one override of py-libp2p 0.8.1's peerstore, on the node's own instance: the
rule that evicts entries past its cap (``max_peers``, 1,000).

py-libp2p evicts the entries without addresses first, and the node's own entry has
none: after a chaos run had shown the node 1,269 identities, its own entry went,
and with it its keys. Every identify answer then raised ``PeerStoreError`` (1,017
contained in ten minutes) and every publish failed: any stranger with 1,000
throwaway identities could mute a node.

Invariants:
- Eviction keeps py-libp2p's order (no addresses first, then expired, then the
  rest as stored) but never evicts the node's own ID or a connected peer; each
  eviction is counted (``peerstore.evicted``).
- The store stays bounded: at most ``max_peers`` entries plus the connected peers.
"""

from __future__ import annotations

from typing import Any

from swarmnode.share.inbox import Counters


def protect(host: Any, counters: Counters) -> None:
    """Install the eviction rule above on ``host``'s peerstore."""
    store = host.get_peerstore()
    me = host.get_id()

    def enforce_peer_limit() -> None:
        excess = len(store.peer_data_map) - store.max_peers
        if excess <= 0:
            return
        keep = {me, *host.get_connected_peers()}
        candidates = [item for item in store.peer_data_map.items() if item[0] not in keep]
        # py-libp2p's priority: no addresses first, then expired (True sorts first)
        candidates.sort(key=lambda kv: (not kv[1].get_addrs(), kv[1].is_expired()), reverse=True)
        for peer, _ in candidates[:excess]:
            store.peer_record_map.pop(peer, None)
            del store.peer_data_map[peer]
            counters.add("peerstore.evicted")

    store._enforce_peer_limit = enforce_peer_limit

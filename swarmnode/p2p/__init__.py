"""Networking: libp2p gossip of rollout batches between swarmnode peers.

Modules: ``identity`` (keys on disk), ``wire`` (the message schema), ``gossip``
(topic, protocol ids, hardened pubsub), ``bridge`` (bounded asyncio <-> trio
hand-off), ``host`` (the trio-side libp2p node), ``transport`` (``GossipTransport``,
the libp2p ``swarmnode.transport.Transport``).

Import ``GossipTransport`` from ``swarmnode.p2p.transport``; this package file stays
import-light so ``swarmnode --help`` never loads libp2p.
"""

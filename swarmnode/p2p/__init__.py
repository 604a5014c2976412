"""libp2p: one implementation of ``share.transport.Transport`` (gossipsub over noise/yamux).

Modules: ``transport`` (``GossipTransport``, the asyncio handle), ``netproc``
(``ProcessTransport``: the same in a child process; the node's side imports no
libp2p), ``host`` (the
trio-side host), ``gossip`` (topic, protocol ids, hardened pubsub), ``framing`` (paced
stream reads), ``netshare`` (the CPU cap outside training), ``bridge`` (the asyncio ->
trio outbox), ``discovery`` and ``lookup_pacer`` (bootstrap, DHT, dialling),
``liveness``, ``nat`` / ``relay`` / ``holepunch`` / ``autonat`` (crossing NAT),
``identity`` (key files), ``yamux_window`` / ``yamux_write`` (py-libp2p overrides).

Invariant: imports ``share`` (and ``config``), never the reverse. This package file
stays import-light so ``swarmnode --help`` never loads libp2p.
"""

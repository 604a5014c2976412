"""The sharing side, transport-neutral: what a node sends, hears, checks and draws.

Modules: ``transport`` (the ``Transport`` interface and its neutral types),
``inbox`` (bounded thread-safe delivery and counters), ``wire`` (the versioned
msgpack format), ``peerscore`` (scores from verdicts), ``exchange`` (publish and
the ingestion pump), ``ingest`` / ``ingest_guard`` (verify, re-score, bound, budget),
``sampler`` (which groups go into an update), ``completion`` (peers' answers into a
no-signal group), ``publish_rate``, ``ratelimit``, ``swarmview`` (peers as seen from
gossip), ``memory_transport`` (an in-process ``Transport`` for tests and demos).

Invariant: imports ``learn``, never ``p2p`` or ``ops``; ``p2p`` implements
``transport.Transport`` on top of this package.
"""

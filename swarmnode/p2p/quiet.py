"""Quiet about what a peer causes at will: py-libp2p's records of it become debug.

Role: one logging filter on the py-libp2p loggers that report things any peer can
make happen whenever it likes (refusing an optional protocol such as ping or
Kademlia, not answering a protocol negotiation): py-libp2p logs some of them at
ERROR or WARNING, and an operator reads those levels as the node's own trouble.
The caller of the failed operation still gets the exception and counts it.

Invariants:
- Only records named in ``PEER_CAUSED`` (logger, message start) change, and only
  their level: to DEBUG, so the handlers' levels drop them unless swarmnode logs
  at debug. Nothing is dropped here and no other record is touched.
- ``install`` is idempotent; ``swarmnode.p2p.host`` calls it at import.
"""

from __future__ import annotations

import logging

PEER_CAUSED: tuple[tuple[str, str], ...] = (
    # every stream a peer refuses or does not negotiate (ping, kad...), with the
    # muxer state in seven lines: ERROR in py-libp2p 0.8.1
    ("libp2p.host.basic_host", "Failed to open stream to peer"),
    # the DHT's copy of the same failure: WARNING
    ("libp2p.kad_dht.peer_routing", "Failed to open stream to"),
)


class DemotePeerCaused(logging.Filter):
    """Turns ``PEER_CAUSED`` records into debug records."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno > logging.DEBUG:
            text = str(record.msg)
            if any(record.name == n and text.startswith(m) for n, m in PEER_CAUSED):
                record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return True


_DEMOTE = DemotePeerCaused()


def install() -> None:
    """Attach the filter to every logger ``PEER_CAUSED`` names (idempotent)."""
    for name in sorted({n for n, _ in PEER_CAUSED}):
        lg = logging.getLogger(name)
        if _DEMOTE not in lg.filters:
            lg.addFilter(_DEMOTE)

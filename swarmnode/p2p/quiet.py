"""Quiet about what a peer causes at will: py-libp2p's records of it become debug.

Role: one logging filter on the py-libp2p loggers that report what any peer can
make happen whenever it likes: refusing an optional protocol (ping, Kademlia), not
answering a negotiation, junk or a reset on a protocol stream, a broken muxer
frame, a failed handshake, closing a connection half-way. py-libp2p 0.8.1 logs
these at ERROR or WARNING, several lines each, and an operator reads those levels
as the node's own trouble. The caller of the failed operation still gets its
exception and counts it; a py-libp2p task that raises is reported by
``contain.TaskGuard`` at warning, once per exception class, whatever this filter
does.

Invariants:
- Only the level changes (to DEBUG, so the handlers' levels drop the record unless
  swarmnode logs at debug); nothing is dropped here.
- A record is demoted when its logger is one of ``PEER_LOGGERS`` (modules whose
  warnings and errors are all about a peer's exchange, except the ``KEEP`` lines
  about the node's own machinery), or it matches a ``PEER_CAUSED`` (logger,
  message start), or py-libp2p logged it on the root logger (its connection
  close path calls ``logging.warning``).
- ``install`` is idempotent; ``swarmnode.p2p.host`` calls it at import.
"""

from __future__ import annotations

import logging
import os

import libp2p

# every warning and error of these is about one peer's protocol exchange
PEER_LOGGERS: frozenset[str] = frozenset(
    {
        "libp2p.stream_muxer.yamux.yamux",  # a peer's frames (window, GO_AWAY, reads)
        "libp2p.protocol_muxer.multiselect_client",  # a peer's negotiation answers
        "libp2p.protocol_muxer.multiselect",
        "libp2p.identity.identify.identify",  # its identify message
        "libp2p.identity.identify_push.identify_push",  # its identify push
        "libp2p.kad_dht.kad_dht",  # its DHT requests
        "libp2p.host.autonat.autonat",  # its AutoNAT requests
        "libp2p.relay.circuit_v2.dcutr",  # its hole-punch exchange
        "libp2p.host.ping",
    }
)
# ...except these lines, about the node's own machinery
KEEP: tuple[tuple[str, str], ...] = (
    ("libp2p.stream_muxer.yamux.yamux", "Error in on_close callback"),
    ("libp2p.kad_dht.kad_dht", "Error in DHT maintenance loop"),
    ("libp2p.relay.circuit_v2.dcutr", "Error unregistering"),
)
# lines of mixed loggers that a peer causes: (logger, message start)
PEER_CAUSED: tuple[tuple[str, str], ...] = (
    # every stream a peer refuses or does not negotiate, with the muxer state in
    # seven lines: ERROR
    ("libp2p.host.basic_host", "Failed to open stream to peer"),
    ("libp2p.kad_dht.peer_routing", "Failed to open stream to"),  # the same: WARNING
    # a handshake or muxer negotiation the peer broke (or a dial of a wrong key)
    ("libp2p.network.swarm", "failed to upgrade security"),
    ("libp2p.network.swarm", "fail to upgrade mux"),
    ("libp2p.network.swarm", "Error closing connection"),
    # an address a peer advertised that does not answer (it left, or never listened)
    ("libp2p.transport.tcp.tcp", "Failed to open TCP stream"),
)
_LIBP2P_DIR = os.path.dirname(libp2p.__file__)


class DemotePeerCaused(logging.Filter):
    """Turns peer-caused py-libp2p records into debug records (module docstring)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno > logging.DEBUG and _peer_caused(record):
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return True


def _peer_caused(record: logging.LogRecord) -> bool:
    name, text = record.name, str(record.msg)
    if name == "root":
        return record.pathname.startswith(_LIBP2P_DIR)
    if name in PEER_LOGGERS:
        return not any(name == n and text.startswith(m) for n, m in KEEP)
    return any(name == n and text.startswith(m) for n, m in PEER_CAUSED)


_DEMOTE = DemotePeerCaused()


def install() -> None:
    """Attach the filter to every logger named above and to the root logger."""
    names = {"root", *PEER_LOGGERS, *(n for n, _ in PEER_CAUSED)}
    for name in sorted(names):
        lg = logging.getLogger() if name == "root" else logging.getLogger(name)
        if _DEMOTE not in lg.filters:
            lg.addFilter(_DEMOTE)

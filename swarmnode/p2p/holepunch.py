"""Hole punching: py-libp2p's DCUtR (``/libp2p/dcutr``), started from one side only.

Role: after two peers connect through a relay, try a direct connection by TCP
simultaneous open: each dials the other's predicted external address (observed IP,
own listen port) from its listen port, so both NATs see an outgoing flow and let
the other's SYN in. py-libp2p does the exchange and the dials; this module decides
who starts it.

Invariants:
- At most one hole punch session per peer pair: only the peer that *accepted* the
  relayed connection starts one (the spec's rule; py-libp2p started one from each
  end, and the two sessions then dialled the same address pair with Noise roles
  that matched only half the time). When each peer dialled the other through a
  relay, the one with the smaller peer id starts.
- At most py-libp2p's ``MAX_HOLE_PUNCH_ATTEMPTS`` per peer and connection; each
  attempt is bounded by py-libp2p's dial and read timeouts; attempts and outcomes
  are counted (``relay.punch_*``), and nothing raised ends the loop.
- After a direct connection verifies, py-libp2p closes the relayed one after a
  grace period (60 s), so streams move over first.
"""

from __future__ import annotations

import logging
from typing import Any

import trio
from libp2p.peer.id import ID
from libp2p.rcmgr.metrics import Direction
from libp2p.relay.circuit_v2.dcutr import MAX_HOLE_PUNCH_ATTEMPTS, DCUtRProtocol

from swarmnode.p2p.autonat import is_relayed
from swarmnode.share.inbox import Counters

log = logging.getLogger("swarmnode.p2p")

DRIVE_S = 2.0  # how often relayed-only peers are looked for


class ListenerDrivenDCUtR(DCUtRProtocol):
    """py-libp2p's DCUtR, started the spec's way: only the peer that *accepted* the
    relayed connection opens the exchange. py-libp2p drives it from both ends, and
    the two concurrent sessions then dial the same address pair, one socket each,
    with Noise roles that match only half the time. When both peers dialled each
    other through a relay, the smaller peer id drives."""

    def __init__(self, host: Any, counters: Counters, dial_timeout: int) -> None:
        super().__init__(host, dial_timeout=dial_timeout)
        self.counters = counters

    def _to_drive(self) -> list[ID]:
        me = self.host.get_id()
        out = []
        for peer, conns in list(self.host.get_network().connections.items()):
            if peer == me or peer in self._in_progress or peer in self._direct_connections:
                continue
            if self._hole_punch_attempts.get(peer, 0) >= MAX_HOLE_PUNCH_ATTEMPTS:
                continue
            relayed = [c for c in conns or [] if is_relayed(c)]
            if not relayed or len(relayed) < len(conns or []):
                continue  # nothing relayed, or already direct
            ways = {getattr(c, "_direction", Direction.UNKNOWN) for c in relayed}
            if Direction.INBOUND in ways and (
                Direction.OUTBOUND not in ways or me.to_bytes() < peer.to_bytes()
            ):
                out.append(peer)
        return out

    async def _auto_drive_loop(self) -> None:
        while True:
            await trio.sleep(DRIVE_S)
            for peer in self._to_drive():
                self.counters.add("relay.punch_attempts")
                try:
                    if await self.initiate_hole_punch(peer):
                        self.counters.add("relay.punch_ok")
                # py-libp2p catches its own errors; anything left must not end the loop
                except Exception as err:
                    self.counters.add("relay.punch_failed")
                    log.debug("hole punch to %s raised %r", peer, err)

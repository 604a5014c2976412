"""Liveness: close connections whose path died silently, so that they are redialled.

A cut path (a partition, a router that lost its NAT mapping, a peer's machine that
lost power) drops packets without a reset. py-libp2p 0.8.1 keeps no keep-alive on
TCP or yamux, so such a connection stays "connected": the peer keeps its mesh slot
and its place in ``status``, and when the path heals, data moves again only at TCP's
next retransmission, which backs off up to two minutes (tests/test_partition.py
measured 51 s after a 60 s cut); the kernel gives up only after about 15 minutes.

Role: ``Liveness.run`` pings every connected peer (``/ipfs/ping/1.0.0``, which every
py-libp2p and go-libp2p host answers) every ``interval_s``; a peer that misses
``misses`` pings in a row is disconnected and counted (``peers_unresponsive``).
Gossipsub then fills the mesh from live peers, and the bootstrap and discovery loops
dial the peer again, with their own backoff, until the path is back.

Invariants:
- A round waits at most ``timeout_s`` for its pings, and never for a ping task: on
  a dead path py-libp2p's own cleanup of a timed-out stream can block (shielded from
  cancellation) behind a send buffer that never drains. Such a task keeps its peer's
  single ping slot (one task per peer at most) and each round it spends there is a
  miss, until the disconnect closes the socket and frees it.
- A disconnect closes the connection's socket first: a clean close writes a
  goodbye frame, which would wait behind the same stuck writer. Each step has a
  timeout.
- One missed ping never disconnects (a load spike, a long GIL hold): only
  ``misses`` in a row do; any answer resets the count.
- State is bounded by the connected peers: a peer no longer connected is forgotten.
"""

from __future__ import annotations

import logging
from typing import Any

import trio
from libp2p.host.ping import ID as PING_PROTOCOL
from libp2p.host.ping import perform_ping_roundtrip
from libp2p.peer.id import ID

from swarmnode.share.inbox import Counters

log = logging.getLogger("swarmnode.p2p")

INTERVAL_S = 5.0  # between the end of one round of pings and the next
MISSES = 2  # pings missed in a row before a peer is disconnected


class Liveness:
    """Pings the host's connected peers; disconnects those that stopped answering."""

    def __init__(
        self,
        host: Any,
        counters: Counters,
        timeout_s: float,
        interval_s: float = INTERVAL_S,
        misses: int = MISSES,
    ) -> None:
        self.host = host
        self.counters = counters
        self.timeout_s = timeout_s
        self.interval_s = interval_s
        self.misses = misses
        self.missed: dict[ID, int] = {}  # peer -> pings missed in a row
        self.pending: set[ID] = set()  # peers with a ping task still running
        self._answered: set[ID] = set()  # peers that answered in the current round
        self._progress = trio.Event()  # set whenever a ping task ends

    async def run(self) -> None:
        async with trio.open_nursery() as nursery:
            while True:
                await trio.sleep(self.interval_s)
                await self.check(nursery)

    async def check(self, nursery: trio.Nursery) -> list[ID]:
        """One round: ping every connected peer; return the peers disconnected."""
        peers = list(self.host.get_connected_peers())
        self.missed = {p: n for p, n in self.missed.items() if p in set(peers)}
        self._answered = set()
        for peer in peers:
            if peer not in self.pending:
                self.pending.add(peer)
                nursery.start_soon(self._ping, peer)
        with trio.move_on_after(self.timeout_s):
            while any(p in self.pending for p in peers):
                self._progress = trio.Event()
                await self._progress.wait()
        dropped = []
        for peer in peers:
            if peer in self._answered:
                self.missed.pop(peer, None)
                continue
            self.counters.add("ping_missed")
            self.missed[peer] = self.missed.get(peer, 0) + 1
            if self.missed[peer] >= self.misses:
                del self.missed[peer]
                dropped.append(peer)
                await self._disconnect(peer)
        return dropped

    async def _ping(self, peer: ID) -> None:
        try:
            with trio.move_on_after(self.timeout_s):
                stream = await self.host.new_stream(peer, [PING_PROTOCOL])
                try:
                    await perform_ping_roundtrip(stream)
                    self._answered.add(peer)
                finally:
                    await stream.reset()  # one ping per stream; nothing to flush
        # Opening or using the stream fails in transport-, muxer- and negotiation-
        # specific ways; each is a missed ping, counted by the round.
        except Exception as err:
            log.debug("ping %s failed: %s: %s", peer, err.__class__.__name__, err)
        finally:
            self.pending.discard(peer)
            self._progress.set()

    async def _disconnect(self, peer: ID) -> None:
        self.counters.add("peers_unresponsive")
        log.info("peer %s missed %d pings in a row: disconnecting", peer, self.misses)
        for conn in list(self.host.get_network().get_connections(peer)):
            secured = getattr(getattr(conn, "muxed_conn", None), "secured_conn", None)
            if secured is None:
                continue
            with trio.move_on_after(self.timeout_s):
                try:
                    await secured.close()
                except Exception as err:  # already broken: the socket is gone anyway
                    log.debug("closing the socket to %s: %r", peer, err)
        with trio.move_on_after(self.timeout_s):
            try:
                await self.host.disconnect(peer)
            except Exception as err:  # a dead connection may fail to close cleanly
                log.debug("disconnect %s: %r", peer, err)

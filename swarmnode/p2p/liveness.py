"""Liveness: close connections whose path died silently, so that they are redialled.

A cut path (a partition, a router that lost its NAT mapping, a peer's machine that
lost power) drops packets without a reset. py-libp2p 0.8.1 keeps no keep-alive on
TCP or yamux, so such a connection stays "connected": the peer keeps its mesh slot
and its place in ``status``, and when the path heals, data moves again only at TCP's
next retransmission, which backs off up to two minutes (tests/test_partition.py
measured 51 s after a 60 s cut); the kernel gives up only after about 15 minutes.

Role: ``Liveness.run`` checks every connected peer every ``interval_s``; a peer that
misses ``misses`` checks in a row is disconnected and counted (``peers_unresponsive``).
Gossipsub then fills the mesh from live peers, and the bootstrap and discovery loops
dial the peer again, with their own backoff, until the path is back.

A check is a yamux ping on the peer's connection: one frame each way, no stream,
no protocol negotiation, answered by every yamux implementation
(``ping_via_muxer``). It asked libp2p's ping (``/ipfs/ping/1.0.0``) first, which
opens a stream and negotiates it every time: with five idle stock peers that was
about a tenth of the libp2p thread's CPU (issue 28). A connection with another
muxer is asked libp2p's ping. Ping is optional in libp2p (js-libp2p runs none by
default), and a missing optional protocol is not a dead peer: a peer that refuses
ping in protocol negotiation has answered (alive this round, ``ping_unsupported``),
and one that refused it, or whose identify says it serves no ping, is not asked it
again; a connection that can be asked neither way shows nothing either way and is
not a miss (``ping_unverifiable``). Only no reply at all is a miss
(``ping_missed``).

Invariants:
- A round waits at most ``timeout_s`` for its checks, and never for a ping task: on
  a dead path py-libp2p's own cleanup of a timed-out stream can block (shielded from
  cancellation) behind a send buffer that never drains. Such a task keeps its peer's
  single ping slot (one task per peer at most) and each round it spends there is a
  miss, until the disconnect closes the socket and frees it.
- A disconnect closes the connection's socket first: a clean close writes a
  goodbye frame, which would wait behind the same stuck writer. Each step has a
  timeout.
- One missed check never disconnects (a load spike, a long GIL hold): only
  ``misses`` in a row do; any answer resets the count.
- State is bounded by the connected peers: a peer no longer connected is forgotten
  (its misses and whether it serves ping).
"""

from __future__ import annotations

import logging
import struct
from typing import Any

import trio
from libp2p.host.ping import ID as PING_PROTOCOL
from libp2p.host.ping import perform_ping_roundtrip
from libp2p.peer.id import ID
from libp2p.protocol_muxer.exceptions import MultiselectClientError
from libp2p.stream_muxer.yamux.yamux import FLAG_SYN, TYPE_PING, YAMUX_HEADER_FORMAT, Yamux

from swarmnode.share.inbox import Counters

log = logging.getLogger("swarmnode.p2p")

INTERVAL_S = 5.0  # between the end of one round of checks and the next (swarm.ping_interval_s)
MISSES = 2  # pings missed in a row before a peer is disconnected (swarm.ping_misses)


class Liveness:
    """Pings the host's connected peers; disconnects those that stopped answering."""

    def __init__(
        self,
        host: Any,
        counters: Counters,
        timeout_s: float,
        interval_s: float | None = None,
        misses: int = MISSES,
    ) -> None:
        self.host = host
        self.counters = counters
        self.timeout_s = timeout_s
        self.interval_s = INTERVAL_S if interval_s is None else interval_s
        self.misses = misses
        self.missed: dict[ID, int] = {}  # peer -> pings missed in a row
        self.no_ping: set[ID] = set()  # connected peers that serve no libp2p ping
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
        self.no_ping &= set(peers)
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
                if await self._probe(peer):
                    self._answered.add(peer)
        # Opening or using the stream fails in transport-, muxer- and negotiation-
        # specific ways; each is a missed check, counted by the round.
        except Exception as err:
            log.debug("ping %s failed: %s: %s", peer, err.__class__.__name__, err)
        finally:
            self.pending.discard(peer)
            self._progress.set()

    async def _probe(self, peer: ID) -> bool:
        """True if the peer answered: its muxer, its libp2p ping, or a refusal of it."""
        conns = list(self.host.get_network().get_connections(peer))
        muxers = [getattr(c, "muxed_conn", None) for c in conns]
        yamux = [m for m in muxers if isinstance(m, Yamux) and not m.is_closed]
        if yamux:
            if await yamux_ping(yamux[0]):
                self.counters.add("ping_via_muxer")
                return True
            return False
        if peer not in self.no_ping and not self._serves_no_ping(peer):
            try:
                stream = await self.host.new_stream(peer, [PING_PROTOCOL])
            except Exception as err:
                if not _refused(err):
                    raise
                self.no_ping.add(peer)  # it answered "na": alive, and not asked again
                self.counters.add("ping_unsupported")
                log.debug("peer %s serves no %s", peer, PING_PROTOCOL)
                return True
            try:
                await perform_ping_roundtrip(stream)
                return True
            finally:
                await stream.reset()  # one ping per stream; nothing to flush
        self.counters.add("ping_unverifiable")  # nothing to ask: not a miss
        return bool(conns)

    def _serves_no_ping(self, peer: ID) -> bool:
        """Identify has told us the peer's protocols, and ping is not among them."""
        try:
            protocols = self.host.get_peerstore().get_protocols(peer)
        except Exception:  # unknown to the peerstore, or a host without one: ask it
            return False
        if protocols and str(PING_PROTOCOL) not in protocols:
            self.no_ping.add(peer)
            self.counters.add("ping_unsupported")
            log.debug("peer %s lists no %s", peer, PING_PROTOCOL)
            return True
        return False

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


def _refused(err: BaseException) -> bool:
    """The peer answered the protocol negotiation, refusing the protocol ("na")."""
    seen: BaseException | None = err
    for _ in range(8):  # the chain py-libp2p builds is two or three deep
        if seen is None:
            return False
        if isinstance(seen, MultiselectClientError) and "not supported" in str(seen):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


async def yamux_ping(conn: Yamux) -> bool:
    """Send a yamux ping on ``conn`` and wait (the caller's timeout) for its answer.

    py-libp2p's yamux answers pings and sets ``_ping_event`` on the answer to the ping
    it sent last (its RTT loop pings every 30 s); this sends one the same way. If
    the RTT loop sends its own in between, the answer sets that loop's event instead
    and this check misses once (one miss never disconnects)."""
    event = trio.Event()
    conn._ping_id += 1
    conn._ping_event = event
    header = struct.pack(YAMUX_HEADER_FORMAT, 0, TYPE_PING, FLAG_SYN, 0, conn._ping_id)
    await conn._write_frame(header)
    conn._ping_sent_time = trio.current_time()
    await event.wait()
    return True

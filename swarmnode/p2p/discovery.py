"""Discovery: keep the host connected to its bootstrap peers and to ``target_peers``.

Role: the trio tasks that find and dial peers, for ``host.P2PHost``: one per
configured bootstrap peer (redialled with capped backoff whenever it drops) and one
discovery loop (DHT lookups of our own ID through whoever we are connected to; PX
and mDNS fill the peerstore too; then dial what is known until ``target_peers``).

Invariants:
- Every dial has a timeout (``dial_timeout_s``); failures are counted
  (``<kind>_failed`` / ``_timeout`` / ``_ok``), never raised. A candidate whose
  addresses expired while earlier candidates were dialled is skipped
  (``dial.addrs_expired``): that raised once and ended the node (chaos test).
- An unreachable bootstrap peer is retried forever, at most every
  ``bootstrap_backoff_max_s``, and never stalls anything else.
- DHT lookups back off while they learn nothing (``lookup_pacer``); dialling the
  candidates already known is not delayed.
- A peer that fails a dial waits before the next one (doubling, at most 300 s); a
  peer the node was connected to in the last 10 minutes (``KNOWN_FOR_S``) waits at
  most ``redial_backoff_max_s`` (30 s): after a cut, or a peer's restart, the two
  find each other again within that, also where no bootstrap or gossip crosses
  between them (an mDNS-only LAN). A peer that left for good costs at most ~20
  such dials before it backs off like any other. Both memories are bounded (4,096 peers, the
  stalest forgotten first). Blacklisted (graylisted) peers are never dialled.
- A peer without direct addresses, or whose direct dial fails, is dialled through a
  relay it advertises (``nat.NatTraversal``).
- The node never dials itself: not its own peer ID (a bootstrap list that names the
  node, as one config shared by a compose file does), and not one of its own
  listen or announce addresses under another peer's ID (in Docker every node
  listens on 4001 and a peer advertises 127.0.0.1:4001, which is this node).
  The address rule sits on the swarm's connection gate, so py-libp2p's own dialers
  (its auto-connector) keep it too. Each skip is counted (``dial.self_skipped``,
  ``dial.own_addr_skipped``) and logged at debug.
- The DHT asks only peers that may serve it: one whose identify lists its protocols
  without ``/ipfs/kad/1.0.0`` is dropped from the routing table and not queried
  (``dht.skipped_no_kad``, debug): it is not an error, and py-libp2p logged one at
  ERROR for every such peer on every lookup.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from typing import Any

import multiaddr
import trio
from libp2p.kad_dht.common import PROTOCOL_ID as KAD_PROTOCOL
from libp2p.kad_dht.kad_dht import KadDHT
from libp2p.peer.id import ID
from libp2p.peer.peerinfo import PeerInfo, info_from_p2p_addr
from libp2p.peer.peerstore import PeerStoreError

from swarmnode.config import SwarmConfig
from swarmnode.p2p.lookup_pacer import LookupPacer
from swarmnode.p2p.nat import NatTraversal
from swarmnode.share.inbox import Counters

log = logging.getLogger("swarmnode.p2p")

MAX_DIAL_BACKOFF_S = 300.0
KNOWN_FOR_S = 600.0  # a peer connected this recently is redialled within redial_backoff_max_s
_BACKOFF_KEEP = 4096


class Discovery:
    """Bootstrap redialling and the discovery loop of one host (see module docstring)."""

    def __init__(
        self,
        cfg: SwarmConfig,
        counters: Counters,
        nat: NatTraversal,
        peer_id: ID,
        blacklisted: Callable[[ID], bool],
        on_tick: Callable[[], None] = lambda: None,
    ) -> None:
        self.cfg = cfg
        self.counters = counters
        self.nat = nat
        self.peer_id = peer_id
        self.blacklisted = blacklisted
        self.on_tick = on_tick  # the host's housekeeping, once per discovery interval
        self.lookups = LookupPacer(cfg.discovery_interval_s)
        self.host: Any = None
        self.dht: KadDHT | None = None
        self._dial_backoff: dict[ID, tuple[float, float]] = {}  # peer -> (next try, delay)
        self._last_connected: dict[ID, float] = {}  # peer -> when a tick last saw it connected

    def attach(self, host: Any, dht: KadDHT | None) -> None:
        self.host, self.dht = host, dht
        gate_own_addrs(host, self.counters, self.cfg.listen + self.cfg.announce)
        if dht is not None:
            query_only_kad_peers(dht, host, self.counters)

    def connected(self, peer: ID) -> bool:
        return bool(self.host is not None and peer in set(self.host.get_connected_peers()))

    async def dial(self, info: PeerInfo, counter: str) -> bool:
        """One dial with a timeout; True if connected. Failures are counted, not raised."""
        try:
            with trio.fail_after(self.cfg.dial_timeout_s):
                await self.host.connect(info)
        except trio.TooSlowError:
            self.counters.add(f"{counter}_timeout")
            return False
        # Dial failures surface as SwarmException, OSError, multiselect, noise or
        # PSK decryption errors depending on where the handshake broke.
        except Exception as err:
            self.counters.add(f"{counter}_failed")
            log.debug("dial %s failed: %s: %s", info.peer_id, err.__class__.__name__, err)
            return False
        self.counters.add(f"{counter}_ok")
        return True

    async def keep_bootstrap(self, text: str) -> None:
        """Stay connected to one bootstrap peer: redial with capped backoff when it drops."""
        info = info_from_p2p_addr(multiaddr.Multiaddr(text))
        if info.peer_id == self.peer_id:
            self.counters.add("dial.self_skipped")
            log.debug("bootstrap %s is this node: not dialled", text)
            return
        delay = 1.0
        while True:
            if self.connected(info.peer_id):
                delay = 1.0
                await trio.sleep(self.cfg.discovery_interval_s)
                continue
            self._unblock(info.peer_id)
            if await self.dial(info, "bootstrap_dial"):
                delay = 1.0
                continue
            log.info("bootstrap %s unreachable; retrying in %.0fs", text, delay)
            await trio.sleep(delay * random.uniform(0.8, 1.2))
            delay = min(delay * 2, self.cfg.bootstrap_backoff_max_s)

    def _unblock(self, peer: ID) -> None:
        """py-libp2p refuses to redial a peer whose addresses all failed in the last
        60 s (its negative cache). Our own capped backoff paces our dials, so before
        each we lift that refusal: a restarted peer is found when our backoff says."""
        unblock = getattr(self.host.get_network(), "unblock_peer", None)
        if unblock is not None:
            unblock(peer)

    async def run(self) -> None:
        """Learn peers (DHT lookups; PX and mDNS fill the peerstore) and dial them."""
        while True:
            await trio.sleep(self.cfg.discovery_interval_s)
            self.on_tick()
            connected = set(self.host.get_connected_peers())
            self._saw_connected(connected)
            if len(connected) >= self.cfg.target_peers:
                continue
            if (
                self.dht is not None
                and connected
                and self.lookups.due(trio.current_time(), len(connected))
            ):
                await self._dht_lookup()
            await self._dial_candidates(connected)

    async def _dht_lookup(self) -> None:
        """One lookup of our own ID; the pacer backs off while they learn nothing."""
        assert self.dht is not None
        store = self.host.get_peerstore()
        known = set(store.peers_with_addrs())
        self.counters.add("dht_lookups")
        with trio.move_on_after(self.cfg.dial_timeout_s):
            try:
                await self.dht.peer_routing.find_closest_peers_network(self.peer_id.to_bytes())
            # a lookup fails per queried peer in many ways; a later tick retries
            except Exception as err:
                self.counters.add("dht_lookup_failed")
                log.debug("DHT lookup failed: %s", err)
        learned = bool(set(store.peers_with_addrs()) - known)
        self.lookups.done(trio.current_time(), learned)

    async def _dial_candidates(self, connected: set[ID]) -> None:
        store = self.host.get_peerstore()
        now = trio.current_time()
        want = self.cfg.target_peers - len(connected)
        candidates = [
            p
            for p in store.peers_with_addrs()
            if p != self.peer_id
            and p not in connected
            and not self.blacklisted(p)
            and self._dial_backoff.get(p, (0.0, 0.0))[0] <= now
        ]
        random.shuffle(candidates)
        for peer in candidates[: max(0, want)]:
            # Each dial awaits: by a later candidate's turn its addresses may have
            # expired (a peer that left) or been evicted; py-libp2p raises for those.
            try:
                addrs = store.addrs(peer)
            except PeerStoreError:
                self.counters.add("dial.addrs_expired")
                continue
            if await self._dial_peer(peer, addrs):
                self._dial_backoff.pop(peer, None)
            else:
                self._back_off(peer)
        _forget_stalest(self._dial_backoff, lambda v: v[0])

    def _saw_connected(self, connected: set[ID]) -> None:
        now = trio.current_time()
        for peer in connected:
            self._last_connected[peer] = now
        _forget_stalest(self._last_connected, lambda t: t)

    def _back_off(self, peer: ID) -> None:
        """After a failed dial: double the peer's wait, up to its cap (docstring)."""
        now = trio.current_time()
        seen = self._last_connected.get(peer)
        known = seen is not None and now - seen < KNOWN_FOR_S
        cap = MAX_DIAL_BACKOFF_S
        if known:
            cap = min(self.cfg.redial_backoff_max_s, MAX_DIAL_BACKOFF_S)
        delay = min(self._dial_backoff.get(peer, (0.0, 1.0))[1] * 2, cap)
        self._dial_backoff[peer] = (now + delay, delay)
        if known and delay == cap < MAX_DIAL_BACKOFF_S:
            self.counters.add("dial.redial_capped")  # a known peer, redialled sooner

    async def _dial_peer(self, peer: ID, addrs: list[multiaddr.Multiaddr]) -> bool:
        """Directly if it has direct addresses, else (or if that fails) through a relay."""
        direct = [a for a in addrs if "/p2p-circuit" not in str(a)]
        if direct:
            self._unblock(peer)
        if direct and await self.dial(PeerInfo(peer, direct), "peer_dial"):
            return True
        return len(direct) < len(addrs) and await self.nat.dial_relayed(peer, addrs)


def _forget_stalest(memory: dict[ID, Any], when: Callable[[Any], float]) -> None:
    """Past ``_BACKOFF_KEEP`` entries, drop the stalest half: bounded memory."""
    if len(memory) > _BACKOFF_KEEP:
        for peer in sorted(memory, key=lambda p: when(memory[p]))[: _BACKOFF_KEEP // 2]:
            del memory[peer]


def own_addrs(host: Any, configured: list[str]) -> set[str]:
    """This node's dialable addresses as text without ``/p2p/``: what it listens on
    (a wildcard listen also as loopback), what it announces, what it is configured
    with."""
    texts = [str(a) for a in [*host.get_addrs(), *host.get_transport_addrs()]] + configured
    out: set[str] = set()
    for text in texts:
        text = text.split("/p2p/", 1)[0]
        out.add(text)
        for wildcard, loopback in (("/ip4/0.0.0.0/", "/ip4/127.0.0.1/"), ("/ip6/::/", "/ip6/::1/")):
            if text.startswith(wildcard):
                out.add(loopback + text[len(wildcard) :])
    return out


def gate_own_addrs(host: Any, counters: Counters, configured: list[str]) -> None:
    """Refuse, on the swarm's connection gate, to dial any of this node's own
    addresses (module docstring). Own addresses are re-read on each check (relay
    slots and observed addresses change them); a port-0 listen resolves at start."""
    gate = host.get_network().connection_gate
    allowed = gate.is_allowed

    async def is_allowed(addr: multiaddr.Multiaddr) -> bool:
        text = str(addr).split("/p2p/", 1)[0]
        if "/p2p-circuit" not in text and text in own_addrs(host, configured):
            counters.add("dial.own_addr_skipped")
            log.debug("not dialling %s: it is this node's own address", addr)
            return False
        return bool(await allowed(addr))

    gate.is_allowed = is_allowed


def serves_no_kad(host: Any, peer: ID) -> bool:
    """Identify has told us the peer's protocols, and Kademlia is not among them."""
    try:
        protocols = host.get_peerstore().get_protocols(peer)
    except Exception:  # not in the peerstore yet: it may serve it
        return False
    return bool(protocols) and str(KAD_PROTOCOL) not in protocols


def query_only_kad_peers(dht: KadDHT, host: Any, counters: Counters) -> None:
    """Route py-libp2p's per-peer DHT query through a check that the peer may serve
    Kademlia (module docstring); all its lookups (ours, its refresh, its random
    walk) go through that one query."""
    routing = dht.peer_routing
    query = routing._query_single_peer_for_closest

    async def query_if_served(peer: ID, target_key: bytes, new_peers: list[ID]) -> Any:
        if serves_no_kad(host, peer):
            counters.add("dht.skipped_no_kad")
            log.debug("peer %s serves no %s: not asked", peer, KAD_PROTOCOL)
            routing.routing_table.remove_peer(peer)
            return []
        return await query(peer, target_key, new_peers)

    routing._query_single_peer_for_closest = query_if_served  # type: ignore[method-assign]

"""Discovery: keep the host connected to its bootstrap peers and to ``target_peers``.

Role: the trio tasks that find and dial peers, for ``host.P2PHost``: one per
configured bootstrap peer (redialled with capped backoff whenever it drops) and one
discovery loop (DHT lookups of our own ID through whoever we are connected to; PX
and mDNS fill the peerstore too; then dial what is known until ``target_peers``).

Invariants:
- Every dial has a timeout (``dial_timeout_s``); failures are counted
  (``<kind>_failed`` / ``_timeout`` / ``_ok``), never raised.
- An unreachable bootstrap peer is retried forever, at most every
  ``bootstrap_backoff_max_s``, and never stalls anything else.
- DHT lookups back off while they learn nothing (``lookup_pacer``); dialling the
  candidates already known is not delayed.
- A peer that fails a dial waits before the next one (doubling, at most 300 s); that
  memory is bounded (4,096 peers, the stalest forgotten first). Blacklisted
  (graylisted) peers are never dialled.
- A peer without direct addresses, or whose direct dial fails, is dialled through a
  relay it advertises (``nat.NatTraversal``).
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from typing import Any

import multiaddr
import trio
from libp2p.kad_dht.kad_dht import KadDHT
from libp2p.peer.id import ID
from libp2p.peer.peerinfo import PeerInfo, info_from_p2p_addr

from swarmnode.config import SwarmConfig
from swarmnode.p2p.lookup_pacer import LookupPacer
from swarmnode.p2p.nat import NatTraversal
from swarmnode.share.inbox import Counters

log = logging.getLogger("swarmnode.p2p")

MAX_DIAL_BACKOFF_S = 300.0
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

    def attach(self, host: Any, dht: KadDHT | None) -> None:
        self.host, self.dht = host, dht

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
        delay = 1.0
        while True:
            if self.connected(info.peer_id):
                delay = 1.0
                await trio.sleep(self.cfg.discovery_interval_s)
                continue
            # py-libp2p refuses to redial a peer whose addresses all failed recently (a
            # negative cache of tens of seconds); for a configured bootstrap peer our own
            # capped backoff paces the dials, so a restarted bootstrap is found at once.
            unblock = getattr(self.host.get_network(), "unblock_peer", None)
            if unblock is not None:
                unblock(info.peer_id)
            if await self.dial(info, "bootstrap_dial"):
                delay = 1.0
                continue
            log.info("bootstrap %s unreachable; retrying in %.0fs", text, delay)
            await trio.sleep(delay * random.uniform(0.8, 1.2))
            delay = min(delay * 2, self.cfg.bootstrap_backoff_max_s)

    async def run(self) -> None:
        """Learn peers (DHT lookups; PX and mDNS fill the peerstore) and dial them."""
        while True:
            await trio.sleep(self.cfg.discovery_interval_s)
            self.on_tick()
            connected = set(self.host.get_connected_peers())
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
            if await self._dial_peer(peer, store.addrs(peer)):
                self._dial_backoff.pop(peer, None)
            else:
                delay = min(self._dial_backoff.get(peer, (0.0, 1.0))[1] * 2, MAX_DIAL_BACKOFF_S)
                self._dial_backoff[peer] = (trio.current_time() + delay, delay)
        if len(self._dial_backoff) > _BACKOFF_KEEP:  # forget the stalest; bounded memory
            stalest = sorted(self._dial_backoff, key=lambda p: self._dial_backoff[p][0])
            for peer in stalest[: _BACKOFF_KEEP // 2]:
                del self._dial_backoff[peer]

    async def _dial_peer(self, peer: ID, addrs: list[multiaddr.Multiaddr]) -> bool:
        """Directly if it has direct addresses, else (or if that fails) through a relay."""
        direct = [a for a in addrs if "/p2p-circuit" not in str(a)]
        if direct and await self.dial(PeerInfo(peer, direct), "peer_dial"):
            return True
        return len(direct) < len(addrs) and await self.nat.dial_relayed(peer, addrs)

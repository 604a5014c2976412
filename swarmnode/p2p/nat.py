"""Crossing NAT: circuit relay v2 (serve, reserve, dial), DCUtR hole punching, AutoNAT.

Role: the trio-side helper ``P2PHost`` owns when ``swarm.relay`` asks for it. A
public node with ``relay.serve`` relays for others; a node behind NAT reserves a
slot on relays among its connected peers (bootstrap peers first), advertises
``<relay>/p2p-circuit/p2p/<self>`` so peers can reach it, dials peers that
advertise such addresses through their relay, and lets DCUtR (``holepunch``) try
to replace a relayed connection with a direct one.

Only the standard protocols: ``/libp2p/circuit/relay/0.2.0/hop`` and ``/stop``
(``relay.RelayService`` serves both), ``/libp2p/dcutr``,
``/libp2p/autonat/1.0.0`` (``autonat.Reachability``). The reservation and connect
exchanges are written here on py-libp2p's protobufs: its client transport also
reserves on every dial and retries through stored addresses without bounds.

Invariants:
- Serving is opt-in (``relay.serve``); a relay bounds reservations, circuits per
  peer, and each circuit's bytes and lifetime (``relay.*``), so the peers redial.
- A reservation is held only while it is wanted (``relay.use`` true, or ``auto``
  and AutoNAT does not say public), on at most ``relay.max_relays`` relays, and
  forgotten when its relay disconnects (the relay forgets it too). Each change is
  pushed to connected peers (identify push), so they learn the circuit address.
- Every reservation and relayed dial is bounded by ``dial_timeout_s``; failures
  are counted (``relay.*``), logged at debug, and never raised to the host.
- A relayed connection goes through the same PSK, Noise and yamux upgrade as a
  direct one (PSK wrapped on both sides, as go-libp2p does).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from contextlib import AsyncExitStack
from typing import Any

import multiaddr
import trio
from libp2p.connection_types import ConnectionType
from libp2p.identity.identify_push.identify_push import push_identify_to_peers
from libp2p.network.connection.raw_connection import RawConnection
from libp2p.peer.id import ID
from libp2p.peer.peerinfo import PeerInfo
from libp2p.relay.circuit_v2.pb.circuit_pb2 import HopMessage
from libp2p.relay.circuit_v2.pb.circuit_pb2 import PeerId as CircuitPeerId
from libp2p.relay.circuit_v2.protocol import PROTOCOL_ID as HOP_PROTOCOL
from libp2p.relay.circuit_v2.protocol_buffer import StatusCode
from libp2p.relay.circuit_v2.resources import RelayLimits
from libp2p.relay.circuit_v2.utils import read_delimited_msg, write_delimited_msg
from libp2p.security.pnet.protector import new_protected_conn

from swarmnode.config import SwarmConfig
from swarmnode.p2p.autonat import PUBLIC, Reachability, is_relayed
from swarmnode.p2p.contain import TaskGuard, contained_service
from swarmnode.p2p.holepunch import ListenerDrivenDCUtR
from swarmnode.p2p.relay import RelayService
from swarmnode.share.inbox import Counters

log = logging.getLogger("swarmnode.p2p")
# py-libp2p's relay service logs the normal end of every HOP stream and circuit (EOF,
# reset) as an error, several lines each; the relay's own figures are in snapshot().
logging.getLogger("libp2p.relay.circuit_v2.protocol").setLevel(logging.CRITICAL)


class _StaleRecordNoise(logging.Filter):
    """py-libp2p's DHT logs this error whenever a peer hands it a signed peer record
    older than the one it holds: what happens each time a node's addresses change (a
    relay slot won or lost) while peers still pass its previous record around. The
    newer record is kept either way. (A record that fails to parse logs another text.)"""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.msg != "Failed to update the Certified-Addr-Book"


logging.getLogger("libp2p.kad_dht.utils").addFilter(_StaleRecordNoise())

RESERVATION_TTL_S = 3600  # what a relay grants; a held one is renewed REFRESH_S before
REFRESH_S = 300
CHECK_S = 5.0  # how often reservations are looked at
WATCH_S = 1.0  # how often connection kinds are (relayed -> direct upgrades timed)
ADDRS_TTL_S = 5.0  # listen addresses are re-read at most this often (get_addrs)
_MAX_CIRCUIT_ADDRS = 4  # per peer, tried in order when dialling through relays


def split_circuit(addr: multiaddr.Multiaddr) -> tuple[multiaddr.Multiaddr, ID, ID | None] | None:
    """``<relay addr>/p2p/<relay>/p2p-circuit[/p2p/<target>]`` -> (relay addr, relay, target).

    >>> ma = multiaddr.Multiaddr
    >>> r = "12D3KooWPjceQrSwdWXPyLLeABRXmuqt69Rg3sBYbU1Nft9HyQ6X"
    >>> split_circuit(ma(f"/ip4/1.2.3.4/tcp/4001/p2p/{r}/p2p-circuit"))[1].to_base58() == r
    True
    >>> split_circuit(ma("/ip4/1.2.3.4/tcp/4001")) is None
    True
    """
    text = str(addr)
    head, sep, tail = text.partition("/p2p-circuit")
    if not sep or "/p2p/" not in head:
        return None
    try:
        relay_addr, relay_id = head.rsplit("/p2p/", 1)
        target = ID.from_base58(tail.removeprefix("/p2p/")) if tail.startswith("/p2p/") else None
        return multiaddr.Multiaddr(relay_addr), ID.from_base58(relay_id), target
    except Exception:  # a malformed id or address from a peer: not usable
        return None


class NatTraversal:
    """Relay service and client, DCUtR and AutoNAT of one host."""

    def __init__(self, cfg: SwarmConfig, counters: Counters, psk: str | None) -> None:
        self.cfg = cfg
        self.rcfg = cfg.relay
        self.counters = counters
        self.psk = psk
        self.host: Any = None
        self.reach: Reachability | None = None
        self.protocol: RelayService | None = None
        self.dcutr: ListenerDrivenDCUtR | None = None
        # serving: whether a peer is a swarm member (its slot goes before a stranger's);
        # set by the host before ``start``
        self.is_member: Callable[[ID], bool] | None = None
        self._bootstrap_ids: list[ID] = []
        for text in cfg.bootstrap:
            found = text.rsplit("/p2p/", 1)
            try:
                self._bootstrap_ids.append(ID.from_base58(found[-1]))
            except Exception:  # config validation already required /p2p/<id>
                continue
        # relay -> (expires at, its addresses as the relay reported them and as we reach it)
        self._reservations: dict[ID, tuple[float, list[multiaddr.Multiaddr]]] = {}
        self._relayed_seen: dict[ID, float] = {}  # peer -> when first seen only relayed
        self._upgraded: dict[ID, float] = {}  # peer -> when a direct connection joined

    @property
    def relaying(self) -> bool:
        """Whether this node reserves slots and dials through relays at all."""
        return self.rcfg.use is not False

    def wants_reservations(self) -> bool:
        if self.rcfg.use is True:
            return True
        return self.rcfg.use == "auto" and (self.reach is None or self.reach.status != PUBLIC)

    # ---- addresses ----------------------------------------------------------------

    def circuit_addrs(self) -> list[multiaddr.Multiaddr]:
        """``<relay addr>/p2p/<relay>/p2p-circuit/p2p/<self>``, per held reservation."""
        me = self.host.get_id().to_base58()
        return [
            multiaddr.Multiaddr(f"{a}/p2p/{relay.to_base58()}/p2p-circuit/p2p/{me}")
            for relay, (_, addrs) in self._reservations.items()
            for a in addrs[:2]
        ]

    def attach(self, host: Any) -> None:
        """Make ``host.get_addrs`` (what identify, the signed peer record and the DHT
        advertise) include our circuit addresses. Not through py-libp2p's
        ``addrs_factory``: its ``get_addrs`` strips every address from the first
        ``/p2p/`` on, which cuts a circuit address down to the relay's own address."""
        self.host = host
        plain = host.get_addrs
        cache: list[Any] = [0.0, []]  # (when, listen addrs)

        def get_addrs() -> list[multiaddr.Multiaddr]:
            # py-libp2p asks for them on every RPC it sends (to check its signed
            # record), and each ask was a getsockname per listener: a sixth of the
            # libp2p thread's time at 20 messages a second. Listen addresses change
            # only at start-up, so they are read at most every ADDRS_TTL_S.
            now = time.monotonic()
            if now - cache[0] > ADDRS_TTL_S or not cache[1]:
                cache[0], cache[1] = now, plain()
            return [*cache[1], *self.circuit_addrs()]

        host.get_addrs = get_addrs

    # ---- lifecycle ----------------------------------------------------------------

    async def start(self, stack: AsyncExitStack, guard: TaskGuard) -> None:
        """Register the protocols on the attached host (their services live in ``stack``,
        their peer tasks contained by ``guard``)."""
        host = self.host
        rc = self.rcfg
        if self.cfg.autonat:
            self.reach = Reachability(
                host, self.counters, self.cfg.autonat_interval_s, self.cfg.dial_timeout_s, self.psk
            )
        if rc.serve or self.relaying:
            limits = RelayLimits(
                duration=rc.max_circuit_s,
                data=rc.max_circuit_mib << 20,
                max_circuit_conns=rc.max_circuits_per_peer,
                max_reservations=rc.max_reservations,
                reservation_ttl=RESERVATION_TTL_S,
            )
            # HOP (relaying for others) only with serve; STOP (being reached) always.
            self.protocol = RelayService(
                host,
                limits,
                allow_hop=rc.serve,
                counters=self.counters,
                max_per_ip=rc.max_reservations_per_ip,
                max_per_subnet=rc.max_reservations_per_subnet,
                is_member=self.is_member,
            )
            await stack.enter_async_context(contained_service(self.protocol, guard))
        if self.relaying and rc.hole_punch:
            timeout = int(max(1, self.cfg.dial_timeout_s))
            self.dcutr = ListenerDrivenDCUtR(host, self.counters, dial_timeout=timeout)
            await stack.enter_async_context(contained_service(self.dcutr, guard))

    async def run(self) -> None:
        async with trio.open_nursery() as nursery:
            if self.reach is not None:
                nursery.start_soon(self.reach.run)
            nursery.start_soon(self._keep_loop)

    async def _keep_loop(self) -> None:
        """Reservations every ``CHECK_S`` (at once when reachability changes); connection
        kinds every ``WATCH_S``."""
        due = 0.0
        while True:
            self._watch_connections()
            if self.relaying and trio.current_time() >= due:
                due = trio.current_time() + CHECK_S
                if await self._keep_reservations():
                    await self._announce()
            with trio.move_on_after(WATCH_S):
                if self.reach is not None:
                    await self.reach.wait_changed()
                    due = 0.0
                else:
                    await trio.sleep_forever()

    # ---- reservations ---------------------------------------------------------------

    def _connected(self, peer: ID) -> bool:
        return bool(self.host.get_network().connections.get(peer))

    def _direct(self, peer: ID) -> bool:
        conns = self.host.get_network().connections.get(peer) or []
        return any(not is_relayed(c) for c in conns)

    def relay_candidates(self) -> list[ID]:
        """Directly connected peers that offer HOP: bootstrap peers first."""
        store = self.host.get_peerstore()
        found = []
        for peer in self.host.get_connected_peers():
            try:
                if HOP_PROTOCOL in store.get_protocols(peer) and self._direct(peer):
                    found.append(peer)
            except Exception:  # no protocol record yet (identify still running)
                continue
        rank = {p: i for i, p in enumerate(self._bootstrap_ids)}
        return sorted(found, key=lambda p: (rank.get(p, len(rank)), p.to_base58()))

    async def _keep_reservations(self) -> bool:
        """Reserve, renew, drop; True if the advertised circuit addresses changed."""
        changed = False
        now = time.time()
        want = self.wants_reservations()
        for relay, (expires, _) in list(self._reservations.items()):
            if not want or expires <= now or not self._connected(relay):
                del self._reservations[relay]
                self.counters.add("relay.reservation_dropped")
                changed = True
        if want:
            for relay in self.relay_candidates()[: self.rcfg.max_relays]:
                held = self._reservations.get(relay)
                if held is None or held[0] - now < REFRESH_S:
                    got = await self._reserve(relay)
                    changed |= got and held is None
        return changed

    async def _reserve(self, relay: ID) -> bool:
        """One RESERVE exchange on a fresh HOP stream (the spec's message has no fields)."""
        try:
            with trio.fail_after(self.cfg.dial_timeout_s):
                stream = await self.host.new_stream(relay, [HOP_PROTOCOL])
                try:
                    await write_delimited_msg(stream, HopMessage(type=HopMessage.RESERVE))
                    resp = await read_delimited_msg(stream, HopMessage)
                finally:
                    await stream.close()
        # stream refused, reset, timed out, or a reply that does not parse
        except Exception as err:
            self.counters.add("relay.reserve_failed")
            log.debug("reservation on relay %s failed: %r", relay, err)
            return False
        if resp.type != HopMessage.STATUS or resp.status != StatusCode.OK:
            self.counters.add("relay.reserve_refused")
            log.info("relay %s refused a reservation (status %s)", relay, resp.status)
            return False
        expires = float(resp.reservation.expire) if resp.HasField("reservation") else 0.0
        if expires <= time.time():  # no expiry given: assume the relay's shortest sane term
            expires = time.time() + 2 * REFRESH_S
        addrs = self._relay_addrs(relay, list(resp.reservation.addrs))
        first = relay not in self._reservations
        self._reservations[relay] = (expires, addrs)
        self.counters.add("relay.reserved")
        if first:
            log.info("reserved a slot on relay %s (%s)", relay, ", ".join(map(str, addrs)))
        return True

    def _relay_addrs(self, relay: ID, reported: list[bytes]) -> list[multiaddr.Multiaddr]:
        """The relay's addresses without /p2p: where we reach it first, then its own list."""
        out: list[str] = []
        for conn in self.host.get_network().connections.get(relay) or []:
            out += [str(a) for a in (getattr(conn, "_actual_transport_addresses", None) or [])]
        for raw in reported:
            try:
                out.append(str(multiaddr.Multiaddr(raw)))
            except Exception:  # a relay's malformed address: skip it
                continue
        clean = [a.split("/p2p/")[0] for a in out if "/p2p-circuit" not in a]
        return [multiaddr.Multiaddr(a) for a in dict.fromkeys(clean) if a]

    async def _announce(self) -> None:
        """Push our new address list to connected peers (identify push), bounded."""
        with trio.move_on_after(self.cfg.dial_timeout_s):
            try:
                await push_identify_to_peers(self.host)
            except Exception as err:  # best effort: peers also learn it on their next identify
                log.debug("identify push failed: %r", err)

    # ---- relayed dials --------------------------------------------------------------

    async def dial_relayed(self, peer: ID, addrs: list[multiaddr.Multiaddr]) -> bool:
        """Connect to ``peer`` through one of its circuit addresses; True on success."""
        if not self.relaying:
            return False
        circuits = []
        for a in addrs:
            parts = split_circuit(a)
            if parts is not None and parts[2] in (None, peer) and parts[1] != self.host.get_id():
                circuits.append(parts)
        for relay_addr, relay, _ in circuits[:_MAX_CIRCUIT_ADDRS]:
            try:
                with trio.fail_after(self.cfg.dial_timeout_s):
                    if not self._connected(relay):
                        await self.host.connect(PeerInfo(relay, [relay_addr]))
                    raw = await self._open_circuit(relay, peer)
                    await self.host.upgrade_outbound_connection(raw, peer)
            # relay unreachable, NO_RESERVATION, handshake failure, timeout: next address
            except Exception as err:
                self.counters.add("relay.dial_failed")
                log.debug("relayed dial to %s via %s failed: %r", peer, relay, err)
                continue
            self.counters.add("relay.dial_ok")
            log.info("connected to %s through relay %s", peer, relay)
            return True
        return False

    async def _open_circuit(self, relay: ID, peer: ID) -> Any:
        """HOP CONNECT: the stream itself becomes the raw connection to ``peer``."""
        stream = await self.host.new_stream(relay, [HOP_PROTOCOL])
        try:
            msg = HopMessage(type=HopMessage.CONNECT, peer=CircuitPeerId(id=peer.to_bytes()))
            await write_delimited_msg(stream, msg)
            resp = await read_delimited_msg(stream, HopMessage)
            if resp.type != HopMessage.STATUS or resp.status != StatusCode.OK:
                raise ConnectionError(f"relay answered status {resp.status}")
        except BaseException:
            with trio.CancelScope(shield=True), trio.move_on_after(1.0):
                await stream.reset()
            raise
        addr = multiaddr.Multiaddr(f"/p2p/{relay.to_base58()}/p2p-circuit/p2p/{peer.to_base58()}")
        raw: Any = RawConnection(stream, True, ConnectionType.RELAYED, [addr])
        if self.psk is not None:  # the relay's side wraps inbound; so must we
            raw = new_protected_conn(raw, self.psk)
            raw._connection_type, raw._actual_addresses = ConnectionType.RELAYED, [addr]
        return raw

    # ---- status ---------------------------------------------------------------------

    def connection_kinds(self) -> dict[str, str]:
        """peer -> 'direct', 'relayed' or 'direct+relayed' for every connected peer."""
        out = {}
        for peer, conns in list(self.host.get_network().connections.items()):
            kinds = sorted({"relayed" if is_relayed(c) else "direct" for c in conns or []})
            if kinds:
                out[peer.to_base58()] = "+".join(kinds)
        return out

    def _watch_connections(self) -> None:
        """Note peers first seen only relayed, and when a direct connection joined."""
        now = time.time()
        network = self.host.get_network()
        for peer, conns in list(network.connections.items()):
            relayed = [c for c in conns or [] if is_relayed(c)]
            direct = len(conns or []) > len(relayed)
            if relayed and not direct and peer not in self._relayed_seen:
                self._relayed_seen[peer] = now
            elif direct and peer in self._relayed_seen and peer not in self._upgraded:
                self._upgraded[peer] = now
                self.counters.add("relay.upgraded_direct")
                log.info("relayed connection to %s upgraded to direct (DCUtR)", peer)
        if len(self._relayed_seen) > 4096:  # bounded: forget peers no longer connected
            for peer in [p for p in self._relayed_seen if p not in network.connections]:
                self._relayed_seen.pop(peer, None)
                self._upgraded.pop(peer, None)

    def snapshot(self) -> dict[str, Any]:
        now = time.time()
        served = circuits = 0
        if self.protocol is not None and self.rcfg.serve:
            rm = self.protocol.resource_manager  # live = unexpired, holder still connected
            served = sum(1 for p in list(rm._reservations) if rm.get_reservation(p))
            circuits = self.protocol.circuits
        kinds = self.connection_kinds() if self.host is not None else {}
        return {
            "reachability": self.reach.snapshot()["status"] if self.reach else "unknown",
            "autonat": self.reach.snapshot() if self.reach else None,
            "relay_serving": self.rcfg.serve,
            "relay_reservations_served": served,
            "relay_circuits_served": circuits,
            "relay_reservations": [
                {"relay": r.to_base58(), "expires_in_s": round(exp - now), "via": list(map(str, a))}
                for r, (exp, a) in self._reservations.items()
            ],
            "connections": kinds,
            "relayed_peers": sorted(p for p, k in kinds.items() if k == "relayed"),
            # connected peers first reached only through a relay -> since when (unix)
            "relayed_since": {
                p.to_base58(): t for p, t in self._relayed_seen.items() if p.to_base58() in kinds
            },
            # peer -> {at: unix time, after_s: seconds it was reachable only relayed}
            "hole_punched": {
                p.to_base58(): {"at": t, "after_s": round(t - self._relayed_seen[p], 1)}
                for p, t in self._upgraded.items()
            },
        }

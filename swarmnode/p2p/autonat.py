"""Reachability: is this node dialable from the internet? AutoNAT v1, both halves.

Role: ask peers on ``/libp2p/autonat/1.0.0`` (the standard id, so go, rust and js
peers answer and ask too) to dial this node back, and answer their requests.
``status`` is ``public``, ``private`` or ``unknown``; ``relay.use: auto`` reserves
relay slots unless it is ``public``.

Why not py-libp2p 0.8.1's ``AutoNATService`` as it stands: its server "dials back"
with ``host.connect``, which returns at once when a connection already exists, and
the asking peer is always connected (it opened the stream). Every answer was OK,
so a node behind NAT read itself as public. Here the dial-back is a fresh TCP
connection that must complete the Noise handshake with the asking peer's key.

Invariants:
- A server dials only addresses on the IP it observes the request from (py-libp2p's
  filter, kept): no amplification towards third parties. At most
  ``_MAX_DIALBACK_ADDRS`` addresses per request, ``_DIALBACK_CONCURRENCY`` requests
  served at once (others are refused), each dial bounded by ``dial_timeout``.
- A fresh dial-back never reaches the swarm: no connection is registered, so no
  notifee (pubsub, DHT) sees it; the socket is closed after the handshake.
- The client asks only over direct connections (servers refuse relayed ones),
  keeps the latest verdict per server (at most ``_MAX_VERDICTS``); OK counts for
  public, a failed dial for private, a refusal or an error counts for nothing.
- Every query, and every request served, has a timeout; failures are counted
  (``autonat.*``), never raised.
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import random
import time
import weakref
from typing import Any

import multiaddr
import trio
from libp2p.host.autonat.autonat import AUTONAT_PROTOCOL_ID, AutoNATService
from libp2p.host.autonat.pb.autonat_pb2 import Message
from libp2p.peer.id import ID
from libp2p.security.pnet.protector import new_protected_conn
from libp2p.utils.varint import encode_varint_prefixed, read_varint_prefixed_bytes_limited

from swarmnode.share.inbox import Counters

log = logging.getLogger("swarmnode.p2p")

_MAX_DIALBACK_ADDRS = 4
_MAX_REQUEST = 64 * 1024  # an AutoNAT request is a peer id and a few addresses
_DIALBACK_CONCURRENCY = 4
_MAX_VERDICTS = 16
_SERVERS_PER_CHECK = 3
_UNKNOWN_RETRY_S = 20.0  # while nothing is known, ask again this often
_NO_SERVER_POLL_S = 2.0


class _DialBackNoise(logging.Filter):
    """Drops py-libp2p's "fail to upgrade mux" error: an AutoNAT dial-back (ours, and
    the spec's) closes the connection right after the security handshake, and the
    swarm being dialled back logs that end as an error every time. Any other peer
    that authenticates and then hangs up costs us nothing either."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("fail to upgrade mux")


logging.getLogger("libp2p.network.swarm").addFilter(_DialBackNoise())

PUBLIC, PRIVATE, UNKNOWN = "public", "private", "unknown"


_RELAYED: weakref.WeakKeyDictionary[Any, bool] = weakref.WeakKeyDictionary()


def is_relayed(conn: Any) -> bool:
    """True if a swarm connection runs through a circuit relay (False if unknown).

    Once py-libp2p has set a connection's transport information (its addresses and
    type, set together), the answer never changes, so it is kept for the
    connection's life: the NAT snapshot asks for every connection twice a second,
    and the fallback formats every address."""
    try:
        return _RELAYED[conn]
    except (KeyError, TypeError):  # not seen yet, or not weak-referenceable
        pass
    relayed = _relayed(conn)
    if getattr(conn, "_actual_transport_addresses", None) is not None:
        with contextlib.suppress(TypeError):  # an object without weak references
            _RELAYED[conn] = relayed
    return relayed


def _relayed(conn: Any) -> bool:
    try:
        if conn.get_connection_type().value == "relayed":
            return True
    # py-libp2p's PSK wrapper has no connection type: fall back to the addresses
    except Exception as err:
        log.debug("connection type unknown: %r", err)
    addrs = getattr(conn, "_actual_transport_addresses", None) or []
    return any("/p2p-circuit" in str(a) for a in addrs)


class _DialBackServer(AutoNATService):
    """py-libp2p's AutoNAT server with an honest dial-back (see the module docstring)."""

    def __init__(self, host: Any, psk: str | None, dial_timeout: float, counters: Counters):
        super().__init__(host, serve=True)
        self._psk = psk
        self._dial_timeout = dial_timeout
        self._counters = counters
        self._busy = trio.Semaphore(_DIALBACK_CONCURRENCY)

    async def handle_stream(self, stream: Any) -> None:
        """One request, read within ``dial_timeout``. Relayed requests are refused
        (the spec's rule), judged on the swarm connection: py-libp2p judges on the
        raw connection, which under a PSK has no addresses, so it refused them all."""
        try:
            with trio.fail_after(self._dial_timeout):
                raw = await read_varint_prefixed_bytes_limited(stream, _MAX_REQUEST)
            request = Message()
            request.ParseFromString(raw)
            relayed = is_relayed(getattr(stream, "swarm_conn", None))
            reply = await self._handle_request(request, self._observed_ip(stream), relayed)
            with trio.fail_after(self._dial_timeout):
                await stream.write(encode_varint_prefixed(reply.SerializeToString()))
        # a slow, truncated or malformed request costs its stream only
        except Exception as err:
            self._counters.add("autonat.served_bad_request")
            log.debug("AutoNAT request failed: %r", err)
        finally:
            with trio.move_on_after(1.0):
                try:
                    await stream.close()
                except Exception as err:  # already reset by the peer
                    log.debug("closing an AutoNAT stream: %r", err)

    async def _try_dial(self, peer_id: ID, addrs: list[bytes]) -> bytes | None:
        try:
            self._busy.acquire_nowait()
        except trio.WouldBlock:
            self._counters.add("autonat.served_busy")
            return None
        try:
            for raw in addrs[:_MAX_DIALBACK_ADDRS]:
                if await self._fresh_dial(peer_id, multiaddr.Multiaddr(raw)):
                    self._counters.add("autonat.served_ok")
                    return bytes(raw)
            self._counters.add("autonat.served_unreachable")
            return None
        finally:
            self._busy.release()

    async def _fresh_dial(self, peer_id: ID, addr: multiaddr.Multiaddr) -> bool:
        """A new TCP connection to ``addr`` completing Noise as ``peer_id``."""
        network: Any = self.host.get_network()  # the Swarm: transports and upgrader
        transport = network.transport_manager.transport_for_dialing(addr)
        if transport is None or "/p2p-circuit" in str(addr):
            return False
        conn = None
        with trio.move_on_after(self._dial_timeout):
            try:
                conn = await transport.dial(addr)
                if self._psk is not None:
                    conn = new_protected_conn(conn, self._psk)
                conn = await network.upgrader.upgrade_security(conn, True, peer_id)
                return True
            # refused, unreachable, wrong key, handshake cut: all mean "not reachable"
            except Exception as err:
                log.debug("AutoNAT dial-back to %s at %s failed: %r", peer_id, addr, err)
                return False
            finally:
                if conn is not None:
                    with trio.CancelScope(shield=True), trio.move_on_after(1.0):
                        try:
                            await conn.close()
                        except Exception as err:  # already torn down by the peer
                            log.debug("closing a dial-back: %r", err)
        return False


class Reachability:
    """The AutoNAT client and server of one host; ``run`` is its trio task."""

    def __init__(
        self,
        host: Any,
        counters: Counters,
        interval_s: float,
        dial_timeout_s: float,
        psk: str | None = None,
    ) -> None:
        self.host = host
        self.counters = counters
        self.interval_s = interval_s
        self.dial_timeout_s = dial_timeout_s
        self.server = _DialBackServer(host, psk, dial_timeout_s, counters)
        self.status = UNKNOWN
        self.changed_at = time.time()
        self._verdicts: dict[ID, tuple[bool, float]] = {}  # server -> (reachable, when)
        self._changed = trio.Event()

    def snapshot(self) -> dict[str, Any]:
        oks = sum(1 for ok, _ in self._verdicts.values() if ok)
        return {
            "status": self.status,
            "since": self.changed_at,
            "servers_ok": oks,
            "servers_failed": len(self._verdicts) - oks,
        }

    async def wait_changed(self) -> None:
        await self._changed.wait()

    async def run(self) -> None:
        while True:
            servers = self._servers()
            if not servers:  # nobody to ask yet (start-up, or every peer relayed)
                await trio.sleep(_NO_SERVER_POLL_S)
                continue
            await trio.sleep(1.0)  # let identify tell us our observed address first
            await self.check(servers[:_SERVERS_PER_CHECK])
            pause = self.interval_s if self.status != UNKNOWN else _UNKNOWN_RETRY_S
            await trio.sleep(min(pause, self.interval_s) * random.uniform(0.9, 1.1))

    def _servers(self) -> list[ID]:
        """Directly connected peers that speak AutoNAT, in random order."""
        network = self.host.get_network()
        store = self.host.get_peerstore()
        out = []
        for peer, conns in list(network.connections.items()):
            conns = conns if isinstance(conns, list) else [conns]
            if not any(not is_relayed(c) for c in conns):
                continue
            try:
                if AUTONAT_PROTOCOL_ID in store.get_protocols(peer):
                    out.append(peer)
            except Exception:  # no protocol record yet: identify has not finished
                continue
        random.shuffle(out)
        return out

    async def check(self, servers: list[ID]) -> str:
        addrs = [a.to_bytes() for a in self.dialback_addrs()]
        for server in servers:
            try:
                status, _ = await self.server.query_server(
                    server, addrs, timeout=2 * self.dial_timeout_s + 5
                )
            except Exception as err:  # stream refused, timeout, malformed reply
                self.counters.add("autonat.query_failed")
                log.debug("AutoNAT query to %s failed: %r", server, err)
                continue
            if status == Message.OK:
                self._verdicts[server] = (True, time.time())
            elif status == Message.E_DIAL_ERROR:
                self._verdicts[server] = (False, time.time())
            else:  # refused (no address on the IP it sees) or its own error
                self.counters.add("autonat.refused")
        self._update()
        return self.status

    def _update(self) -> None:
        while len(self._verdicts) > _MAX_VERDICTS:
            oldest = min(self._verdicts, key=lambda p: self._verdicts[p][1])
            del self._verdicts[oldest]
        oks = sum(1 for ok, _ in self._verdicts.values() if ok)
        fails = len(self._verdicts) - oks
        status = PUBLIC if oks > fails else PRIVATE if fails > oks else UNKNOWN
        if status != self.status:
            log.info("reachability: %s (AutoNAT: %d dialled back, %d not)", status, oks, fails)
            self.status, self.changed_at = status, time.time()
            self._changed.set()
            self._changed = trio.Event()

    def dialback_addrs(self) -> list[multiaddr.Multiaddr]:
        """Where a server should try us: our TCP listen addresses, and each observed
        external IP (what peers see us from) with our listen ports, since a NAT that
        forwards a port keeps it. The server dials only those on the IP it sees."""
        listen = []
        for a in self.host.get_transport_addrs():
            if "/p2p-circuit" in str(a):
                continue
            try:
                listen.append((a.value_for_protocol("ip4"), a.value_for_protocol("tcp")))
            except Exception:  # ip6, dns, non-TCP: not asked about
                continue
        out = [f"/ip4/{ip}/tcp/{port}" for ip, port in listen if ip != "0.0.0.0"]
        for ip in self._observed_ips():
            out += [f"/ip4/{ip}/tcp/{port}" for _, port in listen]
        return [multiaddr.Multiaddr(a) for a in dict.fromkeys(out)]

    def _observed_ips(self) -> list[str]:
        """External IPv4s that peers reported seeing us from (identify), one observer
        suffices: a lone bootstrap is the usual case."""
        manager = getattr(self.host, "_observed_addr_manager", None)
        if manager is None:
            return []
        out = []
        try:
            for a in manager.addrs(min_observers=1):
                ip = a.value_for_protocol("ip4")
                if ip and not ipaddress.ip_address(ip).is_loopback:
                    out.append(ip)
        except Exception as err:  # a private py-libp2p API: degrade to listen addresses
            log.debug("observed addresses unavailable: %r", err)
        return out

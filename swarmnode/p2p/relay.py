"""The relay service: py-libp2p's circuit relay v2 (HOP/STOP) with its own byte pump
and slots shared out by source address and subnet.

Role: ``CircuitV2Protocol`` answers RESERVE and CONNECT on the standard
``/libp2p/circuit/relay/0.2.0/hop`` id and accepts circuits on ``/stop``; the
class here replaces the part that copies a circuit's bytes and puts its own checks
in front of RESERVE.

Slots: py-libp2p bounds reservations in all (``relay.max_reservations``) but not by
where they come from, keeps a slot for its whole TTL (an hour) after its holder
disconnects, and books a RESERVE under any peer id the message names. So one host
could take every slot with throwaway identities, each reserving and leaving. Here a
RESERVE is always for the peer on the connection (the spec's RESERVE names no
peer), slots whose holder is gone are freed before a new one is granted (the spec:
a reservation lives only as long as its connection), and one source address (an
IPv4 address, an IPv6 /64) holds at most ``relay.max_reservations_per_ip`` live
slots and one subnet (an IPv4 /24, an IPv6 /48: one site, one holder of addresses)
at most ``relay.max_reservations_per_subnet``; past either the RESERVE is answered
RESOURCE_LIMIT_EXCEEDED and counted (``relay.serve_refused_ip`` /
``relay.serve_refused_subnet``).

Members before strangers: a botnet spread over many subnets passes both caps and can
still take every slot. So when every slot is taken, a RESERVE from a swarm member
(``is_member``, the host's: a peer that authored a batch this node accepted) frees
the newest slot a stranger holds, counted ``relay.serve_evicted``; the stranger's
circuits already up are left alone, and its next refresh is refused while the slots
are full. A stranger never evicts, nor does a member evict a member: among members,
first come first served.

Why: py-libp2p registers circuits by peer id, so a second circuit with the same
peer (two peers reaching one NATed peer, or two peers dialling each other at once)
overwrites the first one's entry, and when either circuit ends, its cleanup closes
the streams registered under that peer id: the *other* circuit. In the NAT test the
two trainers' first circuits died ten seconds after they came up.

Invariants:
- A circuit is two pumps (one per direction) over the same two streams; when
  either ends, it closes those two streams and forgets only the registry entries
  that point at them.
- A circuit ends at its deadline (``relay.max_circuit_s``) even when idle, and when
  its byte budget (``relay.max_circuit_mib``, shared by both directions) is spent;
  a write the receiving peer does not take within ``WRITE_TIMEOUT_S`` ends it too.
- Live slots per source address <= ``max_per_ip``, per subnet <= ``max_per_subnet``;
  a refresh of a slot its peer already holds is never refused. ``_source_of`` holds
  only peers with a slot in py-libp2p's table (bounded by ``relay.max_reservations``).
- A member is refused a slot for want of room only when every slot is a member's.
"""

from __future__ import annotations

import ipaddress
import logging
import math
import time
from collections.abc import Callable
from typing import Any

import trio
from libp2p.peer.id import ID
from libp2p.relay.circuit_v2.pb.circuit_pb2 import HopMessage
from libp2p.relay.circuit_v2.protocol import CircuitV2Protocol
from libp2p.relay.circuit_v2.protocol_buffer import StatusCode, to_proto_status
from libp2p.relay.circuit_v2.utils import write_delimited_msg

from swarmnode.share.inbox import Counters

log = logging.getLogger("swarmnode.p2p")

WRITE_TIMEOUT_S = 60.0  # a receiver that reads nothing for this long is gone
REPLY_TIMEOUT_S = 5.0  # a refusal's STATUS the peer does not take in this long is dropped
MAX_PER_IP = 4  # live slots one source address may hold (relay.max_reservations_per_ip)
MAX_PER_SUBNET = 16  # ... one /24 or IPv6 /48 (relay.max_reservations_per_subnet)
_CHUNK = 65535


def source_of(stream: Any) -> str | None:
    """The address a stream's connection comes from, as slots are shared out: an
    IPv4 address, or an IPv6 address's /64; None where the connection shows none."""
    try:
        remote = stream.get_remote_address()
        ip = ipaddress.ip_address(remote[0]) if remote else None
    except (AttributeError, TypeError, ValueError):
        return None
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.IPv6Network((ip, 64), strict=False))
    return None if ip is None else str(ip)


def subnet_of(source: str) -> str:
    """The subnet a ``source_of`` address belongs to: an IPv4 /24, an IPv6 /48."""
    if "/" in source:  # an IPv6 /64
        return str(ipaddress.IPv6Network(source).supernet(new_prefix=48))
    return str(ipaddress.IPv4Network((source, 24), strict=False))


class RelayService(CircuitV2Protocol):
    """``CircuitV2Protocol`` whose circuits cannot close each other and whose slots no
    single source address can take (module docstring)."""

    def __init__(
        self,
        *args: Any,
        counters: Counters | None = None,
        max_per_ip: int = MAX_PER_IP,
        max_per_subnet: int = MAX_PER_SUBNET,
        is_member: Callable[[ID], bool] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.live_legs = 0  # two per circuit being relayed
        self.counters = counters if counters is not None else Counters()
        self.max_per_ip = max_per_ip
        self.max_per_subnet = max_per_subnet
        self._source_of: dict[ID, str] = {}  # slot holder -> its source address
        self.is_member = is_member  # None: every peer a stranger, nobody evicted

    def _free_departed(self) -> None:
        """Forget the slots whose holder is gone (expired or disconnected)."""
        rm = self.resource_manager
        for peer in list(rm._reservations):
            if rm.get_reservation(peer) is None:
                del rm._reservations[peer]
        for peer in [p for p in self._source_of if p not in rm._reservations]:
            del self._source_of[peer]

    def _make_room(self, peer: ID) -> None:
        """Every slot taken and ``peer`` a member without one: free the newest slot a
        stranger holds, if any (module docstring)."""
        rm, member = self.resource_manager, self.is_member
        if member is None or len(rm._reservations) < rm.limits.max_reservations:
            return
        if rm.get_reservation(peer) is not None or not member(peer):
            return
        strangers = [p for p in rm._reservations if not member(p)]
        if not strangers:
            return
        newest = max(strangers, key=lambda p: rm._reservations[p].created_at)
        del rm._reservations[newest]
        self._source_of.pop(newest, None)
        self.counters.add("relay.serve_evicted")
        log.debug("relay slot of stranger %s given to member %s", newest, peer)

    async def _handle_reserve(self, stream: Any, msg: HopMessage) -> None:
        """RESERVE for the peer on the connection, within its source's share."""
        peer = stream.muxed_conn.peer_id
        msg.ClearField("peer")  # py-libp2p would book the slot under the id named here
        self._free_departed()
        source = source_of(stream)
        if source is not None and self.resource_manager.get_reservation(peer) is None:
            others = [s for p, s in self._source_of.items() if p != peer]
            held = sum(1 for s in others if s == source)
            subnet = subnet_of(source)
            in_subnet = sum(1 for s in others if subnet_of(s) == subnet)
            why = None
            if held >= self.max_per_ip:
                why = "ip"
            elif in_subnet >= self.max_per_subnet:
                why = "subnet"
            if why is not None:
                self.counters.add(f"relay.serve_refused_{why}")
                log.debug(
                    "relay slot refused to %s: %s holds %d, %s %d", peer, source, held, subnet,
                    in_subnet,
                )  # fmt: skip
                refusal = HopMessage(
                    type=HopMessage.STATUS,
                    status=to_proto_status(StatusCode.RESOURCE_LIMIT_EXCEEDED),
                )
                try:
                    with trio.move_on_after(REPLY_TIMEOUT_S):
                        await write_delimited_msg(stream, refusal)
                except Exception as err:  # the peer's stream: reset, closed, broken
                    log.debug("relay refusal to %s not sent: %r", peer, err)
                return
        self._make_room(peer)
        if source is not None:
            # Booked before py-libp2p's first await (its reserve() runs before it), so
            # that a second RESERVE from the same address, read meanwhile, counts it.
            self._source_of[peer] = source
        await super()._handle_reserve(stream, msg)
        if self.resource_manager.get_reservation(peer) is None:
            self._source_of.pop(peer, None)  # refused (every slot taken) or gone already

    @property
    def circuits(self) -> int:
        return self.live_legs // 2

    async def _relay_data(
        self,
        src_stream: Any,
        dst_stream: Any,
        peer_id: Any,
        deadline: float | None = None,
        circuit_data_limit: list[int] | None = None,
    ) -> None:
        """Copy ``src_stream`` to ``dst_stream`` until one ends or a limit is hit."""
        end = math.inf if deadline is None else deadline
        why = "closed"
        self.live_legs += 1
        try:
            while True:
                left = end - time.monotonic()
                if left <= 0:
                    why = "duration limit"
                    break
                with trio.move_on_after(left):
                    data = await src_stream.read(_CHUNK)
                if not data:
                    break
                if circuit_data_limit is not None:
                    if len(data) > circuit_data_limit[0]:
                        why = "data limit"
                        break
                    circuit_data_limit[0] -= len(data)
                with trio.fail_after(WRITE_TIMEOUT_S):
                    await dst_stream.write(data)
        except trio.TooSlowError:
            why = "receiver stalled"
        # a reset, closed or broken stream on either side ends the circuit
        except Exception as err:
            why = f"{err.__class__.__name__}"
        finally:
            self.live_legs -= 1
            log.debug("circuit leg for %s ended: %s", peer_id, why)
            with trio.CancelScope(shield=True), trio.move_on_after(2.0):
                for stream in (src_stream, dst_stream):
                    await self._close_stream(stream)
            mine = {id(src_stream), id(dst_stream)}
            for key, legs in list(self._active_relays.items()):
                if {id(s) for s in legs if s is not None} & mine:
                    self._active_relays.pop(key, None)

"""NAT traversal in one process on loopback: relay reservations and relayed gossip,
AutoNAT's honest dial-back, the config, the status views.

No real NAT here (tests/test_nat.py builds one with network namespaces): the two
nodes announce an unroutable address (TEST-NET-1), so the only way they reach each
other is the circuit address they advertise through the relay. Hole punching is
off: on loopback DCUtR could succeed and the test would not know which path ran.
Every wait polls with a deadline.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import multiaddr
import pytest
import trio
from libp2p.peer.id import ID

from swarmnode.config import ConfigError, parse_config
from swarmnode.ops.report import format_peers, format_status
from swarmnode.p2p import autonat
from swarmnode.p2p.identity import create_psk
from swarmnode.p2p.nat import split_circuit
from swarmnode.p2p.transport import GossipTransport
from tests.helpers import batch, swarm_cfg, wait_for

UNROUTABLE = "/ip4/192.0.2.1/tcp/9"  # TEST-NET-1: a dial there only times out


def in_trio(t: GossipTransport, fn: Any, *args: Any) -> Any:
    """Run ``await fn(*args)`` in the transport's trio thread (from a worker thread)."""
    return trio.from_thread.run(fn, *args, trio_token=t._token)


def bare(t: GossipTransport) -> multiaddr.Multiaddr:
    """The transport's first listen address without /p2p/<id>."""
    return multiaddr.Multiaddr(t.stats()["listen_addrs"][0].split("/p2p/")[0])


@pytest.mark.parametrize("private", [False, True], ids=["public", "psk"])
def test_nodes_that_cannot_dial_each_other_share_through_a_relay(
    tmp_path: Path, private: bool
) -> None:
    """Also inside a private swarm: the relayed connection is PSK-protected end to
    end, which needs the PSK wrapped on the dialling side too."""
    psk = None
    if private:
        psk = str(tmp_path / "swarm.key")
        create_psk(Path(psk))

    async def main() -> None:
        # The relay belongs to another swarm: it carries no rollouts of ours itself.
        relay = GossipTransport(
            swarm_cfg(name="relays", relay={"serve": True}, psk_file=psk), tmp_path / "r"
        )
        await relay.start()
        addr = relay.info.listen_addrs[0]  # type: ignore[union-attr]
        kw: dict[str, Any] = dict(
            psk_file=psk,
            bootstrap=[addr],
            announce=[UNROUTABLE],
            dial_timeout_s=2.0,
            relay={"use": True, "hole_punch": False},
        )
        a = GossipTransport(swarm_cfg(**kw), tmp_path / "a")
        b = GossipTransport(swarm_cfg(**kw), tmp_path / "b")
        try:
            await a.start()
            await b.start()
            await wait_for(lambda: b.peer_id in a.stats()["connected_peers"], "A-B connection")
            sa = a.stats()
            assert sa["nat"]["connections"][b.peer_id] == "relayed"
            assert [r["relay"] for r in sa["nat"]["relay_reservations"]] == [relay.peer_id]
            circuit = f"/p2p/{relay.peer_id}/p2p-circuit/p2p/{a.peer_id}"
            assert any(x.endswith(circuit) for x in sa["listen_addrs"]), sa["listen_addrs"]

            got: dict[str, int] = {"a": 0, "b": 0}

            async def both_heard() -> bool:
                await a.publish(batch(len(got) + got["a"]))
                await b.publish(batch(len(got) + got["b"]))
                got["a"] += sum(r.peer_id == b.peer_id for r in a.inbox.drain())
                got["b"] += sum(r.peer_id == a.peer_id for r in b.inbox.drain())
                return got["a"] > 0 and got["b"] > 0

            for _ in range(120):
                if await both_heard():
                    break
                await asyncio.sleep(0.25)
            assert got["a"] > 0 and got["b"] > 0, got
            for t in (a, b):
                assert t.stats()["counters"].get("msgs_in_via_relay", 0) > 0
            rs = relay.stats()
            assert rs["msgs_in"] == 0 and rs["nat"]["relay_reservations_served"] == 2
            # Reachability on loopback: every node is dialled back, so all read public.
            await wait_for(
                lambda: all(t.stats()["nat"]["reachability"] == "public" for t in (a, b, relay)),
                "AutoNAT verdicts",
            )
            text = format_peers({"swarm": a.stats()})
            assert f"{b.peer_id}  relayed" in text and "reachability: public" in text
            assert "relay slots: " in format_status({"swarm": a.stats()})
            assert "relaying for others: 2 slots" in format_peers({"swarm": relay.stats()})
        finally:
            for t in (a, b, relay):
                await t.stop()

    asyncio.run(main())


def test_autonat_dial_back_is_a_fresh_connection_with_the_right_key(tmp_path: Path) -> None:
    """py-libp2p's server answered OK for any connected peer (host.connect returns the
    existing connection); ours dials anew and needs the asking peer's Noise key."""

    async def main() -> None:
        server = GossipTransport(swarm_cfg(), tmp_path / "s")
        a = GossipTransport(swarm_cfg(), tmp_path / "a")
        other = GossipTransport(swarm_cfg(), tmp_path / "o")
        for t in (server, a, other):
            await t.start()
        try:
            reach = server._host.nat.reach  # type: ignore[union-attr]
            assert reach is not None
            a_addr, o_addr = (bare(t) for t in (a, other))
            closed = multiaddr.Multiaddr("/ip4/127.0.0.1/tcp/9")
            a_id = ID.from_base58(a.peer_id)

            def dial(addrs: list[multiaddr.Multiaddr]) -> Any:
                raw = [x.to_bytes() for x in addrs]
                return in_trio(server, reach.server._try_dial, a_id, raw)

            assert await asyncio.to_thread(dial, [a_addr]) == a_addr.to_bytes()
            assert await asyncio.to_thread(dial, [o_addr]) is None  # another key answers
            assert await asyncio.to_thread(dial, [closed]) is None
            counters = server.stats()["counters"]
            assert counters["autonat.served_ok"] == 1
            assert counters["autonat.served_unreachable"] == 2
            assert server.stats()["connected_peers"] == []  # dial-backs never join the swarm
        finally:
            for t in (server, a, other):
                await t.stop()

    asyncio.run(main())


def test_split_circuit_refuses_what_is_not_a_circuit_address() -> None:
    relay = "12D3KooWPjceQrSwdWXPyLLeABRXmuqt69Rg3sBYbU1Nft9HyQ6X"
    parts = split_circuit(multiaddr.Multiaddr(f"/ip4/1.2.3.4/tcp/1/p2p/{relay}/p2p-circuit"))
    assert parts is not None and str(parts[0]) == "/ip4/1.2.3.4/tcp/1" and parts[2] is None
    assert split_circuit(multiaddr.Multiaddr("/ip4/1.2.3.4/tcp/1/p2p-circuit")) is None


def test_relay_config() -> None:
    base = {"swarm": {"enabled": True}}
    assert parse_config(base).swarm.relay.use == "auto"
    assert parse_config(base).swarm.relay.serve is False  # opt-in
    for value in (True, False, "auto"):
        cfg = parse_config({"swarm": {"enabled": True, "relay": {"use": value}}})
        assert cfg.swarm.relay.use == value
    with pytest.raises(ConfigError, match=r"swarm\.relay\.use"):
        parse_config({"swarm": {"relay": {"use": "sometimes"}}})
    with pytest.raises(ConfigError, match=r"swarm\.relay\.max_circuit_s"):
        parse_config({"swarm": {"relay": {"max_circuit_s": 1}}})
    assert parse_config(base).swarm.relay.max_reservations_per_ip == 4
    assert parse_config(base).swarm.relay.max_reservations_per_subnet == 16
    with pytest.raises(ConfigError, match=r"swarm\.relay\.max_reservations_per_ip"):
        parse_config({"swarm": {"relay": {"max_reservations_per_ip": 0}}})


class FakeStream:
    """A stream that yields ``chunks`` then EOF; records writes and closes."""

    def __init__(self, chunks: list[bytes] | None = None) -> None:
        self.chunks = list(chunks or [])
        self.written: list[bytes] = []
        self.closed = False

    async def read(self, n: int = -1) -> bytes:
        if self.closed:
            raise ConnectionError("closed")
        return self.chunks.pop(0) if self.chunks else b""

    async def write(self, data: bytes) -> None:
        self.written.append(data)

    async def close(self) -> None:
        self.closed = True

    async def reset(self) -> None:
        self.closed = True


class _StubHost:
    def get_peerstore(self) -> None:
        return None


def test_a_circuit_ending_leaves_the_other_circuits_of_its_peer_alone() -> None:
    """py-libp2p's pump closed the streams registered under the peer id on exit:
    those of the *latest* circuit with that peer, not its own."""
    from swarmnode.p2p.relay import RelayService

    relay = RelayService(_StubHost(), allow_hop=True)  # type: ignore[arg-type]
    b = ID.from_base58("12D3KooWPjceQrSwdWXPyLLeABRXmuqt69Rg3sBYbU1Nft9HyQ6X")
    src1, dst1 = FakeStream([b"hello", b"world"]), FakeStream()
    src2, dst2 = FakeStream(), FakeStream()  # circuit 2, busy elsewhere
    relay._active_relays[b] = (src2, dst2)  # circuit 2 registered last under B
    budget = [8]  # bytes both directions may still carry

    async def main() -> None:
        await relay._relay_data(src1, dst1, b, None, budget)

    trio.run(main)
    assert dst1.written == [b"hello"]  # "world" would exceed the byte budget
    assert src1.closed and dst1.closed
    assert not src2.closed and not dst2.closed  # the other circuit lives
    assert relay._active_relays[b] == (src2, dst2) and relay.circuits == 0


def test_is_relayed_is_kept_once_the_transport_info_is_set() -> None:
    class Kind:
        def __init__(self, value: str) -> None:
            self.value = value

    class Conn:
        def __init__(self, addrs: list[str] | None, kind: str) -> None:
            self._actual_transport_addresses, self.kind, self.asked = addrs, kind, 0

        def get_connection_type(self) -> Kind:
            self.asked += 1
            return Kind(self.kind)

    early = Conn(None, "direct")  # transport info not set yet: asked again
    assert not autonat.is_relayed(early) and not autonat.is_relayed(early)
    assert early.asked == 2
    early._actual_transport_addresses, early.kind = ["/p2p-circuit"], "relayed"
    assert autonat.is_relayed(early)  # what it became once set
    conn = Conn(["/ip4/1.2.3.4/tcp/1"], "relayed")
    assert autonat.is_relayed(conn) and autonat.is_relayed(conn) and conn.asked == 1
    assert not autonat.is_relayed(None)


def _dial_from(host: Any, ip: str) -> None:
    """Make a plain py-libp2p host's TCP dials leave from ``ip`` (a loopback address
    other than 127.0.0.1), as py-libp2p's hole punch binds its source."""
    for transport in host.get_network().transport_manager.get_transports():
        with_source = getattr(transport, "dial_with_source", None)
        if with_source is not None:
            transport.dial = lambda maddr, dial=with_source: dial(maddr, (ip, 0))


async def _reserve(host: Any, relay: ID, statuses: list[int], named: ID | None = None) -> None:
    """One RESERVE from a plain py-libp2p ``host`` to ``relay`` (naming ``named`` in
    it, if given); the STATUS of the answer is appended to ``statuses``."""
    from libp2p.relay.circuit_v2.pb.circuit_pb2 import HopMessage, PeerId
    from libp2p.relay.circuit_v2.protocol import PROTOCOL_ID
    from libp2p.relay.circuit_v2.utils import read_delimited_msg, write_delimited_msg

    with trio.fail_after(20):
        stream = await host.new_stream(relay, [PROTOCOL_ID])
        msg = HopMessage(type=HopMessage.RESERVE)
        if named is not None:
            msg.peer.CopyFrom(PeerId(id=named.to_bytes()))
        await write_delimited_msg(stream, msg)
        statuses.append(int((await read_delimited_msg(stream, HopMessage)).status))
        await stream.close()


def _reserve_as_strangers(
    relay_addr: str, named: ID | None, sources: list[str] | None = None
) -> list[int]:
    """Four plain py-libp2p hosts (no swarmnode) on loopback RESERVE a slot on the relay
    in turn, the first naming ``named`` in its RESERVE instead of itself; then the
    first leaves and the last asks again. The STATUS each answer carried, in order.
    With ``sources``, host i dials from ``sources[i]``."""
    import contextlib

    from libp2p import new_host
    from libp2p.peer.peerinfo import info_from_p2p_addr

    info = info_from_p2p_addr(multiaddr.Multiaddr(relay_addr))
    loopback = multiaddr.Multiaddr("/ip4/127.0.0.1/tcp/0")
    statuses: list[int] = []

    async def reserve(host: Any, named: ID | None = None) -> None:
        await _reserve(host, info.peer_id, statuses, named)

    async def main() -> None:
        hosts = [new_host(listen_addrs=[loopback]) for _ in range(4)]
        for h, ip in zip(hosts, sources or [], strict=False):
            _dial_from(h, ip)
        async with contextlib.AsyncExitStack() as stack:
            for h in hosts:
                await stack.enter_async_context(h.run(listen_addrs=[loopback]))
                with trio.fail_after(20):
                    await h.connect(info)
            await reserve(hosts[0], named)
            for h in hosts[1:]:
                await reserve(h)
            await hosts[0].disconnect(info.peer_id)
            await reserve(hosts[3])

    trio.run(main)
    return statuses


def test_one_address_cannot_take_every_relay_slot(tmp_path: Path) -> None:
    """Strangers from one address get at most ``max_reservations_per_ip`` live slots;
    a RESERVE naming another peer books the sender, and a slot whose holder left is
    free again (py-libp2p kept it for an hour)."""
    from libp2p.relay.circuit_v2.protocol_buffer import StatusCode

    other = ID.from_base58("12D3KooWPjceQrSwdWXPyLLeABRXmuqt69Rg3sBYbU1Nft9HyQ6X")

    async def main() -> None:
        relay = GossipTransport(
            swarm_cfg(name="relays", relay={"serve": True, "max_reservations_per_ip": 2}),
            tmp_path / "r",
        )
        await relay.start()
        try:
            addr = relay.info.listen_addrs[0]  # type: ignore[union-attr]
            statuses = await asyncio.to_thread(_reserve_as_strangers, addr, other)
            ok, full = int(StatusCode.OK), int(StatusCode.RESOURCE_LIMIT_EXCEEDED)
            assert statuses == [ok, ok, full, full, ok], statuses  # two a source address
            assert relay.stats()["counters"].get("relay.serve_refused_ip") == 2
            booked = relay._host.nat.protocol.resource_manager._reservations  # type: ignore[union-attr]
            assert other not in booked  # booked under the sender, not the id it named
            await wait_for(
                lambda: relay.stats()["nat"]["relay_reservations_served"] == 0, "strangers gone"
            )
        finally:
            await relay.stop()

    asyncio.run(main())


def test_one_subnet_cannot_take_every_relay_slot(tmp_path: Path) -> None:
    """Strangers from four addresses of one /24 (127.0.0.2-5, each under the per-address
    cap) get at most ``max_reservations_per_subnet`` live slots between them; the
    relay sees each one's own address (checked), so the per-address cap is not what
    refuses them."""
    from libp2p.relay.circuit_v2.protocol_buffer import StatusCode

    sources = ["127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5"]

    async def main() -> None:
        relay = GossipTransport(
            swarm_cfg(
                name="relays",
                relay={
                    "serve": True,
                    "max_reservations_per_ip": 2,
                    "max_reservations_per_subnet": 2,
                },
            ),
            tmp_path / "r",
        )
        await relay.start()
        try:
            addr = relay.info.listen_addrs[0]  # type: ignore[union-attr]
            statuses = await asyncio.to_thread(_reserve_as_strangers, addr, None, sources)
            ok, full = int(StatusCode.OK), int(StatusCode.RESOURCE_LIMIT_EXCEEDED)
            assert statuses == [ok, ok, full, full, ok], statuses  # two a /24
            counters = relay.stats()["counters"]
            assert counters.get("relay.serve_refused_subnet") == 2, counters
            assert counters.get("relay.serve_refused_ip", 0) == 0, counters
        finally:
            await relay.stop()

    asyncio.run(main())


def _strangers_then_a_member(relay_addr: str, accepted: Any) -> tuple[list[int], list[ID]]:
    """Plain py-libp2p hosts (no swarmnode) from 127.0.0.2-5: three strangers RESERVE
    in turn; then a fourth host RESERVEs, publishes one valid batch on the swarm topic,
    waits until ``accepted()`` (the relay took it), and RESERVEs again; then the third
    stranger asks again. The STATUS of each answer, in order, and the hosts' ids."""
    import contextlib

    from libp2p import new_host
    from libp2p.peer.peerinfo import info_from_p2p_addr
    from libp2p.pubsub.gossipsub import GossipSub
    from libp2p.pubsub.pubsub import Pubsub
    from libp2p.tools.anyio_service import background_trio_service

    from swarmnode.p2p.gossip import GOSSIP_PROTOCOLS, topic_for

    info = info_from_p2p_addr(multiaddr.Multiaddr(relay_addr))
    loopback = multiaddr.Multiaddr("/ip4/127.0.0.1/tcp/0")
    topic = topic_for("default")
    statuses: list[int] = []

    async def reserve(host: Any) -> None:
        await _reserve(host, info.peer_id, statuses)

    hosts = [new_host(listen_addrs=[loopback]) for _ in range(4)]
    for h, ip in zip(hosts, ["127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5"], strict=True):
        _dial_from(h, ip)
    member = hosts[3]
    gossipsub = GossipSub(list(GOSSIP_PROTOCOLS), 6, 4, 12, heartbeat_interval=1)
    pubsub = Pubsub(member, gossipsub, strict_signing=True)

    async def main() -> None:
        async with contextlib.AsyncExitStack() as stack:
            for h in hosts:
                await stack.enter_async_context(h.run(listen_addrs=[loopback]))
            await stack.enter_async_context(background_trio_service(pubsub))
            await stack.enter_async_context(background_trio_service(gossipsub))
            await pubsub.wait_until_ready()
            await pubsub.subscribe(topic)
            for h in hosts:
                with trio.fail_after(20):
                    await h.connect(info)
            for h in hosts:  # three strangers, then the member before it has spoken
                await reserve(h)
            with trio.fail_after(20):
                while info.peer_id not in gossipsub.mesh.get(topic, set()):
                    await trio.sleep(0.05)
                await pubsub.publish(topic, batch(1))
                while not accepted():
                    await trio.sleep(0.05)
            await reserve(member)
            await reserve(hosts[2])

    trio.run(main)
    return statuses, [h.get_id() for h in hosts]


def test_a_members_reserve_takes_the_newest_strangers_slot(tmp_path: Path) -> None:
    """Strangers spread over addresses pass the per-address and per-subnet caps and
    fill every slot (two here). A peer whose batch the relay accepted is a member: its
    RESERVE frees the newest stranger's slot; before its batch it was refused like a
    stranger, and a stranger never evicts. The code before refused the member."""
    from libp2p.relay.circuit_v2.protocol_buffer import StatusCode

    async def main() -> None:
        relay = GossipTransport(
            swarm_cfg(relay={"serve": True, "max_reservations": 2}), tmp_path / "r"
        )
        await relay.start()
        try:
            addr = relay.info.listen_addrs[0]  # type: ignore[union-attr]

            def accepted() -> bool:
                return relay.stats()["counters"].get("msgs_in", 0) >= 1

            statuses, ids = await asyncio.to_thread(_strangers_then_a_member, addr, accepted)
            ok, full = int(StatusCode.OK), int(StatusCode.RESOURCE_LIMIT_EXCEEDED)
            # strangers 1, 2, 3; the member before its batch; after it; stranger 3 again
            assert statuses == [ok, ok, full, full, ok, full], statuses
            counters = relay.stats()["counters"]
            assert counters.get("relay.serve_evicted") == 1, counters
            booked = relay._host.nat.protocol.resource_manager._reservations  # type: ignore[union-attr]
            assert set(booked) == {ids[0], ids[3]}  # the newest stranger's slot went
        finally:
            await relay.stop()

    asyncio.run(main())

"""Liveness (swarmnode/p2p/liveness.py) against a fake host: who is pinged, who is cut.

The real thing, a path cut between network namespaces: tests/test_partition.py (slow).
"""

from __future__ import annotations

from typing import Any

import pytest
import trio
from libp2p.host.exceptions import StreamFailure
from libp2p.peer.id import ID
from libp2p.protocol_muxer.exceptions import MultiselectClientError
from libp2p.stream_muxer.yamux.yamux import Yamux

from swarmnode.config import ConfigError, parse_config
from swarmnode.p2p import liveness
from swarmnode.p2p.liveness import Liveness
from swarmnode.share.inbox import Counters

ALIVE, DEAD, MUTE, STUCK = ID(b"alive"), ID(b"dead"), ID(b"mute"), ID(b"stuck")


class EchoStream:
    """A ping stream whose far end answers: what is written is read back."""

    def __init__(self) -> None:
        self.buffer = b""

    async def write(self, data: bytes) -> None:
        self.buffer += data

    async def read(self, n: int) -> bytes:
        out, self.buffer = self.buffer[:n], self.buffer[n:]
        return out

    async def reset(self) -> None:
        return None


class SilentStream(EchoStream):
    """Opens, then never answers (the path died after the connection was made)."""

    async def read(self, n: int) -> bytes:
        await trio.sleep_forever()
        raise AssertionError("unreachable")


class Conn:
    """A connection whose socket can be closed (``secured_conn.close``)."""

    def __init__(self, closed: trio.Event) -> None:
        self.muxed_conn = self
        self.secured_conn = self
        self.closed = closed

    async def close(self) -> None:
        self.closed.set()


class FakeHost:
    """Peers in ``answering`` answer. Else DEAD never opens a stream, MUTE opens one
    and never answers, and STUCK's stream cleanup hangs, shielded from cancellation,
    until its socket is closed (py-libp2p behind a full send buffer)."""

    def __init__(self) -> None:
        self.connected = {ALIVE, DEAD, MUTE, STUCK}
        self.answering = {ALIVE}
        self.socket_closed = {p: trio.Event() for p in self.connected}
        self.disconnected: list[ID] = []

    def get_connected_peers(self) -> list[ID]:
        return sorted(self.connected, key=str)

    def get_network(self) -> FakeHost:
        return self

    def get_connections(self, peer: ID) -> list[Conn]:
        return [Conn(self.socket_closed[peer])] if peer in self.connected else []

    async def new_stream(self, peer: ID, protocols: list[Any]) -> EchoStream:
        if peer in self.answering:
            return EchoStream()
        if peer == DEAD:
            await trio.sleep_forever()
        if peer == STUCK:
            with trio.CancelScope(shield=True):
                await self.socket_closed[peer].wait()
            raise ConnectionError("socket closed")
        return SilentStream()

    async def disconnect(self, peer: ID) -> None:
        self.disconnected.append(peer)
        self.connected.discard(peer)


def test_peers_are_cut_after_missing_pings_in_a_row_and_a_live_one_never() -> None:
    async def main() -> None:
        host, counters = FakeHost(), Counters()
        live = Liveness(host, counters, timeout_s=0.2, interval_s=0.0, misses=2)
        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                assert await live.check(nursery) == []  # one miss each: not yet
                assert live.missed == {DEAD: 1, MUTE: 1, STUCK: 1}
                assert STUCK in live.pending  # its ping task hangs; the round did not wait
                await trio.sleep(0.1)  # run() waits interval_s: the timed-out pings end
                assert set(await live.check(nursery)) == {DEAD, MUTE, STUCK}
                assert host.connected == {ALIVE} and live.missed == {}
                assert all(host.socket_closed[p].is_set() for p in (DEAD, MUTE, STUCK))
                for _ in range(3):  # the live peer is never cut
                    await trio.sleep(0.1)
                    assert await live.check(nursery) == []
                assert live.pending == set()  # the stuck task ended with its socket
        snap = counters.snapshot()
        assert snap["peers_unresponsive"] == 3 and snap["ping_missed"] == 6

    trio.run(main)


def test_an_answer_resets_the_count_and_gone_peers_are_forgotten() -> None:
    async def main() -> None:
        host = FakeHost()
        host.connected.discard(STUCK)
        live = Liveness(host, Counters(), timeout_s=0.2, interval_s=0.0, misses=2)
        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                await live.check(nursery)
                assert live.missed == {DEAD: 1, MUTE: 1}
                host.connected.discard(DEAD)  # went away by itself
                host.answering.add(MUTE)
                await trio.sleep(0.1)  # run() waits interval_s: the timed-out pings end
                assert await live.check(nursery) == []
                assert live.missed == {} and host.disconnected == []

    trio.run(main)


NO_PING, LISTS_NO_PING = ID(b"no-ping"), ID(b"lists-no-ping")


class Peerstore:
    """What identify told: LISTS_NO_PING serves identify and meshsub only."""

    def get_protocols(self, peer: ID) -> list[str]:
        if peer == LISTS_NO_PING:
            return ["/ipfs/id/1.0.0", "/meshsub/1.1.0"]
        raise KeyError(peer)  # py-libp2p raises PeerStoreError: not identified yet


class OptionalPingHost(FakeHost):
    """NO_PING answers the negotiation of /ipfs/ping/1.0.0 with "na" (as js-libp2p
    without a ping service); LISTS_NO_PING was never asked (identify said enough).
    Neither connection has a muxer that can be asked, so neither can be checked."""

    def __init__(self) -> None:
        super().__init__()
        self.connected = {ALIVE, NO_PING, LISTS_NO_PING, DEAD}
        self.socket_closed = {p: trio.Event() for p in self.connected}
        self.asked: list[ID] = []

    def get_peerstore(self) -> Peerstore:
        return Peerstore()

    async def new_stream(self, peer: ID, protocols: list[Any]) -> EchoStream:
        self.asked.append(peer)
        if peer == NO_PING:
            try:
                raise MultiselectClientError("protocols not supported: tried ['/ipfs/ping/1.0.0']")
            except MultiselectClientError as err:
                raise StreamFailure(f"failed to open a stream to peer {peer}") from err
        return await super().new_stream(peer, protocols)


def test_a_peer_without_ping_is_not_dead_and_no_reply_still_is() -> None:
    async def main() -> None:
        host, counters = OptionalPingHost(), Counters()
        live = Liveness(host, counters, timeout_s=0.2, interval_s=0.0, misses=2)
        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                for _ in range(4):
                    dropped = await live.check(nursery)
                    await trio.sleep(0.05)
                assert dropped == [] and host.disconnected == [DEAD]
                assert live.no_ping == {NO_PING, LISTS_NO_PING}
        assert NO_PING in host.asked and LISTS_NO_PING not in host.asked
        assert host.asked.count(NO_PING) == 1  # refused once: not asked again
        snap = counters.snapshot()
        assert snap["ping_unsupported"] == 2 and snap["peers_unresponsive"] == 1
        # neither connection could be asked (no yamux here): 3 and 4 rounds, no misses
        assert snap["ping_unverifiable"] == 7 and snap["ping_missed"] == 2

    trio.run(main)


class YamuxConn:
    """A connection multiplexed by yamux (no socket behind it)."""

    def __init__(self) -> None:
        self.muxed_conn = Yamux.__new__(Yamux)  # only its type and is_closed are read
        self.muxed_conn.event_shutting_down = trio.Event()
        self.muxed_conn.event_closed = trio.Event()


class YamuxHost(FakeHost):
    """ALIVE's connection is yamux and answers its pings; DEAD's is yamux and does
    not. Opening a stream fails the test: the muxer is asked, not /ipfs/ping."""

    def __init__(self) -> None:
        super().__init__()
        self.connected = {ALIVE, DEAD}
        self.socket_closed = {p: trio.Event() for p in self.connected}

    def get_connections(self, peer: ID) -> list[Any]:
        return [YamuxConn()] if peer in self.connected else []

    async def new_stream(self, peer: ID, protocols: list[Any]) -> EchoStream:
        raise AssertionError("a yamux connection is asked through its muxer")


def test_a_yamux_connection_is_asked_by_its_muxer_not_a_ping_stream(
    monkeypatch: Any,
) -> None:
    host, counters = YamuxHost(), Counters()
    asked: list[bool] = []

    async def yamux_ping(conn: Yamux) -> bool:
        asked.append(True)
        if conn is dead_conn[0]:
            await trio.sleep_forever()
        return True

    dead_conn: list[Any] = [None]
    get = host.get_connections

    def connections(peer: ID) -> list[Any]:
        conns = get(peer)
        if peer == DEAD and conns:
            dead_conn[0] = conns[0].muxed_conn
        return conns

    monkeypatch.setattr(host, "get_connections", connections)
    monkeypatch.setattr(liveness, "yamux_ping", yamux_ping)

    async def main() -> None:
        live = Liveness(host, counters, timeout_s=0.2, interval_s=0.0, misses=2)
        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                assert await live.check(nursery) == []
                await trio.sleep(0.05)
                assert await live.check(nursery) == [DEAD]

    trio.run(main)
    snap = counters.snapshot()
    assert snap["ping_via_muxer"] == 2 and snap["ping_missed"] == 2
    assert "ping_unsupported" not in snap and len(asked) == 4


def test_the_check_interval_and_misses_are_config_fields() -> None:
    swarm = parse_config({"swarm": {"enabled": True}}).swarm
    assert (swarm.ping_interval_s, swarm.ping_misses) == (liveness.INTERVAL_S, liveness.MISSES)
    swarm = parse_config({"swarm": {"ping_interval_s": 30, "ping_misses": 4}}).swarm
    assert (swarm.ping_interval_s, swarm.ping_misses) == (30.0, 4)
    for field, bad in (("ping_interval_s", 0), ("ping_misses", 0)):
        with pytest.raises(ConfigError, match=rf"swarm\.{field}"):
            parse_config({"swarm": {field: bad}})

"""A peer cannot make a py-libp2p task end the node (swarmnode/p2p/contain.py).

The race of issue 28: graylisting a peer (``Pubsub.add_to_blacklist`` spawns
``_teardown_if_connected``, which awaits a stream reset and then deletes the peer)
while the same peer is disconnected (``_handle_dead_peer`` deletes it first). Once,
that KeyError stopped the pubsub service and the node. Real hosts on loopback, in
one trio run; every wait has a deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import trio
import trio.testing
from libp2p.peer.id import ID
from libp2p.peer.peerinfo import PeerInfo
from libp2p.peer.peerstore import PeerStoreError
from libp2p.pubsub.pubsub import Pubsub

from swarmnode.p2p.contain import TaskGuard
from swarmnode.p2p.gossip import topic_for
from swarmnode.p2p.transport import GossipTransport, TransportError
from swarmnode.share.inbox import Counters
from swarmnode.share.wire import decode_batch
from tests.helpers import batch, hardened_and_stock, swarm_cfg, wait_for

TOPIC = topic_for("default")
CYCLES = 30
DEADLINE_S = 30.0


async def _registered(pubsub: Pubsub, peer: object, want: bool) -> None:
    with trio.fail_after(DEADLINE_S):
        while (peer in pubsub.peers) != want:
            await trio.sleep(0.01)


def _slow_reset(stream: Any) -> trio.Event:
    """The teardown's reset of our stream to the peer waits, as it does behind a full
    socket send buffer (a flooder that does not read): long enough for the disconnect
    to close the connection and end the peer meanwhile. Returns an event set once
    that reset has returned."""
    reset = stream.reset
    done = trio.Event()

    async def slow() -> None:
        if "_teardown_if_connected" not in trio.lowlevel.current_task().name:
            await reset()
            return
        try:
            await trio.sleep(0.3)
            await reset()
        finally:
            done.set()

    stream.reset = slow
    return done


def test_graylisting_and_disconnecting_the_same_peer_at_once_many_times() -> None:
    """What ``P2PHost._enforce_loop`` does to a graylisted peer (blacklist, then
    disconnect in the same tick), to one peer that keeps coming back. Every third
    cycle the teardown's reset is quick; in the others it outlasts the disconnect,
    and the peer comes back either after the teardown ended (py-libp2p's ``del``
    then raised KeyError and stopped the pubsub service) or before it (the stale
    teardown then deleted the peer's new stream: the peer was silently forgotten)."""
    counters = Counters()

    async def main() -> None:
        async with hardened_and_stock(counters) as (node_host, node, peer_host, _peer):
            node_gs = node.router
            target = PeerInfo(node_host.get_id(), node_host.get_addrs())
            pid = peer_host.get_id()
            stale: trio.Event | None = None  # a slow teardown still running
            for cycle in range(CYCLES):
                with trio.fail_after(DEADLINE_S):
                    await peer_host.connect(target)
                await _registered(node, pid, True)
                if stale is not None:  # the last teardown ends while the peer is back
                    with trio.fail_after(DEADLINE_S):
                        await stale.wait()
                    await trio.sleep(0)
                    assert pid in node.peers, f"the stale teardown forgot the peer ({cycle})"
                    stale = None
                done = _slow_reset(node.peers[pid]) if cycle % 3 else None
                node.add_to_blacklist(pid)  # spawns _teardown_if_connected
                with trio.move_on_after(DEADLINE_S):
                    await node_host.disconnect(pid)
                await _registered(node, pid, False)
                with trio.fail_after(DEADLINE_S):
                    while pid in node_host.get_connected_peers():
                        await trio.sleep(0.01)
                if done is not None and cycle % 3 == 1:
                    with trio.fail_after(DEADLINE_S):
                        await done.wait()  # the teardown's del runs on a peer already gone
                    await trio.sleep(0)
                elif done is not None:
                    stale = done
                node.remove_from_blacklist(pid)
                assert node.manager.is_running, f"pubsub stopped in cycle {cycle}"
            # The teardowns left nothing behind: no send queue, no router state.
            with trio.fail_after(DEADLINE_S):
                while pid in node_host.get_connected_peers():
                    await trio.sleep(0.01)
            assert pid not in node.peer_queues and pid not in node_gs.peer_protocol
            assert not node.manager.did_error

    trio.run(main)


RAISING = "/swarmnode-test/raise/1.0.0"


def _in_trio(node: GossipTransport, fn: Callable[[], None]) -> None:
    """Run ``fn`` on the node's trio thread (it must not block)."""
    token = node._token
    assert token is not None
    token.run_sync_soon(fn)


def test_a_peer_task_that_raises_is_contained_and_a_daemon_is_not(tmp_path: Path) -> None:
    """A task py-libp2p runs for a peer raises (as the teardown's KeyError did): the
    node keeps running and publishing, the failure is counted by class, the peer is
    dropped; an inbound stream whose handler raises is reset.
    The boundary: a daemon task (the node's own machinery) that raises still stops
    the node, visibly."""

    async def failing(peer: ID) -> None:
        raise KeyError(peer)

    async def raising_handler(stream: Any) -> None:
        await stream.read(1)
        raise ValueError("a handler tripped over a peer's bytes")

    async def main() -> None:
        node = GossipTransport(swarm_cfg(), tmp_path / "node")
        await node.start()
        addr = node.info.listen_addrs[0]  # type: ignore[union-attr]
        other = GossipTransport(swarm_cfg(bootstrap=[addr]), tmp_path / "other")
        await other.start()
        assert node._host is not None and node._host.gossipsub is not None
        pubsub, host = node._host.gossipsub.pubsub, node._host.host
        peer = ID.from_base58(other.peer_id)
        try:
            await wait_for(lambda: node.stats()["mesh_size"] >= 1, "a mesh")
            _in_trio(node, lambda: host.set_stream_handler(RAISING, raising_handler))
            _in_trio(node, lambda: pubsub.manager.run_task(failing, peer))
            await wait_for(
                lambda: node.stats()["counters"].get("errors.task.KeyError", 0) == 1,
                "the KeyError counted",
            )
            await wait_for(
                lambda: node.stats()["counters"].get("errors.task_peer_dropped", 0) == 1,
                "its peer dropped",
            )
            # The peer comes back (bootstrap redial) and opens a stream whose handler raises.
            assert other._host is not None
            remote = other._host.host
            node_id = ID.from_base58(node.peer_id)
            _in_trio(other, lambda: remote.get_network().manager.run_task(_poke, remote, node_id))
            await wait_for(
                lambda: node.stats()["counters"].get("errors.task.ValueError", 0) == 1,
                "the handler's ValueError counted",
            )
            # not charged: a handler can raise on the node's own state as well
            assert "protocol" not in node.scores.snapshot().get(other.peer_id, {}).get(
                "verdicts", {}
            )
            heard: list[tuple[str, int]] = []

            def other_heard(round_: int) -> bool:
                heard.extend(
                    (r.peer_id, decode_batch(r.payload).round) for r in other.inbox.drain()
                )
                return (node.peer_id, round_) in heard

            await wait_for(lambda: node.stats()["mesh_size"] >= 1, "the mesh again")
            await node.publish(batch(3))
            await wait_for(lambda: other_heard(3), "the node still publishes")
            assert node.running
            _in_trio(node, lambda: pubsub.manager.run_daemon_task(failing, peer))
            await wait_for(lambda: not node.running, "a daemon's failure stops the node")
            assert node.stats()["counters"]["thread_crashed"] == 1
        finally:
            await other.stop()
            with contextlib.suppress(TransportError):
                await node.stop()

    asyncio.run(main())


async def _poke(host: Any, peer: ID) -> None:
    """Open a stream of the raising protocol to ``peer`` (retried while the connection
    is being re-made) and write one byte."""
    with trio.fail_after(DEADLINE_S):
        while True:
            try:
                stream = await host.new_stream(peer, [RAISING])
                await stream.write(b"x")
                return
            except Exception:  # not connected again yet
                await trio.sleep(0.1)


def test_one_of_the_hosts_loops_that_raises_is_restarted_and_counted() -> None:
    """A loop of the host's own (discovery, enforcement...) that raises, as discovery
    once did on a peer's expired addresses, restarts after a backoff; counted."""
    counters = Counters()
    guard = TaskGuard(counters)
    runs: list[float] = []

    async def flaky() -> None:
        runs.append(trio.current_time())
        if len(runs) < 4:
            raise PeerStoreError("peer ID is expired")

    async def main() -> None:
        with trio.fail_after(1000):
            await guard.supervised("discovery", flaky)

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert len(runs) == 4  # three failures, then it returned
    assert [round(b - a) for a, b in itertools.pairwise(runs)] == [1, 2, 4]
    snap = counters.snapshot()
    assert snap["errors.loop.discovery"] == 3 and snap["errors.task.PeerStoreError"] == 3

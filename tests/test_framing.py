"""Reading peers' pubsub streams: buffered varint frames and per-peer read pacing.

Frames are built here with protobuf and a varint written by hand, not with the code
under test. The pacing test floods a real node (``GossipTransport``) from a raw
py-libp2p host over loopback.
"""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import pytest
import trio
import trio.testing
from libp2p.io.exceptions import IncompleteReadError, MessageTooLarge
from libp2p.network.stream.exceptions import StreamEOF

from swarmnode.p2p.framing import CHUNK, WAKE_GRID_S, FrameReader, ReadBudget, wake_at
from swarmnode.p2p.netshare import NetShare
from swarmnode.p2p.transport import GossipTransport
from swarmnode.share.inbox import Counters
from swarmnode.share.ratelimit import NEWCOMERS, TokenBucket
from tests.test_p2p_hostile import ATTACKER_ID, frame, message, payload, raw_attacker
from tests.test_p2p_swarm import Collector, batch, run, swarm_cfg, wait_for


def varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b, n = n & 0x7F, n >> 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


class FakeStream:
    """Hands out ``data`` in the given chunk sizes, then EOF; records each read size."""

    def __init__(self, data: bytes, sizes: list[int]) -> None:
        self.data, self.sizes, self.asked = data, sizes, []  # type: ignore[var-annotated]

    async def read(self, n: int) -> bytes:
        self.asked.append(n)
        if not self.data:
            raise StreamEOF()
        k = min(n, self.sizes.pop(0) if self.sizes else n)
        chunk, self.data = self.data[:k], self.data[k:]
        return chunk


def frames_of(reader: FrameReader) -> list[bytes]:
    async def main() -> list[bytes]:
        out = []
        try:
            while True:
                out.append(await reader.next())
        except StreamEOF:
            return out

    return trio.run(main)


def test_frames_split_and_joined_across_reads() -> None:
    bodies = [b"a", b"", b"x" * 300, b"y" * 200_000, b"z" * 127, b"w" * 128]
    data = b"".join(varint(len(b)) + b for b in bodies)
    for sizes in ([1] * 50, [7, 3, 1000, 2], [len(data)]):
        reader = FrameReader(FakeStream(data, list(sizes)), max_len=1 << 20)
        assert frames_of(reader) == bodies
        assert len(reader.buf) == 0


def test_one_read_serves_many_frames() -> None:
    data = b"".join(varint(5) + b"hello" for _ in range(1000))
    stream = FakeStream(data, [])
    assert len(frames_of(FrameReader(stream, 1024))) == 1000
    assert len(stream.asked) <= len(data) // CHUNK + 2  # not one read per varint byte


def test_oversized_frame_is_refused_before_its_body() -> None:
    data = varint(2_000_000) + b"q" * 10
    stream = FakeStream(data, [4])
    with pytest.raises(MessageTooLarge):
        frames_of(FrameReader(stream, max_len=1 << 20))
    assert stream.asked == [CHUNK]  # the prefix was enough to refuse


def test_stream_ending_inside_a_frame_or_prefix() -> None:
    for data in (varint(10) + b"abc", b"\x80\x80"):
        with pytest.raises(IncompleteReadError):
            frames_of(FrameReader(FakeStream(data, []), 1024))
    with pytest.raises(IncompleteReadError):  # a varint that never ends
        frames_of(FrameReader(FakeStream(b"\xff" * 11, []), 1024))


def test_reserve_lets_debt_accrue_and_reports_the_wait() -> None:
    b = TokenBucket(rate=10.0, burst=20.0, now=0.0)
    assert b.reserve(20, 0.0) == 0.0  # the burst
    assert b.reserve(5, 0.0) == pytest.approx(0.5)  # 5 tokens of debt at 10/s
    assert b.reserve(0, 0.5) == 0.0  # paid off
    assert b.reserve(1, 0.5) == pytest.approx(0.1)


def test_pace_sleeps_off_a_peer_debt_and_counts_it() -> None:
    counters = Counters()
    budget = ReadBudget(frames_per_s=10.0, bytes_per_s=1000.0, counters=counters)

    async def main() -> float:
        start = trio.current_time()
        for _ in range(40):  # burst 20, then 20 more at 10 a second
            await budget.pace("flooder", 1, 0)
        await budget.pace("honest", 1, 500)  # another peer: its own budget, no wait
        return trio.current_time() - start

    elapsed = trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert elapsed == pytest.approx(2.0, abs=0.2)
    snap = counters.snapshot()
    # 20 frames of debt, slept off in at most 20 pauses (fewer: a pause that ends on the
    # grid line after the debt, WAKE_GRID_S, lets what accrued meanwhile pay the next)
    assert 10 <= snap["throttled.reads"] <= 20 and 1800 <= snap["throttled.ms"] <= 2100


def test_a_flooding_peer_is_read_at_its_budget_and_others_still_heard(tmp_path: Path) -> None:
    rate, burst, n = 20.0, 40, 400
    flood = [frame(message(payload(i))) for i in range(1, n + 1)]

    async def main() -> None:
        node = GossipTransport(
            swarm_cfg(forwarder_frames_per_s=rate, graylist_score=-1e12), tmp_path / "node"
        )
        await node.start()
        addr = node.info.listen_addrs[0]  # type: ignore[union-attr]
        honest = GossipTransport(swarm_cfg(bootstrap=[addr]), tmp_path / "honest")
        await honest.start()
        col = Collector(node)
        finished = threading.Event()
        attacker = threading.Thread(
            target=raw_attacker, args=(addr, flood, finished.is_set, True), daemon=True
        )
        try:
            await wait_for(lambda: honest.stats()["mesh_size"] >= 1, "honest peer in mesh")
            base = node.stats()["counters"].get("frames_in", 0)
            read0 = node.stats()["counters"].get("msgs_read", 0)
            attacker.start()
            # Generous waits: the attacker's host starts in a thread of this process.
            await wait_for(
                lambda: node.stats()["counters"].get("msgs_read", 0) > read0,
                "the flood arriving",
                timeout=120,
            )
            t0 = time.monotonic()
            await honest.publish(batch(10_000))
            await wait_for(
                lambda: col.has(honest.peer_id, 10_000), "the honest peer, meanwhile", timeout=120
            )
            await wait_for(
                lambda: node.stats()["counters"].get("frames_in", 0) - base >= 2 * burst,
                "the flooder read on past its burst (paced, not cut off)",
                timeout=120,
            )
            assert any(s == ATTACKER_ID.to_base58() for s, _, _ in col.got)  # delivered too
            read = node.stats()["counters"].get("frames_in", 0) - base
            # Frames from the honest peer and gossipsub control count too: a margin.
            assert read <= burst + rate * (time.monotonic() - t0 + 0.5) + 20, read
            assert read < n  # not all of it at once
            c = node.stats()["counters"]
            assert c.get("throttled.reads", 0) > 0 and node.stats()["running"]
        finally:
            finished.set()
            attacker.join(30)
            await honest.stop()
            await node.stop()

    run(main())


def test_idontwant_only_for_large_messages() -> None:
    from libp2p.peer.id import ID
    from libp2p.pubsub.gossipsub import PROTOCOL_ID_V12
    from libp2p.pubsub.pb import rpc_pb2

    from swarmnode.p2p.gossip import GOSSIP_PROTOCOLS, IDONTWANT_MIN_BYTES, QuietGossipSub

    gs = QuietGossipSub(list(GOSSIP_PROTOCOLS), 6, 4, 12)
    peer = ID(b"\x00\x05hello")
    gs.pubsub = object()  # type: ignore[assignment]  # only checked for None
    gs.mesh = {"t": {peer}}
    gs.peer_protocol = {peer: PROTOCOL_ID_V12}
    sent: list[list[bytes]] = []

    async def emit(ids: list[bytes], to: ID) -> None:
        sent.append(ids)

    gs.emit_idontwant = emit  # type: ignore[method-assign]
    for i, size in enumerate((100, IDONTWANT_MIN_BYTES - 1, IDONTWANT_MIN_BYTES)):
        msg = rpc_pb2.Message(data=b"x" * size, topicIDs=["t"], from_id=b"f", seqno=bytes([i]))
        gs.mcache.put(msg)
        trio.run(gs._emit_idontwant_for_message, msg.from_id + msg.seqno, ["t"])
    assert sent == [[b"f\x02"]]  # the large one only
    trio.run(gs._emit_idontwant_for_message, b"not-cached", ["t"])  # unknown: as before
    assert len(sent) == 2


def test_newcomers_share_one_budget_until_their_tenure() -> None:
    """Five fresh identities reading 20 frames each pay one pool of 10 frames/s
    (burst 20): ~8 s, where their own budgets would take 0 s; an established peer
    pays its own budget meanwhile; a newcomer gets its own once its first valid
    message is ``newcomer_s`` old."""
    counters = Counters()
    budget = ReadBudget(frames_per_s=10.0, bytes_per_s=1e6, counters=counters, newcomer_s=60.0)
    done: dict[str, float] = {}

    async def reader(peer: str, n: int) -> None:
        for _ in range(n):
            await budget.pace(peer, 1, 0)
        done[peer] = trio.current_time()

    async def main() -> None:
        budget.tenure.note("old")
        await trio.sleep(60)  # "old" has been heard from for a minute
        assert (
            budget.tenure.account("old") == "old" and budget.tenure.account("sybil0") == NEWCOMERS
        )
        start = trio.current_time()
        async with trio.open_nursery() as nursery:
            for k in range(5):
                nursery.start_soon(reader, f"sybil{k}", 20)
            nursery.start_soon(reader, "old", 20)  # its own burst: no wait
        assert done["old"] - start == pytest.approx(0.0, abs=0.01)
        assert max(done[f"sybil{k}"] for k in range(5)) - start == pytest.approx(8.0, abs=0.5)
        budget.tenure.note("sybil0")
        await trio.sleep(59)
        assert budget.tenure.account("sybil0") == NEWCOMERS
        await trio.sleep(1)
        assert budget.tenure.account("sybil0") == "sybil0"

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    off = ReadBudget(frames_per_s=10.0, bytes_per_s=1e6, counters=counters)
    assert off.tenure.account("anyone") == "anyone"  # newcomer_s = 0: every peer its own budget


def _finish_times(budget: ReadBudget, readers: int, frames: int, reads: int) -> list[float]:
    """On a mock clock, ``readers`` newcomers each pace ``frames`` frames ``reads``
    times through ``budget`` at once: when each finished."""
    done: list[float] = []

    async def reader(peer: str) -> None:
        for _ in range(reads):
            await budget.pace(peer, frames, 0)
        done.append(trio.current_time())

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            for k in range(readers):
                nursery.start_soon(reader, f"n{k}")

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    return done


def test_the_newcomers_pool_grows_with_its_readers_up_to_pool_peers() -> None:
    """A young swarm's mesh: 8 newcomers each reading 8 frames a second for 30 s
    (64 a second) into budgets of 10 frames a second. One pool budget falls ever
    further behind (a backlog that grows for the whole run); a pool of up to 8
    budgets keeps every reader on time. Twenty fresh identities still share at most
    ``pool_peers`` budgets: 20 x 40 frames at 8 x 10 a second take ~10 s; each
    newcomer keeps to its own budget as well."""

    def young_mesh(pool_peers: int) -> float:
        budget = ReadBudget(10.0, 1e9, Counters(), newcomer_s=600.0, pool_peers=pool_peers)
        late: list[float] = []

        async def reader(peer: str) -> None:
            start = trio.current_time()
            for i in range(240):
                await trio.sleep_until(max(trio.current_time(), start + i / 8))
                await budget.pace(peer, 1, 0)
                late.append(trio.current_time() - (start + i / 8))

        async def main() -> None:
            async with trio.open_nursery() as nursery:
                for k in range(8):
                    nursery.start_soon(reader, f"n{k}")

        trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
        return max(late)

    assert young_mesh(1) > 10.0  # the old rule: 64 frames/s into 10 (a growing backlog)
    assert young_mesh(8) < 0.2

    budget = ReadBudget(10.0, 1e9, Counters(), newcomer_s=600.0, pool_peers=8)
    # 800 frames at 8 x 10 a second, less the pool's burst (2 s of its 8 budgets,
    # 160): 8 s; their own budgets alone would take 2 s
    assert max(_finish_times(budget, readers=20, frames=1, reads=40)) == pytest.approx(8.0, abs=0.5)
    with pytest.raises(ValueError):
        ReadBudget(10.0, 1e9, Counters(), pool_peers=0)


async def _no_idontwant(msg_id: bytes, topic_ids: object) -> None:
    return None


def test_a_peer_that_only_forwards_copies_earns_its_tenure(tmp_path: Path) -> None:
    """A full mesh of three: only C publishes, so B only ever hands A copies of what
    A already had from C. A copy of a message that passed every check is a valid act:
    B's tenure at A starts (before, a peer that always came second stayed a newcomer
    and read from the newcomers' pool for as long as it stayed)."""

    async def main() -> None:
        a = GossipTransport(swarm_cfg(), tmp_path / "a")
        await a.start()
        addr = a.info.listen_addrs[0]  # type: ignore[union-attr]
        b, c = (GossipTransport(swarm_cfg(bootstrap=[addr]), tmp_path / n) for n in "bc")
        try:
            for t in (b, c):
                await t.start()
            await wait_for(
                lambda: all(t.stats()["mesh_size"] >= 2 for t in (a, b, c)), "a full mesh"
            )
            gs = a._host.gossipsub  # type: ignore[union-attr]
            reads = gs.pubsub._reads
            # A sends no IDONTWANT (gossipsub v1.2), as a v1.1 peer would not: had A's
            # IDONTWANT reached B before B forwarded, B sent A no copy (CI: none in 30 s)
            gs._emit_idontwant_for_message = _no_idontwant
            col = Collector(a)
            for r in range(1, 6):
                await c.publish(batch(r))
            await wait_for(lambda: col.has(c.peer_id, 5), "C's batches at A")
            # B hands A a copy only where C's message reached B before A's relay of it
            # did (else B got it from A and sends it no copy): more batches, more tries
            for r in range(6, 66):
                if a.stats()["counters"].get("dropped.seen", 0) > 0:
                    break
                await c.publish(batch(r))
                await asyncio.sleep(0.5)
            assert a.stats()["counters"].get("dropped.seen", 0) > 0, "no copy reached A"
            assert c.peer_id in reads.tenure  # it handed A the first copies
            await wait_for(lambda: b.peer_id in reads.tenure, "B's tenure at A")
        finally:
            for t in (c, b, a):
                await t.stop()

    run(main())


def test_newcomers_waiting_on_the_pool_still_count_toward_its_size() -> None:
    """Four newcomers each read 100 frames twice into budgets of 10 frames a second
    (a pool of up to 4: 40 a second, burst 80): 800 frames take ~18 s. Had a reader
    asleep on the pool's debt (8 s here) stopped counting after 5 s, the pool would
    have shrunk to one budget while they slept, and the debt grown. The same holds
    for a reader asleep on its own budget, longer than on the pool's: whichever order
    trio wakes them in (it shuffles; noting only the pool's wait, some orders took
    20-21 s), so the run is repeated."""
    for _ in range(12):
        budget = ReadBudget(10.0, 1e9, Counters(), newcomer_s=600.0, pool_peers=4)
        done = _finish_times(budget, readers=4, frames=100, reads=2)
        assert max(done) == pytest.approx(18.0, abs=0.5)


class _StuckCap(NetShare):
    """A CPU cap that holds every reader for 8 s (longer than ``POOL_WINDOW_S``)."""

    def charge(self, account: str, units: float) -> float:
        return 8.0


def test_a_newcomer_asleep_on_the_cpu_cap_still_counts_toward_the_pool() -> None:
    """Four newcomers read once each and are held 8 s by the CPU cap. At 6 s, one of
    them reading again finds a pool of four budgets, not one: the three still asleep
    count until their wait is over, whichever wait it is (noting only the budget's and
    the pool's waits, they dropped out after 5 s and the pool shrank under the rest)."""
    budget = ReadBudget(10.0, 1e9, Counters(), newcomer_s=600.0, pool_peers=4)
    budget.net = _StuckCap(0.1, clock=lambda: 0.0, cpu=lambda: 0.0)
    sizes: list[int] = []

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            for k in range(4):
                nursery.start_soon(budget.pace, f"n{k}", 1, 0)
            await trio.sleep(6.0)
            sizes.append(budget.pool_size("n0", trio.current_time()))

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert sizes == [4]
    assert budget.counters.get("throttled.net_share") == 4
    assert budget.counters.get("throttled.net_share.newcomers") == 4  # all in the pool


def test_paused_readers_wake_together_on_the_grid_and_never_before_their_debt() -> None:
    """Debts ending at different times inside one tenth of a second wake in one batch
    at the grid line after them (one wake-up of the libp2p thread, not five), none
    before its debt is paid; and the grid costs no throughput (the bucket keeps what
    accrued meanwhile: test_pace_sleeps_off_a_peer_debt_and_counts_it)."""
    budget = ReadBudget(frames_per_s=100.0, bytes_per_s=1e9, counters=Counters())
    woke: dict[str, tuple[float, float]] = {}

    async def reader(peer: str, extra: int) -> None:
        await budget.pace(peer, 200, 0)  # its burst (2 s at 100 a second)
        start = trio.current_time()
        await budget.pace(peer, extra, 0)  # a debt of extra / 100 s
        woke[peer] = (start + extra / 100.0, trio.current_time())

    async def main() -> None:
        await trio.sleep(0.01)  # off the grid
        async with trio.open_nursery() as nursery:
            for k, extra in enumerate((1, 3, 5, 7, 9)):
                nursery.start_soon(reader, f"p{k}", extra)

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    wake_times = {round(at, 9) for _, at in woke.values()}
    assert len(wake_times) == 1  # debts of 0.01-0.09 s: one batch
    for paid, at in woke.values():
        assert at >= paid - 1e-9 and wake_at(at) == pytest.approx(at)
        assert at - paid < WAKE_GRID_S

"""The network side over the in-memory transport: publishing, the ingest pump, fail-stop."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import msgpack
import pytest

from swarmnode.config import Config, parse_config
from swarmnode.learn.groups import ItemRef, RolloutGroup
from swarmnode.learn.metrics import RoundRecord
from swarmnode.learn.tasks import HELDOUT_SEED
from swarmnode.share.exchange import PUMP_BATCH, RolloutExchange, SwarmError, encode_round
from swarmnode.share.ingest import Catalog, IngestQueue
from swarmnode.share.memory_transport import MemoryNetwork, MemoryTransport
from swarmnode.share.wire import MAX_MESSAGE_BYTES, decode_batch, encode_batch
from tests.helpers import SPEC, make_group, score, wait_for


def groups(n: int, completions: int, chars: int) -> list[RolloutGroup]:
    return [
        RolloutGroup(
            ItemRef("basic_arithmetic", {}, 0, i),
            f"q{i}",
            ["x" * chars] * completions,
            [float(k % 2) for k in range(completions)],
        )
        for i in range(n)
    ]


def test_one_message_when_it_fits() -> None:
    dropped: Counter[str] = Counter()
    out = encode_round("s", 3, groups(4, 8, 100), dropped)
    assert len(out) == 1 and len(decode_batch(out[0]).groups) == 4 and not dropped


def test_too_large_is_halved_and_a_hopeless_group_dropped() -> None:
    dropped: Counter[str] = Counter()
    big = groups(20, 8, 60_000)  # ~9.6 MB in all, ~0.5 MB a group
    out = encode_round("s", 1, big, dropped)
    assert 10 <= len(out) <= 20 and all(len(p) <= MAX_MESSAGE_BYTES for p in out)
    sent = [g.ref.index for p in out for g in decode_batch(p).groups]
    assert sent == list(range(20)) and not dropped  # all of them, in order
    hopeless = groups(1, 32, 60_000)  # one group over the message limit on its own
    out = encode_round("s", 1, [*groups(2, 2, 10), *hopeless], dropped)
    sent = [g.question for p in out for g in decode_batch(p).groups]
    assert sent == ["q0", "q1"] and dropped == {"too_large": 1}


def _config(tmp_path: Path, **sapo: object) -> Config:
    return parse_config(
        {
            "node": {"data_dir": str(tmp_path)},
            "tasks": {"datasets": [SPEC.model_dump()]},
            "swarm": {"enabled": True},
            "sapo": {"queue_groups": 16, "max_peer_share": 1.0, **sapo},
        }
    )


class Side:
    """One node's network side on a MemoryNetwork, with the failures it reported."""

    def __init__(self, net: MemoryNetwork, name: str, cfg: Config) -> None:
        self.transport = net.transport(name)
        self.queue = IngestQueue(  # its verdicts move the senders' scores (as node.py wires it)
            cfg.sapo, Catalog(cfg.tasks.datasets), score, verdicts=self.transport.scores.report
        )
        self.stops: list[str] = []
        self.exchange = RolloutExchange(
            cfg, self.transport, self.queue, lambda: self.stops.append("stop")
        )


@asynccontextmanager
async def two_sides(cfg: Config) -> AsyncIterator[tuple[Side, Side]]:
    """Nodes A and B on one memory network, their exchanges started, stopped on exit."""
    net = MemoryNetwork()
    a, b = Side(net, "A", cfg), Side(net, "B", cfg)
    await a.exchange.start()
    await b.exchange.start()
    try:
        yield a, b
    finally:
        await a.exchange.stop()
        await b.exchange.stop()


def test_pump_verifies_what_peers_publish_and_refuses_held_out_items(tmp_path: Path) -> None:
    async def main() -> None:
        cfg = _config(tmp_path)
        async with two_sides(cfg) as (a, b):
            now = time.time()
            heldout = make_group(2, created=now)
            heldout = replace(heldout, ref=replace(heldout.ref, seed=HELDOUT_SEED))
            sent = await a.exchange.publish(1, [make_group(1, created=now), heldout])
            assert sent > 0 and a.exchange.published == {"messages": 1, "groups": 2, "bytes": sent}
            await b.transport.publish(b"\xc1 not msgpack")  # refused by the validator
            await wait_for(lambda: b.queue.stats.rejected["heldout"] == 1, "B's verdicts")
            assert len(b.queue) == 1 and b.queue.per_peer() == {"A": 1}
            assert b.queue.stats.accepted == 1 and b.exchange.offers == 1
            assert a.transport.stats()["rejected"] == {"msgpack": 1}
            assert not b.stops and b.exchange.status().ingest.ingest_rejected == {"heldout": 1}
            # The verdicts reach the transport's peer scores (gossip: graylisting).
            verdicts = b.transport.stats()["peer_scores"]["A"]["verdicts"]
            assert verdicts == {"accepted": 1, "failed_verification": 1}
            assert b.transport.scores.score("A") < 0  # a held-out item costs more than one earns
            status = b.exchange.status().to_json()["ingest"]
            assert {"ingest_time_share", "ingest_busy_s", "ingest_budget_wait_s"} <= set(status)
            rec = b.exchange.status().with_figures(RoundRecord(round=1))
            assert rec.ingest_time_share == status["ingest_time_share"]

    asyncio.run(main())


def test_start_up_cost_is_not_charged_to_the_ingestion_budget(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first offer used to import reasoning-gym (seconds while a model loads) inside
    the time budget, which then held every peer's groups back for a 30 s window: a
    restarted node trained alone (tests/test_churn.py). The pump imports it first."""
    preloaded: list[float] = []

    def slow_preload() -> None:
        time.sleep(0.5)
        preloaded.append(time.monotonic())

    monkeypatch.setattr("swarmnode.share.exchange.preload", slow_preload)

    async def main() -> None:
        cfg = _config(tmp_path)
        async with two_sides(cfg) as (a, b):
            await a.exchange.publish(1, [make_group(1, created=time.time())])
            await wait_for(lambda: b.queue.stats.accepted == 1, "B to verify A's group")
            assert len(preloaded) == 2  # each pump, before its first offer
            assert b.exchange.guard.report()["ingest_busy_s"] < 0.5

    asyncio.run(main())


def test_a_burst_is_offered_in_batches_not_a_worker_call_a_message(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """40 messages that wait in the inbox at once reach the queue in two worker calls
    (``PUMP_BATCH`` = 32, then 8), each message still offered and scored on its own:
    under a flood each worker call wakes the loop and a thread (the node's other
    threads woke a third less often with batches: docs/experiments/2026-12-06-batch-wake)."""
    batches: list[int] = []
    offer = RolloutExchange._offer

    async def counted(self: RolloutExchange, work: list[Any]) -> list[int]:
        batches.append(len(work))
        return await offer(self, work)

    monkeypatch.setattr(RolloutExchange, "_offer", counted)

    async def main() -> None:
        cfg = _config(tmp_path)
        async with two_sides(cfg) as (a, b):
            now = time.time()
            for r in range(40):  # no await yields to B's pump in between
                await a.transport.publish(encode_batch("default", r, [make_group(r, created=now)]))
            await wait_for(lambda: b.exchange.offers == 40, "B to offer all 40")
            assert batches == [PUMP_BATCH, 40 - PUMP_BATCH]
            assert b.queue.stats.accepted == 40 and not b.stops
            assert b.transport.stats()["peer_scores"]["A"]["verdicts"] == {"accepted": 40}

    asyncio.run(main())


@pytest.mark.filterwarnings("ignore:non-integer arguments to randrange")
def test_catalog_compares_config_values_not_their_encoding(tmp_path: Path) -> None:
    """A peer whose encoder writes a whole float as an int (JavaScript does) is in catalog."""
    cfg = parse_config(
        {
            "node": {"data_dir": str(tmp_path)},
            "tasks": {"datasets": [{"name": "chain_sum", "config": {"min_terms": 2.0}}]},
        }
    )
    group = make_group(0)  # only its completions are reused: the item is chain_sum's
    from swarmnode.learn.tasks import ref_config, regenerate

    ours = ItemRef("chain_sum", ref_config({"min_terms": 2.0}, cfg.tasks.datasets[0].size), 5, 3)
    entry = regenerate(ours)
    right, wrong = f"<answer>{entry['answer']}</answer>", "<answer>-1</answer>"
    theirs = {**ours.config, "min_terms": 2}  # what a JavaScript peer writes for 2.0
    payload = msgpack.packb(
        {
            "v": 2,
            "swarm": "default",
            "round": 1,
            "groups": [
                {
                    "ref": {"dataset": "chain_sum", "config": theirs, "seed": 5, "index": 3},
                    "question": entry["question"],
                    "completions": [right, wrong],
                    "rewards": [1, 0],  # ints too
                    "model": "js",
                    "created": group.created,
                    "finished": [True, True],
                }
            ],
        }
    )
    received = decode_batch(payload).rollout_groups("js-peer")
    assert type(received[0].ref.config["min_terms"]) is int  # the wire kept the int
    queue = IngestQueue(cfg.sapo, Catalog(cfg.tasks.datasets), score, clock=lambda: group.created)
    assert queue.offer("js-peer", received) == 1, queue.stats.rejected
    (kept,) = [e.group for _, e in queue.snapshot()]
    assert kept.ref == ours and type(kept.ref.config["min_terms"]) is float  # our values


def test_a_dead_transport_stops_the_node_and_is_reported(tmp_path: Path) -> None:
    async def main() -> None:
        side = Side(MemoryNetwork(), "A", _config(tmp_path))
        await side.exchange.start()
        side.transport.crash("the wire was cut")
        await wait_for(lambda: bool(side.stops), "the pump to notice", timeout=5)
        assert side.exchange.failure is not None and "stopped unexpectedly" in side.exchange.failure
        assert side.exchange.status().swarm_failure == side.exchange.failure
        assert await side.exchange.publish(2, [make_group(1)]) == 0  # nothing to publish on
        await side.exchange.stop()  # the transport's own error is logged, not raised
        with pytest.raises(SwarmError, match="stopped unexpectedly"):
            side.exchange.check()
        assert side.stops == ["stop"]  # asked once

    asyncio.run(main())


def test_a_crashed_pump_is_a_failure_too(tmp_path: Path) -> None:
    async def main() -> None:
        side = Side(MemoryNetwork(), "A", _config(tmp_path))
        side.queue.offer = None  # type: ignore[assignment,method-assign]  # a bug in the pump's path
        peer = MemoryNetwork.transport(side.transport.network, "B")
        await side.exchange.start()
        await peer.start()
        await peer.publish(encode_batch("default", 1, [make_group(1, created=time.time())]))
        await wait_for(lambda: bool(side.stops), "the crash to be reported", timeout=5)
        assert "ingest pump crashed" in (side.exchange.failure or "")
        await side.exchange.stop()
        await peer.stop()

    asyncio.run(main())


def test_memory_transport_bounds_its_inbox(tmp_path: Path) -> None:
    async def main() -> None:
        net = MemoryNetwork()
        a, b = net.transport("A"), net.transport("B", inbox_size=2)
        assert isinstance(b, MemoryTransport)
        await a.start()
        await b.start()
        for r in range(5):
            await a.publish(encode_batch("default", r, [make_group(r)]))
        assert [decode_batch(m.payload).round for m in b.inbox.drain()] == [3, 4]  # newest kept
        assert b.stats()["inbox_dropped"] == 3 and b.stats()["msgs_in"] == 5
        assert await b.receive(timeout=0.05) is None
        await a.stop()
        await b.stop()

    asyncio.run(main())


def test_publish_rate_skips_rounds_and_counts_them(tmp_path: Path) -> None:
    async def main() -> None:
        cfg = _config(tmp_path)
        cfg = cfg.model_copy(
            update={"swarm": cfg.swarm.model_copy(update={"target_msgs_per_s": 5.0})}
        )
        async with two_sides(cfg) as (a, b):
            assert await a.exchange.publish(1, [make_group(1, created=time.time())]) > 0
            assert a.exchange.rate is not None and a.exchange.status().publish_p == 1.0
            a.exchange.rate.p = 0.0  # as if the swarm were huge: every coin says no
            for r in range(2, 7):
                assert await a.exchange.publish(r, [make_group(r, created=time.time())]) == 0
            assert a.exchange.published["rounds_skipped"] == 5
            assert a.exchange.published["messages"] == 1
            await wait_for(lambda: b.exchange.offers == 1, "B got round 1")
            await asyncio.sleep(0.2)
            assert b.exchange.offers == 1  # and nothing else

    asyncio.run(main())


def test_a_fast_node_publishes_within_what_its_peers_accept(tmp_path: Path) -> None:
    """Rounds faster than peers take from one originator (5 msgs/s by default): the
    excess is not published and counted; what goes out stays within half the burst,
    so no peer's origin limit ever drops it (and scores the node down)."""

    async def main() -> None:
        cfg = _config(tmp_path)
        async with two_sides(cfg) as (a, b):
            for r in range(1, 41):  # 40 rounds at once: a tiny model on a fast machine
                await a.exchange.publish(r, [make_group(r, created=time.time())])
            sent = a.exchange.published["messages"]
            over = a.exchange.published["rounds_over_pace"]
            assert sent + over == 40
            assert sent <= cfg.swarm.origin_msgs_burst / 2 + 1  # the half-burst, and a
            # token that may have refilled meanwhile
            await wait_for(lambda: b.exchange.offers == sent, "B got what A sent")
            assert a.exchange.status().to_json()["published"]["rounds_over_pace"] == over

    asyncio.run(main())

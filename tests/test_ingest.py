"""Ingestion: verification against local regeneration, bounds, dedupe, freshness, fairness."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from swarmnode.config import SapoConfig
from swarmnode.learn.groups import ItemRef
from swarmnode.share.ingest import Catalog, IngestQueue, group_key
from tests.helpers import CFG, SPEC, Clock, make_group, score


def make_queue(clock: Clock, **cfg: Any) -> IngestQueue:
    sapo = SapoConfig(**{"queue_groups": 8, "max_peer_share": 0.5, **cfg})
    return IngestQueue(sapo, Catalog([SPEC]), score, clock=clock)


def test_verification_rejects_by_reason() -> None:
    clock = Clock()
    q = make_queue(clock)
    altered = make_group(1)
    altered.question = altered.question.replace("=", "= ") + " "
    unknown = replace(make_group(2), ref=ItemRef("not_a_dataset", CFG, 7, 2))
    other_cfg = replace(
        make_group(3), ref=ItemRef("basic_arithmetic", {**CFG, "size": 10**7}, 7, 3)
    )
    bad_index = replace(make_group(4), ref=ItemRef("basic_arithmetic", CFG, 7, 5000))
    assert q.offer("peerA", [altered, unknown, other_cfg, bad_index]) == 0
    assert q.stats.rejected == {"question_mismatch": 1, "out_of_catalog": 2, "unregenerable": 1}
    assert len(q) == 0


def test_false_claims_are_rescored() -> None:
    clock = Clock()
    q = make_queue(clock)
    liar = make_group(5, right=1, wrong=3, claimed=[0.0, 1.0, 1.0, 1.0])  # claims wrong ones right
    all_wrong_claimed_right = make_group(6, right=0, wrong=4, claimed=[1.0, 0.0, 1.0, 0.0])
    assert q.offer("peerA", [liar, all_wrong_claimed_right]) == 1
    ((_key, entry),) = q.snapshot()
    assert entry.group.rewards == [1.0, 0.0, 0.0, 0.0] and not entry.claimed_match
    assert entry.group.origin == "peerA"
    assert q.stats.claims_false == 2 and q.stats.rejected == {"no_signal": 1}


def test_dedupe_freshness_and_future() -> None:
    clock = Clock()
    q = make_queue(clock, freshness_s=100)
    g = make_group(7)
    same_reordered = make_group(7)
    same_reordered.completions.reverse()
    assert group_key(g) == group_key(same_reordered)
    assert q.offer("peerA", [g]) == 1
    assert q.offer("peerB", [same_reordered]) == 0  # someone else relaying it
    assert q.offer("peerA", [make_group(8, created=clock.now - 101)]) == 0
    assert q.offer("peerA", [make_group(9, created=clock.now + 10_000)]) == 0
    assert q.stats.rejected == {"duplicate": 1, "stale": 1, "future": 1}
    clock.now += 101  # the kept group ages out of the window
    assert q.snapshot() == [] and q.stats.evicted["expired"] == 1


def test_burst_from_several_peers_respects_bounds() -> None:
    clock = Clock()
    q = make_queue(clock, queue_groups=8, max_peer_share=0.25)
    for burst in range(3):
        for p, peer in enumerate(["A", "B", "C", "D", "E"]):
            groups = [make_group(100 * p + 10 * burst + k) for k in range(4)]
            q.offer(peer, groups)
            assert len(q) <= 8 and max(q.per_peer().values()) <= 2
    # Fair: nobody over its share, and every peer keeps some (the full queue takes
    # from the heaviest holders), each its newest.
    assert len(q) == 8 and sorted(q.per_peer().values()) == [1, 1, 2, 2, 2]
    newest = {100 * p + 20 + 3 for p in range(5)}
    assert newest <= {e.group.ref.index for _, e in q.snapshot()}
    assert q.stats.evicted["peer_share"] > 0 and q.stats.evicted["full"] > 0
    assert q.stats.accepted == 60


def test_byte_bound() -> None:
    clock = Clock()
    q = make_queue(clock, queue_groups=100, queue_bytes=1 << 16, max_peer_share=1.0)
    big = [make_group(i) for i in range(50)]
    for g in big:
        g.completions = [c + " " * 4000 for c in g.completions]
    q.offer("A", big)
    assert q.report()["queue_bytes"] <= 1 << 16 and len(q) < 50


@pytest.mark.parametrize("junk", [None, 3, "x", b"\x00"])
def test_wrong_reward_types_never_raise(junk: Any) -> None:
    q = make_queue(Clock())
    g = make_group(11)
    g.rewards = [junk, junk]  # type: ignore[list-item]
    assert q.offer("A", [g]) == 1  # rewards are ignored: our re-scoring counts


def test_a_full_queue_takes_from_whoever_holds_most_for_its_tenure() -> None:
    """Evictions when full fall on the heaviest holder, its oldest group first; a
    peer known longer may hold more (1 + minutes known, per group)."""
    clock = Clock()
    q = make_queue(clock, queue_groups=12, max_peer_share=1.0)
    assert q.offer("old", [make_group(i) for i in range(4)]) == 4
    clock.now += 600  # "old" weighs 11 now
    assert q.offer("young", [make_group(100 + i) for i in range(6)]) == 6
    assert q.offer("fresh", [make_group(200 + i) for i in range(6)]) == 6
    # 16 offered, room for 12: "young" and "fresh" gave up four, each its oldest first
    held = q.per_peer()
    assert held["old"] == 4 and held["young"] + held["fresh"] == 8
    assert abs(held["young"] - held["fresh"]) <= 2 and q.stats.evicted == {"full": 4}
    kept = sorted(e.group.ref.index for _, e in q.snapshot())
    young, fresh = range(106 - held["young"], 106), range(206 - held["fresh"], 206)
    assert kept == [0, 1, 2, 3, *young, *fresh]

"""Token buckets, the ingestion time budget, the repeat filter and peer scores,
all on an injected clock (no sleeps)."""

from __future__ import annotations

import logging
import random

import msgpack
import pytest

from swarmnode.share.peerscore import MAX_CREDIT, PeerScores
from swarmnode.share.ratelimit import PeerBuckets, RepeatFilter, TimeShare
from swarmnode.share.wire import WireError, decode_batch


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_peer_bucket_allows_burst_then_rate_and_peers_are_independent() -> None:
    clock = Clock()
    buckets = PeerBuckets(rate=2.0, burst=5.0, max_peers=2, clock=clock)
    assert [buckets.take("a") for _ in range(6)] == [True] * 5 + [False]
    assert buckets.take("b")  # another peer has its own bucket
    clock.t += 1.0  # two tokens back
    assert [buckets.take("a") for _ in range(3)] == [True, True, False]
    assert not buckets.take("a", 64)  # a message worth more groups than saved up
    buckets.take("c")
    assert len(buckets) == 2  # bounded: the least recently seen peer is forgotten


def test_time_share_reports_busy_fraction_and_the_wait_that_restores_it() -> None:
    clock = Clock()
    share = TimeShare(max_share=0.25, window_s=10.0, clock=clock)
    share.record(clock.t, clock.t + 5.0)
    clock.t += 5.0
    assert share.share() == pytest.approx(0.5)
    assert share.wait_s() == pytest.approx(7.5)  # 5 s over budget + room for the next 5 s
    clock.t += 10.0
    assert share.share() == 0.0 and share.wait_s() == 0.0


def test_time_share_matches_the_definition_over_many_spans() -> None:
    """The running sum gives what summing every span's overlap with the window gives."""
    rng = random.Random(5)
    clock = Clock()
    share = TimeShare(max_share=0.25, window_s=10.0, clock=clock)
    spans: list[tuple[float, float]] = []
    for _ in range(2000):
        start = clock.t + rng.expovariate(20.0)
        end = start + rng.expovariate(100.0)
        share.record(start, end)
        spans.append((start, end))
        clock.t = end + rng.random() * 0.01
        cutoff = clock.t - 10.0
        expected = sum(max(0.0, e - max(s, cutoff)) for s, e in spans) / 10.0
        assert share.share() == pytest.approx(expected, abs=1e-9)


def test_repeat_filter_passes_a_few_then_counts_and_summarises() -> None:
    clock = Clock()
    filt = RepeatFilter(burst=3, interval_s=60.0, clock=clock)

    def rec(msg: str) -> logging.LogRecord:
        return logging.LogRecord("libp2p.x", logging.WARNING, "f", 1, msg, ("arg",), None)

    assert [filt.filter(rec("flood %s")) for _ in range(10)] == [True] * 3 + [False] * 7
    assert filt.filter(rec("other %s"))  # another template is not affected
    clock.t += 61.0
    r = rec("flood %s")
    assert filt.filter(r) and "7 similar suppressed" in str(r.msg)
    assert filt.suppressed == 7


def test_peer_scores_graylist_bad_peers_decay_and_cap_credit() -> None:
    clock = Clock()
    scores = PeerScores(graylist_score=-100.0, graylist_s=600.0, half_life_s=100.0, clock=clock)
    for _ in range(100):
        scores.report("honest", "accepted")
    assert scores.score("honest") == MAX_CREDIT  # credit cannot be banked
    scores.report("bad", "invalid", 11)
    assert scores.is_graylisted("bad") and not scores.is_graylisted("honest")
    assert scores.snapshot()["bad"]["verdicts"] == {"invalid": 11}
    clock.t += 100.0
    assert scores.score("bad") == pytest.approx(-55.0)  # one half-life
    clock.t += 600.0
    assert not scores.is_graylisted("bad")  # the graylist expires; the peer may return


def test_wire_version_must_be_an_exact_int() -> None:
    base = {"v": 2, "swarm": "s", "round": 0, "groups": []}
    for v in (2.0, 1.0, True):
        with pytest.raises(WireError) as err:
            decode_batch(msgpack.packb({**base, "v": v}))
        assert err.value.reason == "version"


def test_ingest_guard_keeps_the_time_share() -> None:
    from swarmnode.share.ingest_guard import IngestGuard

    clock = Clock()

    class SlowQueue:
        def offer(self, peer: str, groups: list[int]) -> int:  # type: ignore[override]
            clock.t += 1.0  # each verification costs one second
            return len(groups)

    def sleep(s: float) -> None:
        clock.t += s

    guard = IngestGuard(SlowQueue(), max_share=0.25, window_s=10.0, clock=clock, sleep=sleep)
    t0 = clock.t
    for _ in range(201):
        guard.offer("honest", [1])  # type: ignore[list-item]
    elapsed = clock.t - t0
    # Over the run: the budget, plus one window's allowance at the start and one offer.
    busy = 201.0  # seconds of verification done
    assert busy <= 0.25 * elapsed + 0.25 * 10.0 + 1.0
    assert guard.report()["ingest_time_share"] <= 0.25 + 1.0 / 10.0

"""The swarm sampler: exact I/J mix, fill-up with a reported shortfall, the
zero-advantage filter, and what the adaptive mode does differently."""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from swarmnode.config import SapoConfig, parse_config
from swarmnode.learn.groups import ItemRef, RolloutGroup
from swarmnode.learn.grpo import group_advantages
from swarmnode.learn.model import load_policy
from swarmnode.learn.trainer import Trainer
from swarmnode.share.ingest import Catalog, IngestQueue
from swarmnode.share.sampler import SwarmSampler
from tests.helpers import CFG, SPEC, Clock, make_group, score, tiny_config


def queue_with(clock: Clock, peers: dict[str, int], start: int = 0, **cfg: Any) -> IngestQueue:
    """A queue holding ``peers[p]`` verified groups (one right, one wrong) per peer."""
    sapo = SapoConfig(**{"queue_groups": 64, "max_peer_share": 1.0, **cfg})
    q = IngestQueue(sapo, Catalog([SPEC]), score, clock=clock)
    index = start
    for peer, n in peers.items():
        for _ in range(n):
            assert q.offer(peer, [make_group(index)]) == 1
            index += 1
    return q


def local(n: int, with_signal: bool = True, start: int = 500) -> list[RolloutGroup]:
    out = []
    for i in range(n):
        g = make_group(start + i)
        if not with_signal:
            g.rewards = [0.0] * len(g.rewards)
        out.append(g)
    return out


def sampler(q: IngestQueue, clock: Clock, **cfg: Any) -> SwarmSampler:
    return SwarmSampler(SapoConfig(**cfg), q, seed=3)


def test_uniform_exact_mix_when_enough_external() -> None:
    clock = Clock()
    q = queue_with(clock, {"p1": 3, "p2": 3, "p3": 3})
    s = sampler(q, clock, local_groups=2, external_groups=3)
    comp = s.compose(1, local(4))
    assert (comp.local, comp.external, comp.shortfall) == (2, 3, 0)
    assert len(comp.groups) == 5
    assert [g.is_local for g in comp.groups] == [True, True, False, False, False]
    keys = [g.ref.key for g in comp.groups]
    assert len(set(keys)) == 5  # never a group twice
    assert len(q) == 6 and q.stats.taken == 3  # taken groups leave the queue
    assert comp.external_peers == len({g.origin for g in comp.groups if not g.is_local})
    # Deterministic given (seed, round) and the queue's content.
    q2 = queue_with(clock, {"p1": 3, "p2": 3, "p3": 3})
    again = sampler(q2, clock, local_groups=2, external_groups=3).compose(1, local(4))
    assert [g.ref.key for g in again.groups] == keys


def test_external_groups_come_from_each_peers_newest_round() -> None:
    """The queue holds 10 rounds per peer; both modes train on the newest ones first."""
    clock = Clock()
    sapo = SapoConfig(queue_groups=256, max_peer_share=1.0)
    for mode in ("uniform", "adaptive"):
        q = IngestQueue(sapo, Catalog([SPEC]), score, clock=clock)
        for r in range(10):
            for p, peer in enumerate(("p1", "p2")):
                for k in range(2):
                    g = make_group(100 * p + 10 * r + k)
                    g.round = r + 5 * p  # the peers' round counters differ
                    assert q.offer(peer, [g]) == 1
        s = sampler(q, clock, local_groups=0, external_groups=4, mode=mode)
        comp = s.compose(1, [])
        assert sorted((g.origin, g.round) for g in comp.groups) == [
            ("p1", 9),
            ("p1", 9),
            ("p2", 14),
            ("p2", 14),
        ], mode
        if mode == "uniform":  # the next draw: the next-newest round of each peer
            comp = s.compose(2, [])
            assert sorted(g.round for g in comp.groups) == [8, 8, 13, 13]


def test_uniform_fills_up_with_local_and_reports_shortfall() -> None:
    clock = Clock()
    q = queue_with(clock, {"p1": 1})
    comp = sampler(q, clock, local_groups=2, external_groups=3).compose(1, local(4))
    assert (comp.local, comp.external, comp.shortfall) == (4, 1, 2)
    assert len(q) == 0
    # Nothing to fill up with: the update is smaller, and says so.
    comp = sampler(q, clock, local_groups=2, external_groups=3).compose(2, local(2))
    assert (comp.local, comp.external, comp.shortfall) == (2, 0, 3)


def test_zero_advantage_groups_never_trained_on(tiny_model_dir: Path, tmp_path: Path) -> None:
    clock = Clock()
    q = queue_with(clock, {"p1": 2})
    # A peer's group with no signal after our re-scoring never enters the queue...
    flat = make_group(900, right=2, wrong=0)
    assert q.offer("p1", [flat]) == 0 and q.stats.rejected["no_signal"] == 1
    # ...and a local one is skipped by the update (uniform mode passes it through).
    comp = sampler(q, clock, local_groups=2, external_groups=2).compose(
        1, [*local(1, with_signal=False), *local(1, start=600)]
    )
    assert (comp.local, comp.external) == (2, 2)
    flat_local = comp.groups[0]
    assert group_advantages(flat_local.rewards) == [0.0] * len(flat_local.rewards)
    cfg = parse_config(tiny_config(tiny_model_dir, tmp_path))
    trainer = Trainer(cfg, load_policy(cfg.model))
    step = trainer.update(comp.groups)
    assert (step.groups_trained, step.groups_skipped) == (3, 1)
    # The adaptive mode does not even spend a slot on it.
    q = queue_with(clock, {"p1": 2}, start=50)
    comp = sampler(q, clock, local_groups=2, external_groups=2, mode="adaptive").compose(
        1, [*local(1, with_signal=False), *local(1, start=600)]
    )
    assert all(g.has_signal for g in comp.groups) and (comp.local, comp.external) == (1, 2)


def test_adaptive_shifts_to_external_when_local_groups_lack_signal() -> None:
    clock = Clock()
    q = queue_with(clock, {"p1": 4, "p2": 4})
    comp = sampler(q, clock, local_groups=2, external_groups=2, mode="adaptive").compose(
        1, local(2, with_signal=False)
    )
    assert (comp.local, comp.external, comp.shortfall) == (0, 4, 0)
    # Uniform keeps the two useless local groups and takes only J external ones.
    q = queue_with(clock, {"p1": 4, "p2": 4})
    comp = sampler(q, clock, local_groups=2, external_groups=2).compose(
        1, local(2, with_signal=False)
    )
    assert (comp.local, comp.external) == (2, 2)


def test_adaptive_keeps_a_quarter_local_when_local_groups_have_signal() -> None:
    clock = Clock()
    budget = 8
    q = queue_with(clock, {"p1": 10, "p2": 10})
    adaptive = sampler(q, clock, local_groups=0, external_groups=budget, mode="adaptive")
    comp = adaptive.compose(1, local(4))
    assert comp.local == math.ceil(budget / 4) and comp.external == budget - comp.local
    # With no useful local group at all, every slot may go external.
    comp = adaptive.compose(2, local(4, with_signal=False))
    assert (comp.local, comp.external) == (0, budget)


def test_adaptive_distrusts_a_lying_peer() -> None:
    """Both peers send equally useful groups, but ``liar`` claims rewards our re-scoring
    contradicts: adaptive sampling takes it less and less; uniform does not notice."""
    clock = Clock()

    def fill() -> IngestQueue:
        sapo = SapoConfig(queue_groups=64, max_peer_share=1.0)
        q = IngestQueue(sapo, Catalog([SPEC]), score, clock=clock)
        for i in range(24):
            assert q.offer("honest", [make_group(i)]) == 1
            assert q.offer("liar", [make_group(100 + i, claimed=[0.0, 1.0])]) == 1
        return q

    picks: dict[str, Counter[str]] = {}
    for mode in ("uniform", "adaptive"):
        q = fill()
        s = sampler(q, clock, local_groups=0, external_groups=4, mode=mode)
        picks[mode] = Counter()
        for r in range(1, 5):
            comp = s.compose(r, [])
            picks[mode].update(g.origin for g in comp.groups)
        if mode == "adaptive":
            assert s.peer_trust["honest"] == 1.0 and s.peer_trust["liar"] < 0.1  # 0.9 ** 24
    assert q.stats.claims_false == 24
    share = {m: c["liar"] / sum(c.values()) for m, c in picks.items()}
    assert share["adaptive"] <= 0.25 and share["uniform"] >= 0.4, picks


def test_catalog_reference_matches_ingest_fixture() -> None:
    # Guard for the helpers above: the shared fixture's items are in the catalog.
    assert Catalog([SPEC]).canonical(ItemRef("basic_arithmetic", CFG, 7, 1)) is not None


def test_slots_go_per_peer_not_per_group() -> None:
    """A peer that sends 30 groups a round gets no more slots than one that sends 2."""
    clock = Clock()
    for mode in ("uniform", "adaptive"):
        picks: Counter[str] = Counter()
        for r in range(20):
            q = queue_with(clock, {"bulk": 30, "small": 2}, start=40 * r)
            s = sampler(q, clock, local_groups=0, external_groups=2, mode=mode, peer_tenure_s=0)
            picks.update(g.origin for g in s.compose(r, []).groups)
        # per group, "small" would get 2 of 32 groups' chances (~6 of 40 picks)
        assert picks["small"] >= 12, (mode, picks)


def test_fresh_identities_do_not_take_an_established_peers_slots() -> None:
    """Five Sybils appear with 20 valid groups each; the peer heard from for 10 minutes
    keeps its slot every round (with tenure off it would mostly lose it)."""
    honest_rounds = {}
    for tenure in (600.0, 0.0):
        clock = Clock()
        sapo = SapoConfig(queue_groups=512, max_peer_share=1.0)
        q = IngestQueue(sapo, Catalog([SPEC]), score, clock=clock)
        s = SwarmSampler(
            SapoConfig(local_groups=0, external_groups=2, peer_tenure_s=tenure), q, seed=3
        )
        index = 0
        for _ in range(5):  # ten quiet minutes: the honest peer's groups, trained on
            assert q.offer("honest", [make_group(index)]) == 1
            index += 1
            s.compose(0, [])
            clock.now += 120
        trained = 0
        for r in range(1, 11):  # the flood: every round 20 new groups per Sybil
            assert q.offer("honest", [make_group(index)]) == 1
            index += 1
            for k in range(5):
                for n in range(20):
                    q.offer(f"sybil{k}", [make_group(20 * r + n, seed=100 + k)])
            trained += sum(g.origin == "honest" for g in s.compose(r, []).groups)
            clock.now += 10
        honest_rounds[tenure] = trained
    assert honest_rounds[600.0] == 10 and honest_rounds[0.0] <= 6, honest_rounds


@pytest.mark.parametrize("sybils", [5, 50])
def test_a_young_honest_peer_keeps_its_slot_against_younger_sybils(sybils: int) -> None:
    """bench_flood's situation: the honest peer has been heard from for 3 minutes when
    Sybils start, each with a valid group every round; one external slot a round for
    60 one-second rounds. The Sybils began together, so they share one peer's weight:
    the honest peer keeps 57 of 60 against 5 and 56 against 50 (seed 5). Each
    weighed alone by the square of its tenure's share, they took 9 and 26 of its
    slots; by the share itself about half against five (31 of 60)."""
    clock = Clock()
    q = IngestQueue(
        SapoConfig(queue_groups=512, max_peer_share=1.0), Catalog([SPEC]), score, clock=clock
    )
    s = SwarmSampler(SapoConfig(local_groups=0, external_groups=1), q, seed=5)
    index = 0
    for r in range(18):  # three quiet minutes, a round of the honest peer's every 10 s
        assert q.offer("honest", [make_group(index)]) == 1
        index += 1
        s.compose(r, [])
        clock.now += 10
    kept = 0
    for r in range(18, 78):
        assert q.offer("honest", [make_group(index)]) == 1
        index += 1
        for k in range(sybils):
            q.offer(f"sybil{k}", [make_group(r, seed=100 + k)])
        kept += sum(g.origin == "honest" for g in s.compose(r, []).groups)
        clock.now += 1
    assert kept >= 54, kept


def test_peers_that_began_apart_keep_their_own_weight() -> None:
    """Newcomers share a weight only within their cohort: honest nodes joining a
    minute apart each weigh their own tenure, and a young swarm that began together
    draws as before (uniform among equals)."""
    clock = Clock()
    q = IngestQueue(
        SapoConfig(queue_groups=512, max_peer_share=1.0), Catalog([SPEC]), score, clock=clock
    )
    s = SwarmSampler(SapoConfig(local_groups=0, external_groups=1), q, seed=5)
    for k, peer in enumerate(["a", "b", "c"]):
        assert q.offer(peer, [make_group(k)]) == 1
        clock.now += 60
    w = s.peer_weights(["a", "b", "c"])
    assert w == pytest.approx({"a": (180 / 600) ** 2, "b": (120 / 600) ** 2, "c": 0.01})
    assert q.offer("d", [make_group(10)]) == 1 and q.offer("e", [make_group(11)]) == 1
    clock.now += 30
    w = s.peer_weights(["d", "e"])
    assert w["d"] == w["e"] == pytest.approx((30 / 600) ** 2 / 2)


def test_a_full_queue_keeps_the_batch_of_a_peer_that_sends_few() -> None:
    """bench_flood's Sybils under every rate with ``verify: when_drawn``: the cheap
    checks let five fresh identities fill the queue many times a round. The honest
    peer's batch, queued before theirs each round, must still be there when the
    sampler draws: the full queue takes from whoever holds the most for its tenure.
    (When the queue's oldest group left first, it was trained in 0 of 10 rounds here,
    and in 20 of 63 in the embedded-model bench.)"""
    clock = Clock()
    sapo = SapoConfig(queue_groups=64, max_peer_share=0.25, verify="when_drawn")
    q = IngestQueue(sapo, Catalog([SPEC]), score, clock=clock)
    s = SwarmSampler(SapoConfig(local_groups=0, external_groups=1), q, seed=3)
    index = 0
    for _ in range(5):  # ten quiet minutes: the honest peer's groups, trained on
        assert q.offer("honest", [make_group(index)]) == 1
        index += 1
        assert [g.origin for g in s.compose(0, []).groups] == ["honest"]
        clock.now += 120
    trained = 0
    for r in range(1, 11):
        assert q.offer("honest", [make_group(index)]) == 1
        index += 1
        for k in range(5):  # each Sybil 20 valid groups, 100 in all: over the bound
            q.offer(f"sybil{k}", [make_group(20 * r + n, seed=100 + k) for n in range(20)])
        assert len(q) == 64 and q.per_peer()["honest"] == 1
        trained += sum(g.origin == "honest" for g in s.compose(r, []).groups)
        clock.now += 6
    assert trained == 10 and q.stats.evicted["full"] > 0

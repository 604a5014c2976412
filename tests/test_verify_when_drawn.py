"""Verification when drawn (``sapo.verify: when_drawn``): arrival does only the cheap
checks, the full check runs on the groups the sampler takes, nothing unverified is
trained, and peers' verdicts reach their scores in either mode."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from typing import Any

import pytest

import swarmnode.share.ingest as ingest
from swarmnode.config import SapoConfig
from swarmnode.learn.groups import ItemRef
from swarmnode.learn.tasks import HELDOUT_SEED
from swarmnode.share.ingest import Catalog, IngestQueue
from swarmnode.share.peerscore import PeerScores
from swarmnode.share.sampler import MAX_DRAWS_PER_SLOT, SwarmSampler
from tests.helpers import CFG, SPEC, Clock, make_group, score


@pytest.fixture
def regenerations(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """Counts the items ingestion regenerates (the expensive step)."""
    calls: Counter[str] = Counter()
    real = ingest.regenerate

    def counting(ref: ItemRef) -> dict[str, Any]:
        calls["n"] += 1
        return real(ref)

    monkeypatch.setattr(ingest, "regenerate", counting)
    return calls


def make_queue(clock: Clock, verify: str, scores: PeerScores | None = None) -> IngestQueue:
    sapo = SapoConfig(queue_groups=256, max_peer_share=1.0, verify=verify)  # type: ignore[arg-type]
    return IngestQueue(
        sapo, Catalog([SPEC]), score, clock=clock, verdicts=scores.report if scores else None
    )


def forged(index: int) -> Any:
    g = make_group(index)
    g.question = g.question + " (altered)"
    return g


def test_arrival_runs_only_the_cheap_checks(regenerations: Counter[str]) -> None:
    clock = Clock()
    q = make_queue(clock, "when_drawn")
    honest = [make_group(i) for i in range(50)]
    claims_flat = make_group(60, claimed=[0.0, 0.0])  # the sender itself says: no signal
    out_of_catalog = replace(make_group(61), ref=ItemRef("not_a_dataset", CFG, 7, 1))
    heldout = make_group(62, seed=HELDOUT_SEED)
    stale = make_group(63, created=clock.now - 10**6)
    kept = q.offer("peerA", [*honest, claims_flat, out_of_catalog, heldout, stale, forged(64)])
    assert kept == 51  # the 50 honest groups and the forged one: both look fine so far
    assert regenerations["n"] == 0
    assert q.stats.rejected == {"no_signal": 1, "out_of_catalog": 1, "heldout": 1, "stale": 1}
    assert q.stats.unverified == 51 and q.report()["ingest_unverified"] == 51
    assert q.offer("peerB", [make_group(3)]) == 0  # dedup still on arrival
    assert q.stats.rejected["duplicate"] == 1


def test_take_verifies_and_never_returns_what_fails(regenerations: Counter[str]) -> None:
    clock = Clock()
    scores = PeerScores(clock=clock)
    q = make_queue(clock, "when_drawn", scores)
    liar = make_group(2, right=1, wrong=1, claimed=[0.0, 1.0])  # true group, false claims
    flat_in_truth = make_group(3, right=0, wrong=2, claimed=[1.0, 0.0])
    q.offer("peerA", [make_group(1), liar, flat_in_truth, forged(4)])
    taken = q.take([k for k, _ in q.snapshot()])
    assert regenerations["n"] == 4
    assert [e.group.ref.index for e in taken] == [1, 2]
    assert all(e.verified and e.verified_when_drawn for e in taken)
    assert taken[1].group.rewards == [1.0, 0.0] and not taken[1].claimed_match  # ours
    assert q.stats.rejected == {"no_signal": 1, "question_mismatch": 1}
    assert q.stats.late_verified == 2 and q.stats.claims_false == 2 and len(q) == 0
    verdicts = scores.snapshot()["peerA"]["verdicts"]
    assert verdicts == {"accepted": 2, "failed_verification": 1, "false_claim": 2}


def test_sampler_verifies_about_j_groups_whatever_is_queued(
    regenerations: Counter[str],
) -> None:
    clock = Clock()
    q = make_queue(clock, "when_drawn")
    for p in range(20):  # 20 peers, 10 groups each: 200 queued, unverified
        q.offer(f"peer{p}", [make_group(10 * p + k) for k in range(10)])
    assert len(q) == 200 and regenerations["n"] == 0
    s = SwarmSampler(SapoConfig(local_groups=0, external_groups=3), q, seed=1)
    comp = s.compose(1, [])
    assert comp.external == 3 and comp.shortfall == 0
    assert regenerations["n"] == 3 and len(q) == 197


def test_a_forger_costs_bounded_tries_then_a_shortfall(regenerations: Counter[str]) -> None:
    clock = Clock()
    q = make_queue(clock, "when_drawn")
    q.offer("forger", [forged(i) for i in range(100)])
    q.offer("honest", [make_group(500)])
    s = SwarmSampler(SapoConfig(local_groups=0, external_groups=2), q, seed=2)
    comp = s.compose(1, [])
    ext = [g for g in comp.groups if not g.is_local]
    assert all(g.origin == "honest" for g in ext)  # nothing forged is ever trained
    assert regenerations["n"] <= MAX_DRAWS_PER_SLOT * 2
    assert comp.external + comp.shortfall == 2


def test_adaptive_trust_moves_when_a_drawn_group_is_verified() -> None:
    clock = Clock()
    q = make_queue(clock, "when_drawn")
    q.offer("liar", [make_group(i, claimed=[0.0, 1.0]) for i in range(4)])
    s = SwarmSampler(SapoConfig(mode="adaptive", local_groups=0, external_groups=4), q, seed=3)
    assert s.peer_trust == {}
    comp = s.compose(1, [])
    assert comp.external == 4
    assert s.peer_trust["liar"] == pytest.approx(0.9**4)


@pytest.mark.parametrize("verify", ["on_arrival", "when_drawn"])
def test_verdicts_reach_the_scores_once(verify: str) -> None:
    clock = Clock()
    scores = PeerScores(clock=clock)
    q = make_queue(clock, verify, scores)
    q.offer("honest", [make_group(i) for i in range(3)])
    q.offer("liar", [forged(10), forged(11)])
    q.take([k for k, _ in q.snapshot()])
    q.take([k for k, _ in q.snapshot()])  # nothing left: nothing judged twice
    snap = scores.snapshot()
    assert snap["honest"]["verdicts"] == {"accepted": 3}
    assert snap["liar"]["verdicts"] == {"failed_verification": 2}
    assert scores.score("honest") > 0 > scores.score("liar")


def test_when_drawn_refuses_group_completion() -> None:
    from swarmnode.config import ConfigError, parse_config

    with pytest.raises(ConfigError, match=r"sapo\.verify"):
        parse_config({"sapo": {"verify": "when_drawn", "complete_groups": True}})

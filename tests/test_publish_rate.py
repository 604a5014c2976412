"""PublishRate: a swarm of nodes each following it hears about its target rate,
whatever the swarm's size; a small swarm publishes every round."""

from __future__ import annotations

import pytest

from swarmnode.share.publish_rate import OwnPace, PublishRate


def simulate(n: int, target: float, round_s: float = 10.0, rounds: int = 60) -> list[float]:
    """n nodes with synchronous rounds; returns each node's heard rate (msgs/s) over
    the last 10 rounds."""
    now = [0.0]
    nodes = [PublishRate(target, f"peer-{i}", clock=lambda: now[0]) for i in range(n)]
    heard = [0] * n
    tail_start = [0] * n
    for r in range(1, rounds + 1):
        for i, node in enumerate(nodes):
            node.observe(heard[i])
        sent = [node.publish(r) for node in nodes]
        total = sum(sent)
        for i in range(n):
            heard[i] += total - sent[i]
        now[0] += round_s
        if r == rounds - 10:
            tail_start = list(heard)
    return [(h - s) / (10 * round_s) for h, s in zip(heard, tail_start, strict=True)]


@pytest.mark.parametrize("n", [300, 2000])
def test_a_large_swarm_settles_near_the_target(n: int) -> None:
    rates = simulate(n, target=20.0)
    mean = sum(rates) / len(rates)
    assert 10.0 <= mean <= 30.0, mean  # unthrottled it would be n / 10 msgs/s


def test_a_small_swarm_publishes_every_round() -> None:
    rates = simulate(50, target=20.0)  # 49 peers / 10 s = 4.9 msgs/s < 20
    assert all(r == pytest.approx(4.9) for r in rates)


def test_probability_is_bounded_and_the_coin_is_fixed_per_round() -> None:
    now = [0.0]
    gate = PublishRate(1.0, "me", p_min=0.1, clock=lambda: now[0])
    for k in range(20):  # 1,000 msgs/s heard: p falls to its floor, never below
        gate.observe(k * 10_000)
        now[0] += 10.0
    assert gate.p == pytest.approx(0.1)
    assert [gate.publish(r) for r in range(50)] == [gate.publish(r) for r in range(50)]
    assert 1 <= sum(gate.publish(r) for r in range(200)) <= 45
    silent = PublishRate(1.0, "me", clock=lambda: now[0])
    silent.observe(0)
    now[0] += 30.0
    silent.observe(0)  # nothing heard: p stays at 1
    assert silent.p == 1.0


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError):
        PublishRate(0.0, "me")
    with pytest.raises(ValueError):
        PublishRate(1.0, "me", p_min=0.0)


def test_own_pace_keeps_under_half_of_what_peers_accept() -> None:
    now = [0.0]
    pace = OwnPace(msgs_per_s=5.0, msgs_burst=20.0, groups_per_s=32.0, clock=lambda: now[0])
    admitted = 0
    for _ in range(200):  # 200 rounds of 4 groups, 0.1 s apart: 10 rounds a second
        admitted += pace.admit(4)
        now[0] += 0.1
    # 20 s at 2.5 msgs/s plus a burst of 10; the groups (4 a round) stay under 16/s
    assert 50 <= admitted <= 61
    assert admitted * 4 / 20.0 <= 16.0 + 10 * 4 / 20.0


def test_own_pace_refuses_nothing_at_a_normal_round_time() -> None:
    now = [0.0]
    pace = OwnPace(5.0, 20.0, 32.0, clock=lambda: now[0])
    for _ in range(100):  # a round every 2 s, 16 groups each
        assert pace.admit(16)
        now[0] += 2.0


def test_own_pace_bills_large_rounds_and_split_messages_as_debt() -> None:
    now = [0.0]
    pace = OwnPace(5.0, 20.0, 32.0, clock=lambda: now[0])
    assert pace.admit(48)  # a full bucket admits one large round: 32 groups of debt
    assert not pace.admit(1)  # nothing until the debt is paid at 16 groups/s
    now[0] += 2.0
    assert not pace.admit(1)
    now[0] += 0.1
    assert pace.admit(1)
    pace.charge_extra_messages(30)  # that round went out as 31 messages
    now[0] += 1.0
    assert not pace.admit(1)  # 2.5 msgs/s pays 30 - 9 tokens back in about 8.4 s
    now[0] += 8.0
    assert pace.admit(1)


def test_own_pace_refuses_a_bad_share() -> None:
    with pytest.raises(ValueError):
        OwnPace(5.0, 20.0, 32.0, share=0.0)

"""PublishRate: a swarm of nodes each following it hears about its target rate,
whatever the swarm's size; a small swarm publishes every round."""

from __future__ import annotations

import pytest

from swarmnode.share.publish_rate import PublishRate


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

"""Self-replay (sapo.self_replay): a bounded buffer of the node's own groups with signal
fills only the update slots its current groups leave empty, and only their
better-than-group completions are trained."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import random
from pathlib import Path

import pytest

from swarmnode.config import SapoConfig, parse_config
from swarmnode.learn.grpo import TokenizedGroup
from swarmnode.learn.replay import ReplayBuffer
from swarmnode.node import Node
from swarmnode.share.sampler import SwarmSampler
from tests.helpers import Clock, make_group, tiny_config, wait_for
from tests.test_packed_update import _groups, _step, _trainer


def test_only_groups_with_signal_enter_and_the_buffer_is_bounded() -> None:
    clock = Clock()
    buf = ReplayBuffer(size=3, uses=2, freshness_s=60, clock=clock)
    peer = dataclasses.replace(make_group(9, created=clock.now), origin="peer")
    flat = make_group(8, right=2, wrong=0, created=clock.now)  # no signal
    assert buf.add([peer, flat]) == 0 and len(buf) == 0
    assert buf.add([make_group(i, created=clock.now) for i in range(5)]) == 5
    assert len(buf) == 3 and buf.dropped == 2
    drawn = buf.draw(random.Random(0), 10)
    assert sorted(g.ref.index for g in drawn) == [2, 3, 4]  # the newest three
    assert all(g.is_replay and not g.is_local and not g.is_peer for g in drawn)


def test_uses_freshness_and_distinct_items() -> None:
    clock = Clock()
    buf = ReplayBuffer(size=10, uses=2, freshness_s=60, clock=clock)
    buf.add([make_group(1, created=clock.now), make_group(1, created=clock.now)])  # one item
    buf.add([make_group(2, created=clock.now)])
    rng = random.Random(0)
    first = buf.draw(rng, 5, exclude={make_group(2).ref.key})
    assert [g.ref.index for g in first] == [1]  # one group per item, item 2 excluded
    draws = [buf.draw(rng, 5) for _ in range(6)]
    assert all(len({g.ref.key for g in d}) == len(d) for d in draws)  # distinct items
    assert 1 + sum(len(d) for d in draws) == 3 * 2 and draws[-1] == []  # 2 uses each
    buf.add([make_group(3, created=clock.now)])
    clock.now += 61
    assert buf.draw(rng, 5) == [] and buf.expired == 1


def sampler(replay: ReplayBuffer | None, local: int = 4, external: int = 0) -> SwarmSampler:
    return SwarmSampler(
        SapoConfig(local_groups=local, external_groups=external), None, seed=1, replay=replay
    )


def test_replay_fills_only_the_slots_own_groups_leave_empty() -> None:
    clock = Clock()
    buf = ReplayBuffer(size=16, uses=1, freshness_s=60, clock=clock)
    buf.add([make_group(i, created=clock.now) for i in range(10, 16)])
    signal = [make_group(i, created=clock.now) for i in range(2)]
    flat = [make_group(i, right=2, wrong=0, created=clock.now) for i in range(2, 4)]
    comp = sampler(buf).compose(1, signal + flat)
    assert comp.replayed == 2 and comp.local == 2 and len(comp.groups) == 4  # B = 4
    assert [g.is_replay for g in comp.groups] == [False, False, True, True]
    assert all(g.has_signal for g in comp.groups)
    full = sampler(buf).compose(2, [make_group(i, created=clock.now) for i in range(4)])
    assert full.replayed == 0 and len(full.groups) == 4  # nothing empty: nothing replayed
    off = sampler(None).compose(3, signal + flat)
    assert off.replayed == 0 and off.groups == signal + flat


def test_replayed_groups_train_only_their_better_than_group_completions(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    groups = [
        dataclasses.replace(g, external=False) for g in _groups(_trainer(tiny_model_dir, tmp_path))
    ]
    for g in groups:
        g.sender_logprobs = None
    replayed = [dataclasses.replace(g, replay=True) for g in groups]
    negative = sum(
        len(c) for g in groups for c, a in zip(g.completion_ids, g.advantages, strict=True) if a < 0
    )
    # external_negatives on trains peers' wrong answers; a replayed group's never.
    with_negatives = _trainer(tiny_model_dir, tmp_path / "a", external_negatives=True)
    stats, _ = _step(with_negatives, replayed)
    assert stats.tokens_masked == negative > 0
    as_peers = [dataclasses.replace(g, external=True) for g in groups]
    peer_stats, _ = _step(_trainer(tiny_model_dir, tmp_path / "b"), as_peers)
    assert stats.loss == pytest.approx(peer_stats.loss, rel=1e-4, abs=1e-6)
    own: list[TokenizedGroup] = groups
    assert _step(with_negatives, own)[0].tokens_masked == 0


def test_a_lone_node_with_self_replay_logs_what_it_trained(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    raw = tiny_config(
        tiny_model_dir,
        tmp_path / "d",
        node={"max_rounds": 6},
        train={"learning_rate": 0.001, "format_reward_weight": 0.5},
        sapo={"self_replay": True, "local_groups": 2},
        checkpoint={"every_rounds": 1000},
    )
    node = Node(parse_config(raw), echo=False)

    async def main() -> None:
        run = asyncio.create_task(node.run())
        await wait_for(run.done, "six rounds", 240)
        await run

    asyncio.run(main())
    data = tmp_path / "d"
    rounds = [json.loads(line) for line in (data / "metrics.jsonl").read_text().splitlines()]
    items = [json.loads(line) for line in (data / "trained_items.jsonl").read_text().splitlines()]
    assert len(rounds) == 6
    assert {"round", "source", "dataset", "config", "seed", "index"} == set(items[0])
    assert all(it["source"] in ("local", "replay") for it in items)
    assert all("size" in it["config"] for it in items)
    trained = sum(r["groups_trained"] for r in rounds)
    assert len(items) == trained  # one line per group trained on
    assert sum(r["replay_groups"] for r in rounds) == sum(it["source"] == "replay" for it in items)
    assert all(r["groups_trained"] <= 2 for r in rounds)  # B = 2

"""Importance weights for peers' completions: wire v3 log-probs, bounds, fallbacks.

Hostile and old-version payloads are built here with msgpack directly, never with
swarmnode's encoder.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import msgpack
import pytest
import torch

from swarmnode.config import parse_config
from swarmnode.learn.groups import RolloutGroup
from swarmnode.learn.grpo import TokenizedGroup, grpo_step, importance_weights
from swarmnode.learn.model import load_policy
from swarmnode.learn.trainer import Trainer
from swarmnode.share.wire import WireError, decode_batch, encode_batch
from tests.helpers import tiny_config


def _group(version: int, **extra: object) -> dict[str, object]:
    g: dict[str, object] = {
        "ref": {"dataset": "chain_sum", "config": {"size": 10}, "seed": 1, "index": 2},
        "question": "1 + 2 =",
        "completions": ["3", "4"],
        "rewards": [1.0, 0.0],
        "model": "m",
        "created": time.time(),
    }
    if version >= 2:
        g["finished"] = [True, False]
    g.update(extra)
    return g


def _payload(version: int, **extra: object) -> bytes:
    obj = {"v": version, "swarm": "s", "round": 1, "groups": [_group(version, **extra)]}
    return bytes(msgpack.packb(obj, use_bin_type=True))


# ---- the wire --------------------------------------------------------------------


def test_v3_carries_logprobs_and_older_versions_still_read() -> None:
    got = decode_batch(_payload(3, logprobs=[-1.5, None])).groups[0]
    assert got.logprobs == [-1.5, None]
    assert decode_batch(_payload(2)).groups[0].logprobs is None
    assert decode_batch(_payload(1)).groups[0].logprobs is None


@pytest.mark.parametrize(
    ("extra", "reason"),
    [
        ({}, "schema"),  # v3 without logprobs
        ({"logprobs": [-1.0]}, "value"),  # one for two completions
        ({"logprobs": [0.5, -1.0]}, "value"),  # a probability above 1
        ({"logprobs": [float("nan"), -1.0]}, "value"),
        ({"logprobs": [-1e7, -1.0]}, "value"),  # below the floor
        ({"logprobs": ["-1", -1.0]}, "schema"),
        ({"logprobs": [True, -1.0]}, "schema"),
    ],
)
def test_bad_logprobs_are_refused(extra: dict[str, object], reason: str) -> None:
    with pytest.raises(WireError) as err:
        decode_batch(_payload(3, **extra))
    assert err.value.reason == reason


def test_v2_refuses_logprobs_and_the_encoder_picks_the_version() -> None:
    with pytest.raises(WireError, match="schema"):
        decode_batch(_payload(2, logprobs=[-1.0, -2.0]))
    g = decode_batch(_payload(2)).groups[0]
    assert msgpack.unpackb(encode_batch("s", 1, [g]))["v"] == 2  # nothing to add: v2
    g.logprobs = [-1.0, None]
    data = encode_batch("s", 1, [g])
    assert msgpack.unpackb(data)["v"] == 3
    assert decode_batch(data).groups[0].logprobs == [-1.0, None]


# ---- the weights -----------------------------------------------------------------


def test_weights_are_truncated_and_unknown_senders_weigh_one() -> None:
    gen = torch.Generator().manual_seed(0)
    own = -torch.rand(200, generator=gen) * 50
    sender = [float(x) for x in -torch.rand(200, generator=gen) * 50]
    for cap in (0.5, 1.0, 2.0):
        w = importance_weights(own, sender, cap)
        assert float(w.max()) <= cap and float(w.min()) >= 0
        expect = [min(cap, math.exp(o - s)) for o, s in zip(own.tolist(), sender, strict=True)]
        assert w.tolist() == pytest.approx(expect, rel=1e-5, abs=1e-12)
    assert importance_weights(own[:3], [None, None, None], 1.0).tolist() == [1.0, 1.0, 1.0]


def _trainer(model_dir: Path, tmp_path: Path, **train: object) -> Trainer:
    cfg = parse_config(tiny_config(model_dir, tmp_path, train=dict(train)))
    torch.manual_seed(0)
    return Trainer(cfg, load_policy(cfg.model, seed=0))


def _loss(trainer: Trainer, group: TokenizedGroup) -> tuple[float, int, float]:
    """Loss of one step on ``group`` from the same weights (the step is undone)."""
    model = trainer.policy.model
    before = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
    stats = grpo_step(model, trainer.optimizer, [group], trainer.cfg.train, trainer.pad_id)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if n in before:
                p.copy_(before[n])
    return stats.loss, stats.weighted, stats.weight_sum


def test_own_groups_weigh_one_and_peers_are_weighted(tiny_model_dir: Path, tmp_path: Path) -> None:
    # peers' negative rows trained too, so that only the weight differs between steps
    trainer = _trainer(
        tiny_model_dir, tmp_path, importance_weights="sequence", external_negatives=True
    )
    local = trainer.rollout(1)[0][0]
    assert local.logprobs is not None and all(lp is not None and lp <= 0 for lp in local.logprobs)
    adv = [1.0 if i % 2 else -1.0 for i in range(len(local.completions))]
    ids = local.completion_ids or []
    plain = TokenizedGroup(trainer.prompt_ids(local.question), ids, adv)
    base_loss, n, _ = _loss(trainer, plain)
    assert n == 0
    # Our own group: on-policy, never weighted, whatever log-probs it holds.
    own = TokenizedGroup(plain.prompt_ids, ids, adv, sender_logprobs=[0.0] * len(ids))
    assert _loss(trainer, own) == (base_loss, 0, 0.0)
    # A peer that sent no log-probs: weight 1, the plain loss.
    unknown = TokenizedGroup(
        plain.prompt_ids, ids, adv, external=True, sender_logprobs=[None] * len(ids)
    )
    assert _loss(trainer, unknown)[:2] == (pytest.approx(base_loss), 0)
    # A peer for which each completion had probability 1: weight = our probability < 1.
    sure = TokenizedGroup(
        plain.prompt_ids, ids, adv, external=True, sender_logprobs=[0.0] * len(ids)
    )
    loss, n, total = _loss(trainer, sure)
    assert n == len(ids) and 0 < total < n
    assert abs(loss) < abs(base_loss)
    # A peer that found them very unlikely: the weight is truncated at the cap (1).
    unlikely = TokenizedGroup(
        plain.prompt_ids, ids, adv, external=True, sender_logprobs=[-1e6] * len(ids)
    )
    loss, n, total = _loss(trainer, unlikely)
    assert (n, total) == (len(ids), pytest.approx(float(len(ids))))
    assert loss == pytest.approx(base_loss)


def test_weights_fall_back_for_other_models_cut_completions_and_off(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    trainer = _trainer(tiny_model_dir, tmp_path, importance_weights="sequence")
    ours = RolloutGroup(
        trainer.tasks.sample(1, 1)[0],
        "q",
        ["1 2 3", "x " * 500],  # the second is longer than max_new_tokens: cut here
        [1.0, 0.0],
        origin="peer",
        model=trainer.policy.name,
        finished=[True, True],
        logprobs=[-3.0, -4.0],
    )
    _, lps = trainer._peer_tokens(ours)
    assert lps == [-3.0, None]
    other = RolloutGroup(**{**ours.__dict__, "model": "someone/else-7b"})
    assert trainer._peer_tokens(other)[1] is None
    old_wire = RolloutGroup(**{**ours.__dict__, "logprobs": None})
    assert trainer._peer_tokens(old_wire)[1] is None
    off = _trainer(tiny_model_dir, tmp_path / "off")
    assert off._peer_tokens(ours)[1] is None
    assert off.rollout(1)[0][0].logprobs is None  # off: nothing extra on the wire


def test_verified_peer_groups_keep_the_senders_logprobs() -> None:
    from swarmnode.config import SapoConfig
    from swarmnode.share.ingest import Catalog, IngestQueue
    from tests.helpers import SPEC, Clock, make_group, score

    q = IngestQueue(SapoConfig(queue_groups=8), Catalog([SPEC]), score, clock=Clock())
    g = make_group(1)
    g.logprobs = [-float(i) for i in range(len(g.completions))]
    assert q.offer("peerA", [g]) == 1
    ((_key, entry),) = q.snapshot()
    assert entry.group.logprobs == g.logprobs

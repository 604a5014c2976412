"""The packed update (rows of several groups in one forward, each with its own prompt)
gives the per-group update's loss and gradients, whole or split into micro-batches."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from swarmnode.config import parse_config
from swarmnode.learn.grpo import StepStats, TokenizedGroup, grpo_step
from swarmnode.learn.model import load_policy
from swarmnode.learn.trainer import Trainer
from tests.helpers import tiny_config


def _trainer(model_dir: Path, tmp_path: Path, **train: object) -> Trainer:
    cfg = parse_config(tiny_config(model_dir, tmp_path, train=dict(train)))
    torch.manual_seed(0)
    return Trainer(cfg, load_policy(cfg.model, seed=0))


def _groups(trainer: Trainer) -> list[TokenizedGroup]:
    """Groups with different prompts and lengths: own, a peer's with log-probs, and a
    peer's with a negative-advantage row (the external mask applies to it)."""
    gen = torch.Generator().manual_seed(3)
    vocab = int(trainer.policy.tokenizer.vocab_size) - 1

    def comps(n: int) -> list[list[int]]:
        lengths = torch.randint(1, 9, (n,), generator=gen).tolist()
        return [torch.randint(3, vocab, (k,), generator=gen).tolist() for k in lengths]

    q = ["1 + 2 =", "What is 7 + 8? Answer with a number only.", "9 + 9"]
    return [
        TokenizedGroup(trainer.prompt_ids(q[0]), comps(4), [1.0, -1.0, 0.5, -0.5]),
        TokenizedGroup(
            trainer.prompt_ids(q[1]),
            comps(3),
            [-1.0, 1.0, 0.0],
            external=True,
            sender_logprobs=[-3.0, None, -1.0],
        ),
        TokenizedGroup(trainer.prompt_ids(q[2]), comps(5), [-1.0, -1.0, 2.0, 0.0, 0.0], True),
        TokenizedGroup(trainer.prompt_ids(q[0]), comps(2), [0.0, 0.0]),  # no signal: skipped
    ]


def _step(
    trainer: Trainer, groups: list[TokenizedGroup], **kw: Any
) -> tuple[StepStats, dict[str, torch.Tensor]]:
    """One step's stats and gradients, from the same weights (the step is undone)."""
    model = trainer.policy.model
    before = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
    grads: dict[str, torch.Tensor] = {}
    step = trainer.optimizer.step

    def capture() -> None:  # the gradients just before the optimizer uses them
        for n, p in model.named_parameters():
            if p.grad is not None:
                grads[n] = p.grad.detach().clone()
        step()

    trainer.optimizer.step = capture  # type: ignore[method-assign]
    try:
        stats = grpo_step(model, trainer.optimizer, groups, trainer.cfg.train, trainer.pad_id, **kw)
    finally:
        trainer.optimizer.step = step  # type: ignore[method-assign]
        with torch.no_grad():
            for n, p in model.named_parameters():
                if n in before:
                    p.copy_(before[n])
    return stats, grads


@pytest.mark.parametrize("kl_coef", [0.0, 0.1])
def test_packed_matches_per_group(tiny_model_dir: Path, tmp_path: Path, kl_coef: float) -> None:
    trainer = _trainer(
        tiny_model_dir,
        tmp_path,
        importance_weights="sequence",
        external_min_prob=0.5,
        external_negatives=True,  # the mask, not the skip (tested below)
        kl_coef=kl_coef,
    )
    groups = _groups(trainer)
    plain, g_plain = _step(trainer, groups)
    packed, g_packed = _step(trainer, groups, packed=True)
    assert plain.groups_trained == packed.groups_trained == 3
    assert plain.groups_skipped == packed.groups_skipped == 1
    for field in ("tokens_trained", "tokens_masked", "weighted"):
        assert getattr(plain, field) == getattr(packed, field), field
    assert plain.tokens_masked > 0 and plain.weighted == 2
    assert packed.loss == pytest.approx(plain.loss, rel=1e-4, abs=1e-6)
    assert packed.kl == pytest.approx(plain.kl, rel=1e-3, abs=1e-7)
    assert g_plain.keys() == g_packed.keys() and g_plain
    for name, g in g_plain.items():
        torch.testing.assert_close(g_packed[name], g, rtol=1e-3, atol=1e-6)
    # Packed micro-batches of at most 12 padded completion tokens: the same step again.
    split, g_split = _step(trainer, groups, packed=True, micro_batch_tokens=12)
    assert split.loss == pytest.approx(plain.loss, rel=1e-4, abs=1e-6)
    for name, g in g_plain.items():
        torch.testing.assert_close(g_split[name], g, rtol=1e-3, atol=1e-6)


def test_auto_packs_on_cuda_only(tiny_model_dir: Path, tmp_path: Path) -> None:
    assert not _trainer(tiny_model_dir, tmp_path).packed  # auto on a CPU
    assert _trainer(tiny_model_dir, tmp_path, packed_update="on").packed
    assert not _trainer(tiny_model_dir, tmp_path, packed_update="off").packed


@pytest.mark.parametrize("packed", [False, True])
def test_no_external_negatives_is_masking_them_all(
    tiny_model_dir: Path, tmp_path: Path, packed: bool
) -> None:
    """``external_negatives: false`` skips peers' negative rows: the same step as a mask
    of every one of their tokens (same denominator), own groups untouched."""
    groups = _groups(_trainer(tiny_model_dir, tmp_path))
    negative = sum(
        len(c)
        for g in groups
        if g.external
        for c, a in zip(g.completion_ids, g.advantages, strict=True)
        if a < 0
    )
    for g in groups:
        g.sender_logprobs = None  # no importance weights: the two steps differ only by mask
    off = _trainer(tiny_model_dir, tmp_path / "off")  # the default: external_negatives off
    skipped, g_skipped = _step(off, groups, packed=packed)
    masked, g_masked = _step(
        _trainer(
            tiny_model_dir, tmp_path / "mask", external_min_prob=0.999999, external_negatives=True
        ),
        groups,
        packed=packed,
    )
    assert skipped.tokens_masked == masked.tokens_masked == negative > 0
    assert skipped.tokens_trained == masked.tokens_trained
    assert skipped.loss == pytest.approx(masked.loss, rel=1e-4, abs=1e-6)
    for name, g in g_masked.items():
        torch.testing.assert_close(g_skipped[name], g, rtol=1e-3, atol=1e-6)
    own = [g for g in groups if not g.external]
    assert _step(off, own, packed=packed)[0].tokens_masked == 0

"""The RL update on a tiny random model: LoRA learns, the base stays frozen."""

from __future__ import annotations

import math
from pathlib import Path

import torch

from swarmnode.config import parse_config
from swarmnode.learn.generate import inference_weights, sample
from swarmnode.learn.groups import RolloutGroup
from swarmnode.learn.grpo import completion_logprobs, group_advantages
from swarmnode.learn.model import load_policy
from swarmnode.learn.trainer import Trainer
from tests.helpers import tiny_config


def _trainer(model_dir: Path, tmp_path: Path, **train: object) -> Trainer:
    cfg = parse_config(tiny_config(model_dir, tmp_path, train=dict(train)))
    return Trainer(cfg, load_policy(cfg.model))


def _snapshot(model: torch.nn.Module, lora: bool) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in model.named_parameters() if ("lora_" in n) == lora}


def _with_signal(groups: list[RolloutGroup]) -> list[RolloutGroup]:
    """Random tiny models rarely answer right: give each group distinct rewards."""
    for g in groups:
        g.rewards = [float(i % 2) for i in range(len(g.rewards))]
    return groups


def test_lora_trains_and_base_is_frozen(tiny_model_dir: Path, tmp_path: Path) -> None:
    trainer = _trainer(tiny_model_dir, tmp_path)
    model = trainer.policy.model
    base, lora = _snapshot(model, False), _snapshot(model, True)
    for r in range(1, 4):
        groups, gen = trainer.rollout(r)
        assert gen.tokens > 0 and len(groups) == 2
        assert all(len(g.completions) == 4 for g in groups)
        stats = trainer.update(_with_signal(groups))
        assert stats.groups_trained == 2 and math.isfinite(stats.loss)
    assert any(not torch.equal(lora[n], p) for n, p in model.named_parameters() if n in lora)
    assert all(torch.equal(base[n], p) for n, p in model.named_parameters() if n in base)


def test_equal_rewards_are_skipped(tiny_model_dir: Path, tmp_path: Path) -> None:
    trainer = _trainer(tiny_model_dir, tmp_path)
    groups, _ = trainer.rollout(1)
    groups[0].rewards = [1.0] * 4
    groups[1].rewards = [0.0, 1.0, 0.0, 1.0]
    stats = trainer.update(groups)
    assert (stats.groups_trained, stats.groups_skipped) == (1, 1)
    groups[1].rewards = [0.5] * 4
    before = _snapshot(trainer.policy.model, True)
    stats = trainer.update(groups)
    assert (stats.groups_trained, stats.groups_skipped) == (0, 2)
    assert stats.tokens_trained == 0
    after = _snapshot(trainer.policy.model, True)  # no useful group: no optimizer step
    assert before.keys() == after.keys() and all(torch.equal(before[n], after[n]) for n in before)


def test_kl_and_micro_batches(tiny_model_dir: Path, tmp_path: Path) -> None:
    trainer = _trainer(tiny_model_dir, tmp_path, kl_coef=0.1, micro_batch_size=3)
    groups = _with_signal(trainer.rollout(1)[0])
    first = trainer.update(groups)
    second = trainer.update(groups)
    assert first.kl == 0.0 or first.kl < 1e-6  # policy == base before the first step
    assert second.kl > 0.0 and math.isfinite(second.loss)


def test_shared_prefix_logprobs_match_sampling(tiny_model_dir: Path, tmp_path: Path) -> None:
    """Generation (merged LoRA, KV cache copied G times) and training (prompt once,
    completions on its cache) compute the same token log-probabilities as a plain
    full-sequence forward pass."""
    trainer = _trainer(tiny_model_dir, tmp_path)
    model, tok = trainer.policy.model, trainer.policy.tokenizer
    trainer.update(_with_signal(trainer.rollout(1)[0]))  # make LoRA non-zero
    prompts = [trainer.prompt_ids("What is 2 + 3?"), trainer.prompt_ids("Sort 3, 1, 2.")]
    with inference_weights(model):  # LoRA merged, in the model's own dtype
        s = sample(
            model, prompts, 3, max_new_tokens=6, eos_ids=[tok.eos_token_id], pad_id=tok.pad_token_id
        )
    model.eval()
    for q, prompt in enumerate(prompts):
        comps = s.token_ids[q * 3 : (q + 1) * 3]
        with torch.no_grad():
            logp, mask = completion_logprobs(model, prompt, comps, tok.pad_token_id)
        for i, c in enumerate(comps):
            full = torch.tensor([prompt + c])
            with torch.no_grad():
                ref = model(input_ids=full).logits[0, len(prompt) - 1 : -1].log_softmax(-1)
            expect = ref.gather(-1, torch.tensor(c)[:, None]).squeeze(-1)
            torch.testing.assert_close(logp[i, : len(c)], expect, atol=1e-4, rtol=1e-4)
            torch.testing.assert_close(
                torch.tensor(s.logprobs[q * 3 + i]), expect, atol=1e-4, rtol=1e-4
            )
            assert mask[i].sum() == len(c)


def test_group_advantages_normalised() -> None:
    adv = group_advantages([1.0, 0.0, 0.0, 1.0])
    assert abs(sum(adv)) < 1e-9 and all(abs(abs(a) - 1) < 1e-3 for a in adv)


def test_partial_credit_noise_is_not_signal(tiny_model_dir: Path, tmp_path: Path) -> None:
    """A 0.01 partial-credit spread must not become +-1 advantages (SIGNAL_MIN_STD)."""
    assert group_advantages([0.01, 0.0, 0.0, 0.0]) == [0.0] * 4
    noisy = RolloutGroup(None, "q", ["a"] * 8, [0.01] + [0.0] * 7)  # type: ignore[arg-type]
    one_formatted = RolloutGroup(None, "q", ["a"] * 8, [0.25] + [0.0] * 7)  # type: ignore[arg-type]
    assert not noisy.has_signal and one_formatted.has_signal
    trainer = _trainer(tiny_model_dir, tmp_path)
    groups, _ = trainer.rollout(1)
    groups[0].rewards = [0.26, 0.25, 0.25, 0.25]
    groups[1].rewards = [1.0, 0.0, 0.0, 1.0]
    stats = trainer.update(groups)
    assert (stats.groups_trained, stats.groups_skipped) == (1, 1)


def test_local_groups_flag_finished_and_peers_keep_it(tiny_model_dir: Path, tmp_path: Path) -> None:
    trainer = _trainer(tiny_model_dir, tmp_path)
    groups, _ = trainer.rollout(1)
    for g in groups:
        assert g.finished is not None and g.completion_ids is not None
        for ids, done in zip(g.completion_ids, g.finished, strict=True):
            assert done == (ids[-1] in trainer.eos_ids)
    eos = trainer.eos_ids[0]
    assert trainer.encode_completion("7 + 1", finished=True)[-1] == eos
    cut = trainer.encode_completion("7 + 1", finished=False)
    assert cut and eos not in cut  # a truncated text must not learn "stop here"


def test_peers_unlikely_negative_tokens_get_no_gradient(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    """External tokens with A < 0 below external_min_prob are masked; A > 0 never is."""
    trainer = _trainer(tiny_model_dir, tmp_path, external_min_prob=0.5, external_negatives=True)
    groups = _with_signal(trainer.rollout(1)[0])
    external = [
        RolloutGroup(
            g.ref, g.question, g.completions, g.rewards, origin="peer", finished=g.finished
        )
        for g in groups
    ]
    stats = trainer.update(external)
    negative_tokens = sum(
        len(trainer.encode_completion(c, f))
        for g in external
        for c, f, r in zip(g.completions, g.finished or [], g.rewards, strict=True)
        if r == 0.0
    )
    assert 0 < stats.tokens_masked <= negative_tokens  # a random tiny model is unsure
    assert trainer.update(groups).tokens_masked == 0  # local groups: on-policy, all kept
    off = _trainer(tiny_model_dir, tmp_path / "off", external_min_prob=0.0, external_negatives=True)
    assert off.update(external).tokens_masked == 0


def test_a_stop_lands_inside_a_groups_backward(tiny_model_dir: Path, tmp_path: Path) -> None:
    """With a whole group per micro-batch, a stop asked after the first check still
    interrupts the pass at the next layer (forward or backward), before any step."""
    import pytest

    trainer = _trainer(tiny_model_dir, tmp_path)
    groups = _with_signal(trainer.rollout(1)[0])[:1]
    before = _snapshot(trainer.policy.model, True)
    calls: list[int] = []

    def stop_after_two_checks() -> bool:
        calls.append(1)
        return len(calls) > 2  # grpo's check before the micro-batch, one layer, then stop

    with pytest.raises(InterruptedError):
        trainer.update(groups, should_stop=stop_after_two_checks)
    after = _snapshot(trainer.policy.model, True)
    assert all(torch.equal(before[n], after[n]) for n in before)  # no optimizer step
    assert trainer.update(groups).groups_trained == 1  # the hooks are gone: trains again


def _logprobs_with_copies(
    model: torch.nn.Module, prompt: list[int], comps: list[list[int]], pad: int, t: float
) -> torch.Tensor:
    """The update's log-probs as computed before docs/memory.md: the full-vocabulary
    logits concatenated and divided (two more copies of them); the reference."""
    from transformers import DynamicCache

    from swarmnode.learn.generate import with_cache

    n, width = len(comps), max(len(c) for c in comps)
    comp = torch.full((n, width), pad, dtype=torch.long)
    mask = torch.zeros((n, width), dtype=torch.long)
    for i, c in enumerate(comps):
        comp[i, : len(c)], mask[i, : len(c)] = torch.tensor(c), 1
    cache = DynamicCache()
    out = model(input_ids=torch.tensor([prompt]), **with_cache(model, cache), logits_to_keep=1)
    cache.batch_repeat_interleave(n)
    first = out.logits[:, -1:].expand(n, -1, -1)
    p = len(prompt)
    out = model(
        input_ids=comp[:, :-1],
        attention_mask=torch.cat([mask.new_ones((n, p)), mask[:, :-1]], dim=-1),
        position_ids=torch.arange(p, p + width - 1).expand(n, -1),
        **with_cache(model, cache),
    )
    logits = torch.cat([first, out.logits], dim=1).float() / t
    return logits.log_softmax(-1).gather(-1, comp[..., None]).squeeze(-1)


def test_update_logprobs_and_grads_unchanged_by_the_memory_saving(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    """completion_logprobs takes one softmax of the logits, in place of a concatenated
    and divided copy: the same log-probs and gradients, bit for bit."""
    trainer = _trainer(tiny_model_dir, tmp_path)
    model, pad = trainer.policy.model, trainer.pad_id
    trainer.update(_with_signal(trainer.rollout(1)[0]))  # make LoRA non-zero
    prompt = trainer.prompt_ids("What is 2 + 3?")
    gen = torch.Generator().manual_seed(0)
    for widths in ([5, 9, 1, 7], [4, 4, 4]):
        comps = [torch.randint(5, 300, (w,), generator=gen).tolist() for w in widths]
        for t in (1.0, 0.7):
            got = []
            for fn in (completion_logprobs, _logprobs_with_copies):
                model.zero_grad(set_to_none=True)
                out = fn(model, prompt, comps, pad, t)
                logp = out[0] if isinstance(out, tuple) else out
                logp.sum().backward()
                grads = [p.grad.clone() for p in trainer.policy.trainable_parameters()]
                got.append((logp.detach(), grads))
            (a, ga), (b, gb) = got
            assert torch.equal(a, b)
            assert all(torch.equal(x, y) for x, y in zip(ga, gb, strict=True))


def test_prompt_memo_is_bounded(tiny_model_dir: Path, tmp_path: Path) -> None:
    """The prompt-ids memo keeps the last PROMPT_CACHE questions, so a node's memory
    does not grow with the rounds (docs/memory.md); a recent question is a hit."""
    from swarmnode.learn.trainer import PROMPT_CACHE

    trainer = _trainer(tiny_model_dir, tmp_path)
    first = trainer.prompt_ids("What is 0 + 1?")
    for i in range(1, 3 * PROMPT_CACHE):
        assert trainer.prompt_ids(f"What is {i} + 1?")
        assert trainer.prompt_ids("What is 0 + 1?") is first  # kept: used every time
    assert len(trainer._prompt_cache) == PROMPT_CACHE
    assert "What is 1 + 1?" not in trainer._prompt_cache  # the oldest went first

"""The sampler draws from the right distribution, and agrees with training's log-probs."""

from __future__ import annotations

from pathlib import Path

import torch

from swarmnode.config import parse_config
from swarmnode.learn.generate import _pick, inference_weights, sample
from swarmnode.learn.grpo import completion_logprobs
from swarmnode.learn.model import load_policy
from swarmnode.learn.trainer import Trainer
from tests.helpers import tiny_config


def test_pick_matches_softmax_frequencies() -> None:
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0, -9.0]]).repeat(20_000, 1)
    gen = torch.Generator().manual_seed(0)
    for temperature in (1.0, 0.5):
        tokens, logp = _pick(logits, temperature, 1.0, gen)
        freq = torch.bincount(tokens, minlength=5).float() / len(tokens)
        expect = torch.softmax(logits[0] / temperature, -1)
        assert torch.allclose(freq, expect, atol=0.015), (freq, expect)
        assert torch.allclose(logp, expect.log()[tokens], atol=1e-5)


def test_top_p_keeps_the_nucleus() -> None:
    logits = torch.tensor([[3.0, 2.9, 0.0, -1.0]]).repeat(5000, 1)
    tokens, _ = _pick(logits, 1.0, 0.5, torch.Generator().manual_seed(1))
    assert set(tokens.tolist()) <= {0, 1}


def test_tempered_logprobs_agree(tiny_model_dir: Path, tmp_path: Path) -> None:
    cfg = parse_config(tiny_config(tiny_model_dir, tmp_path))
    trainer = Trainer(cfg, load_policy(cfg.model))
    model, tok = trainer.policy.model, trainer.policy.tokenizer
    prompt = trainer.prompt_ids("Calculate 2 + 3.")
    with inference_weights(model):
        s = sample(
            model,
            [prompt],
            4,
            max_new_tokens=6,
            eos_ids=[tok.eos_token_id],
            pad_id=tok.pad_token_id,
            temperature=0.7,
            generator=torch.Generator().manual_seed(0),
        )
    with torch.no_grad():
        logp, _ = completion_logprobs(model, prompt, s.token_ids, tok.pad_token_id, 0.7)
    for i, lp in enumerate(s.logprobs):
        torch.testing.assert_close(logp[i, : len(lp)], torch.tensor(lp), atol=1e-4, rtol=1e-4)


def test_bf16_sampling_restores_fp32_weights(tiny_model_dir: Path, tmp_path: Path) -> None:
    cfg = parse_config(tiny_config(tiny_model_dir, tmp_path))
    model = load_policy(cfg.model).model
    before = {n: p for n, p in model.named_parameters()}
    values = {n: p.detach().clone() for n, p in before.items()}
    with inference_weights(model, torch.bfloat16):
        dtypes = {p.dtype for n, p in model.named_parameters() if "lora_" not in n}
        assert dtypes == {torch.bfloat16}
    after = dict(model.named_parameters())
    assert all(after[n] is before[n] and torch.equal(after[n], values[n]) for n in before)


def test_bf16_sampling_holds_one_copy_of_the_weights(tiny_model_dir: Path, tmp_path: Path) -> None:
    """The sampling copy costs the bf16 weights once: tied embedding and head share one
    cast tensor, and no full-precision merge outlives its cast (docs/memory.md)."""
    import gc

    cfg = parse_config(tiny_config(tiny_model_dir, tmp_path))
    model = load_policy(cfg.model).model
    base = model.get_base_model()
    assert base.lm_head.weight is base.model.embed_tokens.weight  # the tiny llama is tied
    # named_parameters() lists a tied tensor once
    bf16_bytes = sum(
        p.numel() * 2 for n, p in model.named_parameters() if "lora_" not in n and p.dim() == 2
    )
    originals = {p.data_ptr() for p in model.parameters()}

    def live(dtype: torch.dtype) -> dict[int, torch.Tensor]:
        gc.collect()
        return {
            t.data_ptr(): t
            for t in gc.get_objects()
            if issubclass(type(t), torch.Tensor) and t.dtype == dtype and t.dim() == 2
        }

    with inference_weights(model, torch.bfloat16):
        assert base.lm_head.weight is base.model.embed_tokens.weight
        copies = live(torch.bfloat16)
        merges = [t for ptr, t in live(torch.float32).items() if ptr not in originals]
        assert sum(t.numel() * 2 for t in copies.values()) == bf16_bytes
        assert merges == []

"""Bounded cost per accepted peer group: peers' completions are cut to our own cap, and
the update's memory is bounded by ``train.micro_batch_tokens``, not by what peers send.

The RSS test runs in a fresh subprocess (peak RSS is per process) and measures how far
one 16 x 900-character peer group raises the peak above a round of the node's own
size (16 completions of ``rollout.max_new_tokens`` tokens). No wall-clock figures.
A control run that keeps twice our cap in one pass (the old code kept 4 x, no token
micro-batch) must exceed the budget, so the test can fail. Measured on a 2-core
machine: 3.3 MiB with the cut and the token micro-batch; 876 MiB keeping 4 x the cap.
"""

from __future__ import annotations

import json
import math
import random
import subprocess
import sys
from pathlib import Path

import torch

from swarmnode.config import parse_config
from swarmnode.learn.groups import ItemRef, RolloutGroup
from swarmnode.learn.model import load_policy
from swarmnode.learn.trainer import Trainer
from tests.helpers import tiny_config

RSS_BUDGET_MIB = 48  # how far one peer group may raise the peak above a round of our own
G, CAP = 16, 48  # the group's size and this node's rollout.max_new_tokens


def _trainer(model_dir: Path, tmp_path: Path, rollout: dict, train: dict) -> Trainer:
    cfg = parse_config(tiny_config(model_dir, tmp_path, rollout=rollout, train=train))
    return Trainer(cfg, load_policy(cfg.model))


def _peer_group(chars: int, n: int = G, seed: int = 0) -> RolloutGroup:
    rng = random.Random(seed)
    words = ["step", "answer", "12", "+", "7", "so", "the", "is", "=", "19", "then"]
    texts = [" ".join(rng.choice(words) for _ in range(chars))[:chars] for _ in range(n)]
    return RolloutGroup(
        ItemRef("basic_arithmetic", {}, 0, 0),
        "What is 12 + 7?",
        texts,
        [float(i % 2) for i in range(n)],
        origin="peer",
        finished=[True] * n,
    )


def test_peers_completions_are_cut_to_our_cap(tiny_model_dir: Path, tmp_path: Path) -> None:
    trainer = _trainer(tiny_model_dir, tmp_path, {"max_new_tokens": 8}, {})
    eos = trainer.eos_ids[0]
    long = trainer.encode_completion("1 2 3 4 5 6 7 8 9 10 11 12", finished=True)
    assert len(long) == 8 and eos not in long and trainer.completions_cut == 1
    ids = trainer.policy.tokenizer("1 2 3 4 5 6 7 8 9 10 11 12", add_special_tokens=False)
    seven = str(trainer.policy.tokenizer.decode(ids["input_ids"][:7]))
    assert trainer.encode_completion(seven, finished=True)[-1] == eos  # 7 + EOS fits
    eight = str(trainer.policy.tokenizer.decode(ids["input_ids"][:8]))
    assert len(trainer.encode_completion(eight, finished=False)) == 8  # not cut: as sent
    assert trainer.completions_cut == 1
    assert trainer.encode_completion(eight, finished=True)[-1] != eos  # no room for EOS
    assert trainer.completions_cut == 2


def test_token_micro_batches_change_memory_not_the_step(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    """The loss is a token mean over the step: splitting by tokens gives the same update."""
    group = _peer_group(60, n=6)
    after = []
    for i, tokens in enumerate((None, 10)):
        torch.manual_seed(0)
        trainer = _trainer(tiny_model_dir, tmp_path / str(i), {}, {"micro_batch_tokens": tokens})
        stats = trainer.update([group])
        assert stats.groups_trained == 1 and math.isfinite(stats.loss)
        lora = {n: p.detach().clone() for n, p in trainer.policy.model.named_parameters()}
        after.append((stats.loss, stats.tokens_trained, lora))
    (loss_a, tok_a, lora_a), (loss_b, tok_b, lora_b) = after
    assert tok_a == tok_b and math.isclose(loss_a, loss_b, rel_tol=1e-4, abs_tol=1e-6)
    assert all(torch.allclose(lora_a[n], lora_b[n], atol=1e-6) for n in lora_a)


def probe(folder: str, cap: int, micro_batch_tokens: int | None) -> None:
    """In a fresh process: the peak-RSS rise one 16 x 900-char peer group causes above
    two updates of our own size (16 x CAP tokens). Prints one JSON line."""
    import resource

    from transformers import LlamaConfig, LlamaForCausalLM

    from swarmnode.lab.tiny import make_tokenizer

    torch.manual_seed(0)
    torch.set_num_threads(1)
    tok = make_tokenizer(400)
    model_dir = Path(folder) / "model"
    config = LlamaConfig(
        vocab_size=32000,  # a real model's vocabulary: the logits are the per-token cost
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        bos_token_id=None,
    )
    LlamaForCausalLM(config).save_pretrained(model_dir)
    tok.save_pretrained(model_dir)
    trainer = _trainer(
        model_dir,
        Path(folder) / "data",
        {"max_new_tokens": cap, "completions_per_question": G},
        # peers' wrong completions trained too: the worst case for memory
        {"micro_batch_tokens": micro_batch_tokens, "external_negatives": True},
    )
    own = _peer_group(0)
    rng = random.Random(1)
    own.completion_ids = [[rng.randrange(3, len(tok)) for _ in range(CAP)] for _ in range(G)]
    own.origin = "local"
    for _ in range(2):  # optimizer state and allocator pools: a normal round's peak
        trainer.update([own])

    def peak_mib() -> float:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    before = peak_mib()
    stats = trainer.update([_peer_group(900)])
    out = {
        "rise_mib": round(peak_mib() - before, 1),
        "peak_mib": round(peak_mib(), 1),
        "tokens_trained": stats.tokens_trained,
        "completions_cut": trainer.completions_cut,
    }
    print(json.dumps(out))


def _run_probe(tmp_path: Path, cap: int, micro_batch_tokens: int | None) -> dict:
    args = f"{str(tmp_path)!r}, {cap}, {micro_batch_tokens!r}"
    code = f"from tests.test_update_memory import probe; probe({args})"
    root = Path(__file__).resolve().parent.parent
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_long_peer_group_cannot_raise_rss_past_the_budget(tmp_path: Path) -> None:
    cut = _run_probe(tmp_path / "cut", CAP, 2048)  # the defaults
    assert cut["tokens_trained"] == G * CAP and cut["completions_cut"] == G
    assert cut["rise_mib"] <= RSS_BUDGET_MIB, cut
    # Control: twice our cap, the whole group in one pass, breaks the budget.
    old = _run_probe(tmp_path / "old", 2 * CAP, None)
    assert old["tokens_trained"] == G * 2 * CAP
    assert old["rise_mib"] > RSS_BUDGET_MIB, old

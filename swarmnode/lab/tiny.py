"""Tiny randomly initialised causal LMs with real BPE tokenizers, for fast tests.

``make_tiny_model(folder, arch)`` writes a folder that ``from_pretrained`` loads like
any hub model: a few-layer model (Llama or Qwen2 architecture) and a byte-level BPE
tokenizer trained on a small corpus, with a ChatML chat template. The tests' model
fixture and the benchmarks' default model (bench_swarm, bench_flood, bench_scale).

torch, tokenizers and transformers are imported inside the functions, so importing
this module is light.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel, PreTrainedTokenizerFast

CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SPECIALS = ["<|im_start|>", "<|im_end|>", "<|pad|>"]

_CORPUS = [
    "What is 12 + 7? The answer is <answer>19</answer>.",
    "Sort the numbers 3, 1, 2 in ascending order. <answer>1, 2, 3</answer>",
    "How many legs do 2 cats and 1 bird have? <answer>10</answer>",
    "Solve for x: x + 4 = 9. <answer>5</answer>",
    "Reply with your final answer inside answer tags, reasoning briefly first.",
    "0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 + - * / = ( ) , .",
    "You are a helpful assistant. Think step by step and give the answer.",
]


def make_tokenizer(vocab_size: int) -> PreTrainedTokenizerFast:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_CORPUS * 20, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|pad|>", bos_token=None
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def warm_up(model: torch.nn.Module, tok: PreTrainedTokenizerFast, steps: int) -> None:
    """A few SFT steps on chat-formatted arithmetic answered in <answer> tags, so the
    tiny model emits the answer format and is right by chance now and then: its
    rollout groups then carry a real reward signal."""
    import random

    import torch

    from swarmnode.learn.tasks import build_messages

    rng = random.Random(0)
    texts = []
    for _ in range(64):
        a, b = rng.randint(0, 9), rng.randint(0, 9)
        guess = a + b if rng.random() < 0.5 else rng.randint(0, 18)
        messages = [
            *build_messages(f"Calculate {a} + {b}.", None),
            {"role": "assistant", "content": f"<answer>{guess}</answer>"},
        ]
        texts.append(tok.apply_chat_template(messages, tokenize=False))
    batch = tok(texts, return_tensors="pt", padding=True)
    labels = batch.input_ids.masked_fill(batch.attention_mask == 0, -100)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    model.train()
    for _ in range(steps):
        loss = model(**batch, labels=labels).loss
        loss.backward()
        opt.step()
        opt.zero_grad()


def make_tiny_model(folder: Path, arch: str = "llama", seed: int = 0, warm_steps: int = 80) -> Path:
    """Write a tiny model + tokenizer to ``folder`` and return it."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    tok = make_tokenizer(vocab_size=400 if arch == "llama" else 360)
    common = {
        "vocab_size": len(tok),
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "max_position_embeddings": 1024,
        "eos_token_id": tok.eos_token_id,
        "pad_token_id": tok.pad_token_id,
        "bos_token_id": None,
    }
    model: PreTrainedModel
    if arch == "llama":
        model = LlamaForCausalLM(LlamaConfig(**common, tie_word_embeddings=True))
    elif arch == "qwen2":
        model = Qwen2ForCausalLM(Qwen2Config(**common, tie_word_embeddings=False))
    else:
        raise ValueError(arch)
    tok.padding_side = "right"
    # torch sized its pool at import for every CPU; a caller pinned since (bench --pin)
    # may have one, and two threads spinning on one CPU made this take minutes.
    threads = torch.get_num_threads()
    torch.set_num_threads(max(1, min(threads, len(os.sched_getaffinity(0)))))
    try:
        warm_up(model, tok, warm_steps)
    finally:
        torch.set_num_threads(threads)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder

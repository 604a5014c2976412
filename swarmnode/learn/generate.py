"""Sample G completions per prompt with a shared-prefix KV cache.

Why not ``model.generate``: a rollout group is one prompt and G samples of it. We
prefill each prompt once, copy its KV cache G times, then decode all Q*G rows in one
batch, dropping rows from the batch as they finish. On a CPU this is most of a
round's time, and the prompt is usually longer than the completion.

Invariants:
- Runs under ``torch.inference_mode``; never touches gradients or optimizer state.
- With LoRA, decoding uses temporarily merged weights (``inference_weights``), in
  the sampling dtype: parameters are swapped, never modified in place, and
  restored exactly.
- ``should_stop`` is polled once per token so a shutdown never waits for a round.
- Returned completions include the EOS token when one was sampled (the policy must
  learn to stop); rows cut at ``max_new_tokens`` carry no EOS.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any, cast

import torch
from transformers import DynamicCache, PreTrainedModel


class GenerationCancelled(Exception):
    """``should_stop`` asked generation to stop before it finished."""


@dataclass
class Samples:
    """Completions for Q prompts × n samples, row i*n + j = sample j of prompt i."""

    token_ids: list[list[int]]
    # Log-probability of each sampled token under the sampling temperature (logits /
    # temperature, before top-p truncation; plain log-softmax when greedy). Their sum
    # per completion goes on the wire for peers' importance weights
    # (``train.importance_weights``, ``Trainer.rollout``), and tests/test_generate.py
    # reads them to prove that training scores exactly the distribution sampling drew
    # from.
    logprobs: list[list[float]]


_CACHE_KW: dict[type, str] = {}


def _cache_kw(cls: type[torch.nn.Module]) -> str:
    if cls not in _CACHE_KW:  # the kwarg was renamed in transformers 5.x
        params = inspect.signature(cls.forward).parameters
        _CACHE_KW[cls] = "cache" if "cache" in params else "past_key_values"
    return _CACHE_KW[cls]


def with_cache(model: torch.nn.Module, cache: DynamicCache) -> dict[str, DynamicCache]:
    """The forward kwarg that passes a KV cache, under this transformers' name for it."""
    get_base = getattr(model, "get_base_model", None)
    base: torch.nn.Module = get_base() if callable(get_base) else model
    return {_cache_kw(type(base)): cache}


@contextmanager
def inference_weights(model: torch.nn.Module, dtype: torch.dtype | None = None) -> Iterator[None]:
    """Sample with LoRA merged (W + BA in one matmul) and, optionally, weights cast to
    ``dtype`` (bfloat16 halves a CPU's decode time where it has bf16 instructions).

    Every parameter that changes is swapped for a new tensor, never written in place,
    and the original objects are put back on exit: training weights stay bit-exact.
    Memory: one sampling copy of the weights, no more. A merged weight is cast as soon
    as it is made (the full-precision merge of every layer is never held at once), and
    a tensor shared by several modules (tied embeddings and head) is cast once.
    """
    lora = hasattr(model, "peft_config")

    def to_dtype(t: torch.Tensor) -> torch.Tensor:
        if dtype is not None and t.is_floating_point() and t.dtype != dtype:
            return t.to(dtype)
        return t

    merged: dict[int, torch.Tensor] = {}
    swapped: dict[int, torch.nn.Parameter] = {}  # id(original) -> its sampling copy
    saved: list[tuple[torch.nn.Module, str, torch.nn.Parameter]] = []
    with torch.no_grad():
        if lora:
            from peft.tuners.lora import LoraLayer

            for module in model.modules():
                if isinstance(module, LoraLayer) and hasattr(module, "base_layer"):
                    weight = cast(torch.Tensor, module.base_layer.weight)
                    new = _merged(module, weight)
                    if new is not None:
                        merged[id(weight)] = to_dtype(new)
                        del new  # the full-precision merge: freed now, not at exit
        for module_name, module in model.named_modules():
            if "lora_" in module_name:  # adapters are switched off below: never read
                continue
            for name, param in list(module.named_parameters(recurse=False)):
                copy = swapped.get(id(param))
                if copy is None:
                    new = to_dtype(merged.pop(id(param), param))
                    if new is param:
                        continue
                    copy = swapped[id(param)] = torch.nn.Parameter(new, requires_grad=False)
                saved.append((module, name, param))
                setattr(module, name, copy)
    del merged, swapped
    try:
        with cast(Any, model).disable_adapter() if lora else nullcontext():
            yield
    finally:
        for module, name, param in saved:
            setattr(module, name, param)


def _merged(layer: Any, weight: torch.Tensor) -> torch.Tensor | None:
    """W + the active adapters' BA of one LoRA layer (None: no adapter active)."""
    delta = sum(
        layer.get_delta_weight(name) for name in layer.active_adapters if name in layer.lora_A
    )
    return weight + delta.to(weight.dtype) if isinstance(delta, torch.Tensor) else None


def _pick(
    logits: torch.Tensor, temperature: float, top_p: float, gen: torch.Generator | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample one token per row (greedy when temperature is 0); return (tokens, log-prob)."""
    if temperature <= 0:
        logp = torch.log_softmax(logits.float(), dim=-1)
        tokens = logp.argmax(-1)
        return tokens, logp.gather(-1, tokens[:, None]).squeeze(-1)
    logp = torch.log_softmax(logits.float() / temperature, dim=-1)
    probs = logp.exp()
    if top_p < 1.0:
        sorted_p, order = probs.sort(dim=-1, descending=True)
        cut = sorted_p.cumsum(-1) - sorted_p > top_p  # keep the smallest set reaching top_p
        sorted_p = sorted_p.masked_fill(cut, 0.0)
        probs = torch.zeros_like(probs).scatter(-1, order, sorted_p)
    # Inverse-CDF sampling: one uniform draw per row (multinomial draws one per
    # vocabulary entry, ~10x slower at a 49k vocabulary on a CPU).
    cdf = probs.cumsum(-1)
    u = torch.rand((probs.shape[0], 1), generator=gen, device=probs.device) * cdf[:, -1:]
    tokens = torch.searchsorted(cdf, u).squeeze(-1).clamp_(max=probs.shape[-1] - 1)
    return tokens, logp.gather(-1, tokens[:, None]).squeeze(-1)


@torch.inference_mode()
def sample(
    model: PreTrainedModel,
    prompts: Sequence[Sequence[int]],
    n: int,
    *,
    max_new_tokens: int,
    eos_ids: Sequence[int],
    pad_id: int,
    temperature: float = 1.0,
    top_p: float = 1.0,
    generator: torch.Generator | None = None,
    should_stop: Callable[[], bool] = lambda: False,
) -> Samples:
    """Sample ``n`` completions for each prompt (token ids, no padding)."""
    device = next(model.parameters()).device
    q, width = len(prompts), max(len(p) for p in prompts)
    ids = torch.full((q, width), pad_id, dtype=torch.long, device=device)
    mask = torch.zeros((q, width), dtype=torch.long, device=device)
    for i, p in enumerate(prompts):  # left padding: every row ends at the same column
        ids[i, width - len(p) :] = torch.tensor(p, device=device)
        mask[i, width - len(p) :] = 1
    pos = (mask.cumsum(-1) - 1).clamp(min=0)

    cache = DynamicCache()
    out = model(
        input_ids=ids,
        attention_mask=mask,
        position_ids=pos,
        **with_cache(model, cache),
        use_cache=True,
        logits_to_keep=1,
    )
    cache.batch_repeat_interleave(n)
    logits = out.logits[:, -1].repeat_interleave(n, 0)
    mask = mask.repeat_interleave(n, 0)
    next_pos = pos[:, -1:].repeat_interleave(n, 0) + 1

    rows = q * n
    tokens = torch.full((rows, max_new_tokens), pad_id, dtype=torch.long, device=device)
    token_logp = torch.zeros((rows, max_new_tokens), device=device)
    lengths = torch.full((rows,), max_new_tokens, dtype=torch.long, device=device)
    alive = torch.arange(rows, device=device)  # original row of each batch row
    eos = torch.tensor(list(eos_ids), device=device)
    for step in range(max_new_tokens):
        if should_stop():
            raise GenerationCancelled
        tok, lp = _pick(logits, temperature, top_p, generator)
        tokens[alive, step] = tok
        token_logp[alive, step] = lp
        done = torch.isin(tok, eos)
        lengths[alive[done]] = step + 1
        if step == max_new_tokens - 1 or bool(done.all()):
            break
        if bool(done.any()):  # shrink the batch: finished rows cost nothing more
            keep = (~done).nonzero().squeeze(-1)
            cache.batch_select_indices(keep)
            alive, tok, mask, next_pos = alive[keep], tok[keep], mask[keep], next_pos[keep]
        mask = torch.cat([mask, mask.new_ones((mask.shape[0], 1))], dim=-1)
        out = model(
            input_ids=tok[:, None],
            attention_mask=mask,
            position_ids=next_pos,
            **with_cache(model, cache),
            use_cache=True,
        )
        logits = out.logits[:, -1]
        next_pos = next_pos + 1
    lens = lengths.tolist()
    return Samples(
        token_ids=[tokens[i, : lens[i]].tolist() for i in range(rows)],
        logprobs=[token_logp[i, : lens[i]].tolist() for i in range(rows)],
    )

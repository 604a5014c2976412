"""The GRPO policy update: one step over a list of rollout groups, whatever their origin.

Read top to bottom: advantages per group, then per micro-batch one forward, the
policy-gradient loss on completion tokens, optional KL to the frozen base, backward;
one optimizer step at the end. A micro-batch is either rows of one group, its prompt
forwarded once and its KV cache shared by the completions (less compute: the CPU
default), or rows of several groups packed with their own prompts (fewer kernel
launches: the CUDA default, ``train.packed_update``). Both give the same loss.

Invariants:
- Groups without signal (reward std below ``SIGNAL_MIN_STD``) get zero advantages and
  never reach the loss: they are counted as skipped. A step with no useful group
  makes no optimizer step.
- The loss is a token-level mean over every completion token in the step, so long
  and short completions weigh per token (DAPO-style), and the result does not
  depend on how groups are split into micro-batches.
- On-policy: one step per batch of fresh samples, so the PPO ratio would be 1 and its
  clip could never engage: there is none (no clip_low/clip_high). The loss is
  -A * log p per token. Peers' groups are trained as if sampled here, without
  importance weights (as in the SAPO paper).
- Importance weights (``train.importance_weights: sequence``): a peer completion
  whose sender put its log-prob on the wire is weighted by
  min(importance_cap, p_ours(y) / p_sender(y)) over the whole completion, computed
  from this step's own log-probs (detached): bounded by the cap, exactly 1 for this
  node's own completions, 1 where the sender's log-prob is unknown (``None``).
- Peers' completions are off-policy. By default (``external_negatives: false``)
  those with a negative advantage are not forwarded at all (their tokens count as
  masked, and in the denominator), so peers only ever raise what they got right.
  Whole-group sharing otherwise pushes down peers' wrong text, which spreads mass
  over the vocabulary: measured, the node's own completions turned into 48-token
  junk (docs/sapo-experiment-2026-11-30.md).
- With ``external_negatives: true``, peers' tokens with a negative advantage that
  this policy gives less than ``external_min_prob`` get no gradient: pushing down
  what this node would not sample anyway teaches nothing and spreads probability
  mass onto everything else (entropy up, the road to run-on completions). Positive
  advantages always count: raising a peer's good but, to us, unlikely token is the
  point of sharing. Masked tokens still count in the token-mean denominator.
- Replayed groups (``TokenizedGroup.replay``: this node's own, from an earlier round;
  ``learn.replay``) are trained as peers' are by default, whatever
  ``external_negatives`` says: only completions with a non-negative advantage.
- KL, when enabled, uses the adapter-disabled model as reference (k3 estimator).
- Memory is bounded by configuration, not by what peers send: a micro-batch holds
  at most ``micro_batch_size`` completions and ``micro_batch_tokens`` padded
  completion tokens (``micro_batches``; packed, also its rows' prompts); one
  completion longer than that goes alone, and peers' completions are at most
  ``rollout.max_new_tokens`` long (``Trainer``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from transformers import DynamicCache

from swarmnode.config import TrainConfig
from swarmnode.learn.generate import with_cache
from swarmnode.learn.groups import SIGNAL_MIN_STD, reward_std


@dataclass
class TokenizedGroup:
    """A group ready for the loss: shared prompt ids, each completion's ids, advantages."""

    prompt_ids: list[int]
    completion_ids: list[list[int]]
    advantages: list[float]
    external: bool = False  # sampled by a peer's policy (off-policy for us)
    # our own group from an earlier round: off-policy too, and only its completions
    # with a non-negative advantage are trained, whatever external_negatives says
    replay: bool = False
    # per completion: the sender's log-prob of it (None: unknown, weight 1); only for
    # peers' completions with importance weights on (``Trainer.update``)
    sender_logprobs: list[float | None] | None = None


@dataclass
class StepStats:
    loss: float = 0.0
    kl: float = 0.0
    grad_norm: float = 0.0
    groups_trained: int = 0
    groups_skipped: int = 0
    tokens_trained: int = 0
    tokens_masked: int = 0  # peers' unlikely negative-advantage tokens left out
    weighted: int = 0  # completions that got an importance weight
    weight_sum: float = 0.0  # sum of those weights (mean = weight_sum / weighted)


def group_advantages(
    rewards: Sequence[float], eps: float = 1e-4, min_std: float = SIGNAL_MIN_STD
) -> list[float]:
    """(r - mean) / (std + eps), std over the group (population); all 0 below ``min_std``.

    >>> group_advantages([1.0, 0.0])
    [0.9998000399920016, -0.9998000399920016]
    >>> group_advantages([0.5, 0.5, 0.5])
    [0.0, 0.0, 0.0]
    >>> group_advantages([0.01, 0.0, 0.0, 0.0])  # partial-credit noise is not signal
    [0.0, 0.0, 0.0, 0.0]
    """
    std = reward_std(rewards)
    if std < min_std:  # the same test as RolloutGroup.has_signal
        return [0.0] * len(rewards)
    r = torch.tensor(rewards, dtype=torch.float64)
    return ((r - r.mean()) / (std + eps)).tolist()


def completion_logprobs(
    model: torch.nn.Module,
    prompt_ids: list[int],
    completions: list[list[int]],
    pad_id: int,
    temperature: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probabilities of each completion token, prompt forwarded once for all rows.

    Logits are divided by the sampling ``temperature``: the policy being optimised is
    the distribution the completions were drawn from.

    Returns (logp [n, L], mask [n, L]); grads flow through both the prompt and the
    completion forward.
    """
    device = next(model.parameters()).device
    n, width = len(completions), max(len(c) for c in completions)
    comp = torch.full((n, width), pad_id, dtype=torch.long, device=device)
    mask = torch.zeros((n, width), dtype=torch.long, device=device)
    for i, c in enumerate(completions):  # right padding after the shared prompt
        comp[i, : len(c)] = torch.tensor(c, device=device)
        mask[i, : len(c)] = 1
    cache = DynamicCache()
    prompt = torch.tensor([prompt_ids], device=device)
    out = model(input_ids=prompt, **with_cache(model, cache), use_cache=True, logits_to_keep=1)
    cache.batch_repeat_interleave(n)
    first = out.logits[:, -1:].expand(n, -1, -1)  # predicts each completion's 1st token
    head = token_logprobs(first, temperature).gather(-1, comp[:, :1, None]).squeeze(-1)
    if width == 1:
        return head, mask
    p = len(prompt_ids)
    out = model(
        input_ids=comp[:, :-1],
        attention_mask=torch.cat([mask.new_ones((n, p)), mask[:, :-1]], dim=-1),
        position_ids=torch.arange(p, p + width - 1, device=device).expand(n, -1),
        **with_cache(model, cache),
        use_cache=True,
    )
    logits = out.logits
    del out  # the logits [n, L, vocab] are freed as soon as their softmax is taken
    rest = token_logprobs(logits, temperature).gather(-1, comp[:, 1:, None]).squeeze(-1)
    return torch.cat([head, rest], dim=1), mask


def packed_logprobs(
    model: torch.nn.Module,
    prompts: Sequence[Sequence[int]],
    completions: Sequence[Sequence[int]],
    pad_id: int,
    temperature: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Like ``completion_logprobs`` for rows with each its own prompt, in one forward.

    Prompts are left-padded and completions right-padded, so every completion starts
    at the same column and only the logits of the completion columns are kept. Each
    row pays its whole prompt (no shared KV cache): more compute, fewer launches.

    Returns (logp [n, L], mask [n, L]).
    """
    device = next(model.parameters()).device
    n = len(completions)
    p_width = max(len(p) for p in prompts)
    c_width = max(len(c) for c in completions)
    ids = torch.full((n, p_width + c_width), pad_id, dtype=torch.long, device=device)
    attn = torch.zeros_like(ids)
    for i, (p, c) in enumerate(zip(prompts, completions, strict=True)):
        row = torch.tensor([*p, *c], device=device)
        ids[i, p_width - len(p) : p_width + len(c)] = row
        attn[i, p_width - len(p) : p_width + len(c)] = 1
    pos = (attn.cumsum(-1) - 1).clamp(min=0)
    out = model(input_ids=ids, attention_mask=attn, position_ids=pos, logits_to_keep=c_width + 1)
    logits = out.logits[:, :-1]  # column p_width - 1 + k predicts completion token k
    del out
    comp = ids[:, p_width:]
    logp = token_logprobs(logits, temperature).gather(-1, comp[..., None]).squeeze(-1)
    return logp, attn[:, p_width:]


def token_logprobs(logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """``log_softmax(logits / temperature)`` in float32, without a copy of the logits
    for the division when the temperature is 1 (the full-vocabulary logits are the
    update's largest tensors: ~72 MiB for 8 x 48 tokens of a 49k vocabulary)."""
    logits = logits.float()
    if temperature != 1.0:
        logits = logits / temperature
    return logits.log_softmax(-1)


def importance_weights(
    own_logp: torch.Tensor, sender: Sequence[float | None], cap: float
) -> torch.Tensor:
    """Truncated sequence weights min(cap, exp(own - sender)); 1 where sender is None.

    >>> importance_weights(torch.tensor([-2.0, -1.0, -5.0]), [-1.0, -3.0, None], 1.0)
    tensor([0.3679, 1.0000, 1.0000])
    """
    known = torch.tensor([lp is not None for lp in sender], device=own_logp.device)
    theirs = torch.tensor(
        [0.0 if lp is None else lp for lp in sender], device=own_logp.device, dtype=own_logp.dtype
    )
    w = torch.exp((own_logp - theirs).clamp(max=math.log(cap))).clamp(max=cap)
    return torch.where(known, w, torch.ones_like(w))


def micro_batches(
    lengths: Sequence[int], max_rows: int | None, max_tokens: int | None
) -> list[tuple[int, int]]:
    """Consecutive ``(start, end)`` slices of a group's completions: each at most
    ``max_rows`` rows and, padded to its longest row, at most ``max_tokens`` tokens
    (a longer single row goes alone). None = no limit.

    >>> micro_batches([4, 4, 4, 10, 1], None, 8)
    [(0, 2), (2, 3), (3, 4), (4, 5)]
    >>> micro_batches([4, 4, 4], 2, None)
    [(0, 2), (2, 3)]
    """
    out: list[tuple[int, int]] = []
    start, width = 0, 0
    for i, n in enumerate(lengths):
        rows, wide = i - start + 1, max(width, n)
        if rows > 1 and (
            (max_rows is not None and rows > max_rows)
            or (max_tokens is not None and rows * wide > max_tokens)
        ):
            out.append((start, i))
            start, wide = i, n
        width = wide
    if start < len(lengths):
        out.append((start, len(lengths)))
    return out


def trains(group: TokenizedGroup, j: int, cfg: TrainConfig) -> bool:
    """Whether completion ``j`` of ``group`` gets a gradient: always with a non-negative
    advantage; with a negative one, only the node's own current completions (and
    peers' too under ``external_negatives``), never a replayed group's."""
    if group.advantages[j] >= 0:
        return True
    return not group.replay and (cfg.external_negatives or not group.external)


def grpo_step(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    groups: Sequence[TokenizedGroup],
    cfg: TrainConfig,
    pad_id: int,
    micro_batch_size: int | None = None,
    micro_batch_tokens: int | None = None,
    temperature: float = 1.0,
    should_stop: Callable[[], bool] = lambda: False,
    packed: bool = False,
) -> StepStats:
    """One policy-gradient step on ``groups`` (already tokenised, with advantages).

    ``packed``: micro-batches mix rows of different groups (``packed_logprobs``);
    otherwise each holds rows of one group, its prompt forwarded once. Same loss."""
    stats = StepStats()
    useful = [g for g in groups if any(abs(a) > 0 for a in g.advantages)]
    stats.groups_skipped = len(groups) - len(useful)
    if not useful:
        return stats
    total_tokens = sum(len(c) for g in useful for c in g.completion_ids)
    reference = getattr(model, "disable_adapter", None) if cfg.kl_coef > 0 else None
    optimizer.zero_grad(set_to_none=True)
    model.train()
    loss_sum = kl_sum = 0.0
    log_floor = math.log(cfg.external_min_prob) if cfg.external_min_prob > 0 else -math.inf
    device = _dev(model)

    def keep(g: int, j: int) -> bool:
        return trains(useful[g], j, cfg)

    for g, grp in enumerate(useful):
        stats.tokens_masked += sum(
            len(grp.completion_ids[j]) for j in range(len(grp.completion_ids)) if not keep(g, j)
        )
    for rows in _plan(useful, packed, micro_batch_size, micro_batch_tokens, keep):
        if should_stop():
            optimizer.zero_grad(set_to_none=True)
            raise InterruptedError("stop requested during the update")
        prompts = [useful[g].prompt_ids for g, _ in rows]
        comps = [useful[g].completion_ids[j] for g, j in rows]
        external = [useful[g].external for g, _ in rows]
        sender = [_sender_logprob(useful[g], j) for g, j in rows]
        a = torch.tensor([useful[g].advantages[j] for g, j in rows], device=device)[:, None]
        logp, mask = _rows_logprobs(model, prompts, comps, pad_id, temperature, packed)
        per_token = -a * logp  # the policy gradient: we are on policy, no ratio
        known = [lp is not None for lp in sender]
        if any(known):  # peers' completions with their log-probs: truncated IS weight
            own = (logp.detach() * mask).sum(-1)
            w = importance_weights(own, sender, cfg.importance_cap)
            per_token = per_token * w[:, None]
            stats.weighted += sum(known)
            stats.weight_sum += sum(float(x) for x, k in zip(w, known, strict=True) if k)
        if reference is not None:  # the frozen base = the adapter switched off
            with torch.no_grad(), reference():
                ref_logp, _ = _rows_logprobs(model, prompts, comps, pad_id, temperature, packed)
            d = ref_logp - logp
            kl = torch.exp(d) - d - 1
            per_token = per_token + cfg.kl_coef * kl
            kl_sum += float((kl.detach() * mask).sum())
        m = mask.to(per_token.dtype)
        if any(external) and log_floor > -math.inf:
            ext = torch.tensor(external, device=device)[:, None]
            drop = (a < 0) & (logp.detach() < log_floor) & (mask > 0) & ext
            stats.tokens_masked += int(drop.sum())
            m = m * (~drop).to(m.dtype)
        loss = (per_token * m).sum() / total_tokens
        loss.backward()
        loss_sum += float(loss.detach())
    params = [p for p in model.parameters() if p.requires_grad]
    stats.grad_norm = float(torch.nn.utils.clip_grad_norm_(params, cfg.max_grad_norm))
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    stats.loss = loss_sum
    stats.kl = kl_sum / total_tokens
    stats.groups_trained = len(useful)
    stats.tokens_trained = total_tokens
    return stats


def _plan(
    groups: Sequence[TokenizedGroup],
    packed: bool,
    max_rows: int | None,
    max_tokens: int | None,
    keep: Callable[[int, int], bool] = lambda g, j: True,
) -> list[list[tuple[int, int]]]:
    """The step's micro-batches as (group index, completion index) rows, ``keep``'s only."""
    if packed:  # the same bound on padded completion tokens, across groups
        rows = [
            (g, j)
            for g, grp in enumerate(groups)
            for j in range(len(grp.completion_ids))
            if keep(g, j)
        ]
        lengths = [len(groups[g].completion_ids[j]) for g, j in rows]
        return [rows[a:b] for a, b in micro_batches(lengths, max_rows, max_tokens)]
    plan = []
    for g, grp in enumerate(groups):
        js = [j for j in range(len(grp.completion_ids)) if keep(g, j)]
        lengths = [len(grp.completion_ids[j]) for j in js]
        for a, b in micro_batches(lengths, max_rows, max_tokens):
            plan.append([(g, j) for j in js[a:b]])
    return plan


def _rows_logprobs(
    model: torch.nn.Module,
    prompts: list[list[int]],
    comps: list[list[int]],
    pad_id: int,
    temperature: float,
    packed: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    if packed:
        return packed_logprobs(model, prompts, comps, pad_id, temperature)
    return completion_logprobs(model, prompts[0], comps, pad_id, temperature)  # one group


def _sender_logprob(group: TokenizedGroup, j: int) -> float | None:
    """The sender's log-prob of a peer's completion j (None: own, or unknown)."""
    if not group.external or group.sender_logprobs is None:
        return None
    return group.sender_logprobs[j]


def _dev(model: torch.nn.Module) -> torch.device:
    return next(model.parameters()).device

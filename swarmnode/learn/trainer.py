"""A node's learner: makes rollout groups from its tasks and updates its policy.

``Trainer.rollout`` turns item references into scored ``RolloutGroup``s;
``Trainer.update`` takes any list of groups (local or external) and runs one GRPO
step. The daemon calls both from a worker thread: nothing here knows about the
network or the event loop.

Invariants:
- Rewards of local groups are computed here, from the locally regenerated item,
  with ``rewards.score_completions`` (the scorer ingestion uses for peers' groups):
  reasoning-gym's ``score_answer`` on the extracted answer, plus
  ``format_reward_weight`` times the format reward.
- Prompt token ids come from this node's own tokenizer and chat template, so
  groups from peers with other models train the same way as local ones.
- A peer's completion costs at most what this node's own does: after re-tokenising
  it is cut to ``rollout.max_new_tokens`` tokens (EOS included, as when sampling);
  a cut one counts as unfinished (no EOS) and is counted in ``completions_cut``.
  With ``train.micro_batch_tokens`` this bounds the update's memory whatever peers
  send.
- Sampling draws from ``self.generator`` (seeded with ``train.seed``), whose state
  is checkpointed, so a resumed node draws what an uninterrupted one would have.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from swarmnode.config import Config
from swarmnode.learn.generate import inference_weights, sample
from swarmnode.learn.groups import ItemRef, RolloutGroup
from swarmnode.learn.grpo import StepStats, TokenizedGroup, group_advantages, grpo_step
from swarmnode.learn.interrupt import stop_points
from swarmnode.learn.model import Policy, sampling_dtype
from swarmnode.learn.rewards import make_scorer
from swarmnode.learn.tasks import TaskMix, build_messages

PROMPT_CACHE = 64  # questions whose prompt ids are kept (more than one round's)


@dataclass
class RolloutStats:
    seconds: float
    tokens: int


class Trainer:
    """Owns the policy, its optimizer and the task mix of one node."""

    def __init__(self, cfg: Config, policy: Policy, tasks: TaskMix | None = None) -> None:
        self.cfg = cfg
        self.policy = policy
        self.tasks = tasks or TaskMix(cfg.tasks)
        self.optimizer = torch.optim.AdamW(
            policy.trainable_parameters(),
            lr=cfg.train.learning_rate,
            weight_decay=cfg.train.weight_decay,
        )
        self.generator = torch.Generator(device=policy.device)
        self.generator.manual_seed(cfg.train.seed)
        tok = policy.tokenizer
        self.pad_id = int(tok.pad_token_id)
        self.eos_ids = sorted({int(tok.eos_token_id), *self._extra_eos()})
        self._prompt_cache: OrderedDict[str, list[int]] = OrderedDict()  # LRU
        self.completions_cut = 0  # peers' completions cut to rollout.max_new_tokens
        # (rewards used for training, format rewards) for completions of one item
        self.score = make_scorer(cfg.train.format_reward_weight, cfg.partial_credit_datasets())
        model_dtype = next(policy.model.parameters()).dtype
        self.sample_dtype = sampling_dtype(cfg.rollout.dtype, policy.device, model_dtype)
        mode = cfg.train.packed_update  # auto: pack on CUDA (launch-bound), not on CPU
        self.packed = mode == "on" or (mode == "auto" and policy.device.type == "cuda")

    def _extra_eos(self) -> list[int]:
        gen_cfg = getattr(self.policy.model, "generation_config", None)
        eos = getattr(gen_cfg, "eos_token_id", None)
        if eos is None:
            return []
        return [int(e) for e in (eos if isinstance(eos, list) else [eos])]

    # -- prompts -------------------------------------------------------------

    def prompt_ids(self, question: str) -> list[int]:
        """Token ids of the chat prompt for ``question`` (memo of the last
        ``PROMPT_CACHE`` questions: a round asks for its own again in the update)."""
        ids = self._prompt_cache.get(question)
        if ids is not None:
            self._prompt_cache.move_to_end(question)
        else:
            messages = build_messages(question, self.cfg.tasks.system_prompt)
            out: Any = self.policy.tokenizer.apply_chat_template(
                messages, add_generation_prompt=True, tokenize=True
            )
            ids = list(out["input_ids"] if hasattr(out, "keys") else out)
            self._prompt_cache[question] = ids
            if len(self._prompt_cache) > PROMPT_CACHE:  # a soak's RSS stays flat
                self._prompt_cache.popitem(last=False)
        return ids

    def encode_completion(self, text: str, finished: bool = True) -> list[int]:
        """A peer's completion text in this node's tokens, ending with EOS if it ended,
        at most ``rollout.max_new_tokens`` tokens long (EOS included) like our own.

        A completion cut at the sender's token cap, or here, gets no EOS: appending
        one would teach "stop here" on text that never stopped (and, with a negative
        advantage, "never stop" on the rest).
        """
        return self._encode(text, finished)[0]

    def _encode(self, text: str, finished: bool) -> tuple[list[int], bool]:
        """(token ids as ``encode_completion``, whether they were cut here)."""
        cap = self.cfg.rollout.max_new_tokens
        ids = self.policy.tokenizer(text, add_special_tokens=False)["input_ids"]
        if not ids or (finished and len(ids) < cap):
            return [*ids, self.eos_ids[0]], False
        cut = finished or len(ids) > cap  # longer than we would have sampled
        self.completions_cut += cut
        return list(ids[:cap]), cut

    def _peer_tokens(
        self, group: RolloutGroup
    ) -> tuple[list[list[int]], list[float | None] | None]:
        """A peer group's completions in our tokens, and the sender's log-probs to weigh
        them by (``train.importance_weights``): None unless it runs our model; None for
        a completion cut here (its log-prob covers text we don't train on)."""
        finished = group.finished or [True] * len(group.completions)
        encoded = [self._encode(c, f) for c, f in zip(group.completions, finished, strict=True)]
        ids = [e[0] for e in encoded]
        lps = group.logprobs
        if self.cfg.train.importance_weights == "off" or lps is None:
            return ids, None
        if group.model != self.policy.name:  # another model/tokenizer: no weight
            return ids, None
        return ids, [None if cut else lp for (_, cut), lp in zip(encoded, lps, strict=True)]

    # -- one round -----------------------------------------------------------

    def rollout(
        self,
        round_index: int,
        should_stop: Callable[[], bool] = lambda: False,
        shared: Sequence[ItemRef] = (),
    ) -> tuple[list[RolloutGroup], RolloutStats]:
        """Sample this round's items and G completions for each; score them.

        ``shared`` items (the swarm's schedule) take the place of as many of the
        node's own items."""
        r = self.cfg.rollout
        own = self.tasks.sample(round_index, max(0, r.questions_per_round - len(shared)))
        refs = [*own, *shared]
        entries = [self.tasks.regenerate(ref) for ref in refs]
        prompts = [self.prompt_ids(e["question"]) for e in entries]
        t0 = time.perf_counter()
        self.policy.model.eval()
        with inference_weights(self.policy.model, self.sample_dtype):
            samples = sample(
                self.policy.model,
                prompts,
                r.completions_per_question,
                max_new_tokens=r.max_new_tokens,
                eos_ids=self.eos_ids,
                pad_id=self.pad_id,
                temperature=r.temperature,
                top_p=r.top_p,
                generator=self.generator,
                should_stop=should_stop,
            )
        seconds = time.perf_counter() - t0
        g = r.completions_per_question
        groups = []
        decode = self.policy.tokenizer.decode
        share_logprobs = self.cfg.train.importance_weights != "off"  # for peers' weights
        for i, (ref, entry) in enumerate(zip(refs, entries, strict=True)):
            ids = samples.token_ids[i * g : (i + 1) * g]
            texts = [str(decode(c, skip_special_tokens=True)) for c in ids]
            rewards, fmt = self.score(texts, entry)
            groups.append(
                RolloutGroup(
                    ref=ref,
                    question=entry["question"],
                    completions=texts,
                    rewards=rewards,
                    round=round_index,
                    model=self.policy.name,
                    completion_ids=ids,
                    format_rewards=fmt,
                    finished=[bool(c) and c[-1] in self.eos_ids for c in ids],
                    logprobs=[sum(lp) for lp in samples.logprobs[i * g : (i + 1) * g]]
                    if share_logprobs
                    else None,
                )
            )
        tokens = sum(len(c) for c in samples.token_ids)
        return groups, RolloutStats(seconds=seconds, tokens=tokens)

    def update(
        self, groups: Sequence[RolloutGroup], should_stop: Callable[[], bool] = lambda: False
    ) -> StepStats:
        """One GRPO step on ``groups``; groups without signal are skipped."""
        batch = []
        for g in groups:
            ids, sender_lps = (g.completion_ids, None) if g.completion_ids else self._peer_tokens(g)
            batch.append(
                TokenizedGroup(
                    prompt_ids=self.prompt_ids(g.question),
                    completion_ids=ids,
                    advantages=group_advantages(g.rewards),
                    external=not g.is_local,
                    replay=g.is_replay,
                    sender_logprobs=sender_lps,
                )
            )
        # grpo_step polls should_stop per micro-batch; the stop points bound the wait
        # inside one (a whole group by default) to a layer's forward or backward.
        with stop_points(self.policy.model, should_stop):
            return grpo_step(
                self.policy.model,
                self.optimizer,
                batch,
                self.cfg.train,
                self.pad_id,
                micro_batch_size=self.cfg.train.micro_batch_size,
                micro_batch_tokens=self.cfg.train.micro_batch_tokens,
                temperature=self.cfg.rollout.temperature,
                should_stop=should_stop,
                packed=self.packed,
            )

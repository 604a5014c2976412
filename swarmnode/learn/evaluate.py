"""Held-out evaluation: a node's current policy on questions no node trains on.

The items lie in the held-out partition of the question space
(``tasks.is_heldout`` with ``tasks.heldout_percent``), which no node with the same
setting trains on: its own draws and the shared schedule skip them and ingestion
refuses peers' groups for them. They are drawn at ``HELDOUT_SEED`` (which ingestion
refuses too), distinct questions only. With ``heldout_percent: 0`` there is no
partition and the items are simply the first ``n`` at ``HELDOUT_SEED``, which can
repeat training questions in a small question space (``seen_in_training`` says how
often). Decoding is greedy, one completion per item: the score is the policy's
accuracy, not luck.

What is reported, and why:
- ``accuracy`` is *strict*: the share of items whose answer reasoning-gym scores 1.0,
  with a 95% Wilson interval. Partial credit ('15' for 5 scores 0.5 in
  basic_arithmetic) is shown apart as ``mean_score``: it is not accuracy.
- ``seen_in_training``: the share of held-out questions whose text also occurs among
  the node's own training items (its task mix over its rounds). A tiny question
  space makes "held-out" a repeat of training; this says so.
- Per dataset, ``top_answer_share``: how many answers are the single most common
  one; ``collapsed`` flags a dataset where one constant answers (nearly) everything
  while the right answers vary (a node that learned to say ``1``).

Invariants:
- Read-only: loads the newest valid checkpoint (or the base policy when there is
  none, or when ``base`` is asked for) and never writes into the data directory.
- The same config, checkpoint and ``n`` give the same items and the same scores.
- ``records`` holds one dict per item (dataset, config, seed, index, question,
  answer, completion, score): what ``heldout_items.jsonl`` is written from, so
  results can be bootstrapped over items.
"""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path
from typing import Any

import torch

from swarmnode.config import Config
from swarmnode.learn.checkpoint import Checkpointer
from swarmnode.learn.generate import inference_weights, sample
from swarmnode.learn.groups import ItemRef
from swarmnode.learn.grpo import group_advantages
from swarmnode.learn.model import load_policy
from swarmnode.learn.progress import progress
from swarmnode.learn.rewards import accuracy_reward, extract_answer
from swarmnode.learn.tasks import HELDOUT_SEED, TaskMix, is_heldout, ref_config, regenerate
from swarmnode.learn.trainer import Trainer

COLLAPSE_SHARE = 0.8  # one answer for this share of a dataset's items = collapsed


# Indices looked at per wanted item (at least MIN_SCAN) before a dataset gives up: a
# tiny question space holds few held-out questions (121 one-digit sums hold 6).
SCAN_PER_ITEM = 50
MIN_SCAN = 2000


def heldout_refs(cfg: Config, n: int) -> list[ItemRef]:
    """Up to ``n`` held-out items per dataset of the mix, distinct questions, in index
    order (fewer when its question space holds fewer held-out questions)."""
    percent = cfg.tasks.heldout_percent
    refs = []
    for spec in cfg.tasks.datasets:
        config = ref_config(spec.config, spec.size)
        if percent <= 0:
            refs += [ItemRef(spec.name, config, HELDOUT_SEED, i) for i in range(min(n, spec.size))]
            continue
        questions: set[str] = set()
        for i in range(min(spec.size, max(MIN_SCAN, SCAN_PER_ITEM * n))):
            ref = ItemRef(spec.name, config, HELDOUT_SEED, i)
            question = regenerate(ref)["question"]
            if question in questions or not is_heldout(question, percent):
                continue
            questions.add(question)
            refs.append(ref)
            if len(questions) == n:
                break
    return refs


def dataset_label(cfg: Config, ref: ItemRef) -> str:
    """The dataset's name, with ``#k`` (its place in the mix) when several specs share it."""
    names = [d.name for d in cfg.tasks.datasets]
    if names.count(ref.dataset) < 2:
        return ref.dataset
    for k, spec in enumerate(cfg.tasks.datasets):
        if spec.name == ref.dataset and ref_config(spec.config, spec.size) == ref.config:
            return f"{ref.dataset}#{k}"
    return ref.dataset


def wilson(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """95% Wilson score interval of a proportion.

    >>> [round(x, 3) for x in wilson(10, 20)]
    [0.299, 0.701]
    """
    if n == 0:
        return (0.0, 1.0)
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return (max(0.0, centre - half), min(1.0, centre + half))


def training_questions(cfg: Config, rounds: int) -> set[str]:
    """Question texts of the node's own training items over ``rounds`` rounds."""
    mix = TaskMix(cfg.tasks)
    q = cfg.rollout.questions_per_round
    return {
        mix.regenerate(ref)["question"] for r in range(1, rounds + 1) for ref in mix.sample(r, q)
    }


def greedy_answers(trainer: Trainer, questions: list[str]) -> list[str]:
    """One greedy completion per question, decoded (call inside inference_weights)."""
    out = sample(
        trainer.policy.model,
        [trainer.prompt_ids(q) for q in questions],
        1,
        max_new_tokens=trainer.cfg.rollout.max_new_tokens,
        eos_ids=trainer.eos_ids,
        pad_id=trainer.pad_id,
        temperature=0.0,
    )
    decode = trainer.policy.tokenizer.decode
    return [str(decode(ids, skip_special_tokens=True)) for ids in out.token_ids]


def evaluate(cfg: Config, n: int = 50, batch: int = 16, base: bool = False) -> dict[str, Any]:
    """Strict held-out accuracy (overall and per dataset) of the newest checkpoint.

    ``base`` scores the untrained policy instead (the checkpoint is not loaded).
    """
    trainer = Trainer(cfg, load_policy(cfg.model, seed=cfg.train.seed))
    round_index = 0
    if not base:
        ckpt = Checkpointer(Path(cfg.node.data_dir) / "checkpoints")
        restored = ckpt.restore_latest(trainer.policy.model, trainer.optimizer, trainer.generator)
        round_index = restored or 0
    refs = heldout_refs(cfg, n)
    entries = [trainer.tasks.regenerate(r) for r in refs]
    labels = {r: dataset_label(cfg, r) for r in refs}
    scores: dict[str, list[float]] = {}
    answers: dict[str, list[str | None]] = {}
    records: list[dict[str, Any]] = []
    model = trainer.policy.model
    model.eval()
    with (
        inference_weights(model, trainer.sample_dtype),
        torch.inference_mode(),
        progress("evaluating", len(refs), "items") as step,
    ):
        for start in range(0, len(refs), batch):
            chunk = entries[start : start + batch]
            texts = greedy_answers(trainer, [e["question"] for e in chunk])
            for ref, entry, text in zip(refs[start:], chunk, texts, strict=False):
                score = accuracy_reward(text, entry)
                scores.setdefault(labels[ref], []).append(score)
                answers.setdefault(labels[ref], []).append(extract_answer(text))
                records.append(item_record(ref, entry, text, score))
            step(len(chunk))
    truths: dict[str, set[str]] = {}
    for ref, entry in zip(refs, entries, strict=True):
        truths.setdefault(labels[ref], set()).add(str(entry["answer"]))
    every = [x for v in scores.values() for x in v]
    correct = sum(x >= 1.0 for x in every)
    seen = training_questions(cfg, round_index or cfg.node.max_rounds or 0)
    per = {}
    for name, v in scores.items():
        top = Counter(a for a in answers[name] if a is not None).most_common(1)
        share = top[0][1] / len(v) if top else 0.0
        per[name] = {
            "items": len(v),
            "accuracy": sum(x >= 1.0 for x in v) / len(v),
            "mean_score": sum(v) / len(v),
            "top_answer_share": round(share, 3),
            "collapsed": share >= COLLAPSE_SHARE and len(truths[name]) > 1,
        }
    return {
        "round": round_index,
        "base": base,
        "items": len(every),
        "correct": correct,
        "accuracy": correct / len(every) if every else 0.0,
        "interval": list(wilson(correct, len(every))),
        "mean_score": sum(every) / len(every) if every else 0.0,
        "seen_in_training": sum(e["question"] in seen for e in entries) / max(1, len(entries)),
        "per_dataset": per,
        "records": records,
    }


def item_record(
    ref: ItemRef, entry: dict[str, Any], completion: str, score: float
) -> dict[str, Any]:
    """One line of ``heldout_items.jsonl``: the item, its truth, the answer and its score."""
    return {
        "dataset": ref.dataset,
        "config": ref.config,
        "seed": ref.seed,
        "index": ref.index,
        "question": entry["question"],
        "answer": str(entry["answer"]),
        "completion": completion,
        "score": score,
    }


def probe_signal(cfg: Config, policy: Any, n: int) -> dict[str, float]:
    """What an untrained round would see: ``n`` items of ``cfg``'s mix, G samples each.

    Returns strict (share of completions scoring 1.0), mean (mean score, partial
    credit included), partial_only_signal (share of groups with signal only through
    partial credit), wrong_pushed_up (with partial credit as the reward: share of
    the completions given a positive advantage that are not right), signal (share of
    groups with both right and wrong answers: task signal, whatever the format reward
    adds), greedy (strict accuracy of the greedy answer on the same items) and
    tokens_generated.
    """
    trainer = Trainer(cfg, policy)
    groups, stats = trainer.rollout(1)
    per_group = [
        [accuracy_reward(c, trainer.tasks.regenerate(g.ref)) for c in g.completions] for g in groups
    ]
    scores = [s for group in per_group for s in group]
    model = trainer.policy.model
    model.eval()
    with inference_weights(model, trainer.sample_dtype), torch.inference_mode():
        texts = greedy_answers(trainer, [g.question for g in groups])
    greedy = [
        accuracy_reward(t, trainer.tasks.regenerate(g.ref))
        for g, t in zip(groups, texts, strict=True)
    ]
    # What partial credit would teach: groups whose only spread is partial scores, and
    # completions pushed up (positive advantage) that are not right.
    partial_only = sum(
        len({x >= 1.0 for x in v}) == 1 and any(a != 0 for a in group_advantages(v))
        for v in per_group
    )
    pushed = [
        (x, a) for v in per_group for x, a in zip(v, group_advantages(v), strict=True) if a > 0
    ]
    return {
        "strict": sum(s >= 1.0 for s in scores) / len(scores),
        "mean": sum(scores) / len(scores),
        "partial_only_signal": partial_only / len(groups),
        "wrong_pushed_up": sum(x < 1.0 for x, _ in pushed) / len(pushed) if pushed else 0.0,
        "signal": sum(len({x >= 1.0 for x in v}) > 1 for v in per_group) / len(groups),
        "greedy": sum(s >= 1.0 for s in greedy) / len(greedy),
        "tokens_generated": float(stats.tokens),
    }

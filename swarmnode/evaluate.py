"""Held-out evaluation: a node's current policy on items no node trains on.

Training seeds are below 2**31 (``TasksConfig.seed``); evaluation draws from seed
``HELDOUT_SEED`` and above, so no swarm member ever trained on these items. Decoding is
greedy, one completion per item: the score is the policy's accuracy, not luck.

Invariants:
- Read-only: loads the newest valid checkpoint (or the base policy when there is
  none) and never writes into the data directory.
- The same config, checkpoint and ``n`` give the same items and the same scores.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from swarmnode.checkpoint import Checkpointer
from swarmnode.config import Config
from swarmnode.generate import inference_weights, sample
from swarmnode.groups import ItemRef
from swarmnode.model import load_policy
from swarmnode.rewards import accuracy_reward
from swarmnode.tasks import ref_config
from swarmnode.trainer import Trainer

HELDOUT_SEED = 2**31 + 7919


def heldout_refs(cfg: Config, n: int) -> list[ItemRef]:
    """``n`` held-out items per dataset of the mix."""
    refs = []
    for spec in cfg.tasks.datasets:
        config = ref_config(spec.config, spec.size)
        refs += [ItemRef(spec.name, config, HELDOUT_SEED, i) for i in range(min(n, spec.size))]
    return refs


def evaluate(cfg: Config, n: int = 50, batch: int = 16) -> dict[str, Any]:
    """Accuracy per dataset (and overall) of the node's newest checkpoint."""
    trainer = Trainer(cfg, load_policy(cfg.model, seed=cfg.train.seed))
    ckpt = Checkpointer(Path(cfg.node.data_dir) / "checkpoints")
    round_index = ckpt.restore_latest(trainer.policy.model, trainer.optimizer, trainer.generator)
    refs = heldout_refs(cfg, n)
    entries = [trainer.tasks.regenerate(r) for r in refs]
    scores: dict[str, list[float]] = {}
    model = trainer.policy.model
    model.eval()
    with inference_weights(model, trainer.sample_dtype), torch.inference_mode():
        for start in range(0, len(refs), batch):
            chunk = entries[start : start + batch]
            prompts = [trainer.prompt_ids(e["question"]) for e in chunk]
            out = sample(
                model,
                prompts,
                1,
                max_new_tokens=cfg.rollout.max_new_tokens,
                eos_ids=trainer.eos_ids,
                pad_id=trainer.pad_id,
                temperature=0.0,
            )
            for ref, entry, ids in zip(refs[start:], chunk, out.token_ids, strict=False):
                text = trainer.policy.tokenizer.decode(ids, skip_special_tokens=True)
                scores.setdefault(ref.dataset, []).append(accuracy_reward(str(text), entry))
    per = {name: sum(v) / len(v) for name, v in scores.items()}
    every = [x for v in scores.values() for x in v]
    return {
        "round": round_index or 0,
        "items": len(every),
        "accuracy": sum(every) / len(every) if every else 0.0,
        "per_dataset": per,
    }

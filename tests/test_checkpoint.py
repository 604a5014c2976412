"""Checkpoints: exact resume after SIGKILL, fallback past a corrupt checkpoint."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import torch
from safetensors.torch import load_file

from swarmnode.config import parse_config
from swarmnode.learn.checkpoint import Checkpointer
from swarmnode.learn.metrics import JsonLines, read_metrics
from swarmnode.learn.model import load_policy
from swarmnode.learn.trainer import Trainer
from tests.helpers import start_node, tiny_config, wait_rounds, write_config


def _adapter(ckpt: Path) -> dict[str, torch.Tensor]:
    return load_file(str(ckpt / "adapter" / "adapter_model.safetensors"))


def test_sigkill_resumes_exactly(tiny_model_dir: Path, tmp_path: Path) -> None:
    cfg = tiny_config(tiny_model_dir, tmp_path / "a", model={"threads": 1})
    killed = write_config(tmp_path / "a.yaml", cfg)
    proc = start_node(killed)
    wait_rounds(tmp_path / "a" / "metrics.jsonl", 3, proc, timeout=300)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    ckpts = Checkpointer(tmp_path / "a" / "checkpoints").checkpoints()
    k, newest = ckpts[0]
    assert k >= 2
    saved = _adapter(newest)
    lines_before = len(read_metrics(tmp_path / "a" / "metrics.jsonl"))

    resumed = start_node(killed, "--max-rounds", str(k + 1))
    assert resumed.wait(timeout=300) == 0, resumed.stderr.read().decode()
    # rounds after round k (killed before their checkpoint) were undone: moved aside
    assert [r["round"] for r in read_metrics(tmp_path / "a" / "metrics.jsonl")] == list(
        range(1, k + 2)
    )
    undone = read_metrics(tmp_path / "a" / "metrics.undone.jsonl")
    assert len(undone) == lines_before - k and all(r["round"] > k for r in undone)
    # The saved adapter itself is untouched by the restart.
    assert all(torch.equal(saved[n], t) for n, t in _adapter(newest).items())

    # An uninterrupted node with the same config ends round k + 1 with the very same
    # adapter: weights, optimizer and sampling RNG were all restored exactly.
    ref_cfg = tiny_config(tiny_model_dir, tmp_path / "b", model={"threads": 1})
    ref = start_node(write_config(tmp_path / "b.yaml", ref_cfg), "--max-rounds", str(k + 1))
    assert ref.wait(timeout=300) == 0, ref.stderr.read().decode()
    a = _adapter(tmp_path / "a" / "checkpoints" / f"round-{k + 1:06d}")
    b = _adapter(tmp_path / "b" / "checkpoints" / f"round-{k + 1:06d}")
    assert a.keys() == b.keys() and all(torch.equal(a[n], b[n]) for n in a)
    rounds_a = {r["round"]: r for r in read_metrics(tmp_path / "a" / "metrics.jsonl")}
    rounds_b = {r["round"]: r for r in read_metrics(tmp_path / "b" / "metrics.jsonl")}
    assert rounds_a[k + 1]["reward_mean"] == rounds_b[k + 1]["reward_mean"]
    assert rounds_a[k + 1]["tokens_generated"] == rounds_b[k + 1]["tokens_generated"]


def _trainer(model_dir: Path, data: Path) -> Trainer:
    cfg = parse_config(tiny_config(model_dir, data))
    return Trainer(cfg, load_policy(cfg.model))


def _train_and_save(trainer: Trainer, ckpt: Checkpointer, rounds: int) -> None:
    for r in range(1, rounds + 1):
        groups, _ = trainer.rollout(r)
        for g in groups:  # force a signal so every round changes the adapter
            g.rewards = [float(i % 2) for i in range(len(g.rewards))]
        trainer.update(groups)
        ckpt.save(r, trainer.policy.model, trainer.optimizer, trainer.generator)


def test_restore_loads_saved_state(tiny_model_dir: Path, tmp_path: Path) -> None:
    trainer = _trainer(tiny_model_dir, tmp_path)
    ckpt = Checkpointer(tmp_path / "ck", keep=2)
    _train_and_save(trainer, ckpt, 3)
    assert [r for r, _ in ckpt.checkpoints()] == [3, 2]  # keep=2 pruned round 1
    fresh = _trainer(tiny_model_dir, tmp_path)
    assert ckpt.restore_latest(fresh.policy.model, fresh.optimizer, fresh.generator) == 3
    want = {n: p for n, p in trainer.policy.model.named_parameters() if p.requires_grad}
    got = {n: p for n, p in fresh.policy.model.named_parameters() if p.requires_grad}
    assert want.keys() == got.keys() and all(torch.equal(want[n], got[n]) for n in want)
    assert torch.equal(trainer.generator.get_state(), fresh.generator.get_state())
    assert (
        fresh.optimizer.state_dict()["state"].keys()
        == trainer.optimizer.state_dict()["state"].keys()
    )


def test_truncated_checkpoint_falls_back(tiny_model_dir: Path, tmp_path: Path) -> None:
    trainer = _trainer(tiny_model_dir, tmp_path)
    ckpt = Checkpointer(tmp_path / "ck", keep=3)
    _train_and_save(trainer, ckpt, 3)
    weights = tmp_path / "ck" / "round-000003" / "adapter" / "adapter_model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    (tmp_path / "ck" / ".tmp-round-000004-1").mkdir()  # a save that died half-way
    fresh = _trainer(tiny_model_dir, tmp_path)
    assert ckpt.restore_latest(fresh.policy.model, fresh.optimizer, fresh.generator) == 2
    expect = _adapter(tmp_path / "ck" / "round-000002")
    state = {n: t for n, t in fresh.policy.model.state_dict().items() if "lora_" in n}
    assert len(state) == len(expect)


def test_manifest_tampering_detected(tiny_model_dir: Path, tmp_path: Path) -> None:
    trainer = _trainer(tiny_model_dir, tmp_path)
    ckpt = Checkpointer(tmp_path / "ck")
    _train_and_save(trainer, ckpt, 2)
    manifest = tmp_path / "ck" / "round-000002" / "manifest.json"
    data = json.loads(manifest.read_text())
    data["files"]["optimizer.pt"] = "0" * 64
    manifest.write_text(json.dumps(data))
    fresh = _trainer(tiny_model_dir, tmp_path)
    assert ckpt.restore_latest(fresh.policy.model, fresh.optimizer, fresh.generator) == 1
    (tmp_path / "ck" / "round-000001" / "manifest.json").unlink()
    assert ckpt.restore_latest(fresh.policy.model, fresh.optimizer, fresh.generator) is None


def test_full_finetuning_trains_and_restores(tiny_model_dir: Path, tmp_path: Path) -> None:
    cfg = parse_config(tiny_config(tiny_model_dir, tmp_path, model={"lora": {"enabled": False}}))
    trainer = Trainer(cfg, load_policy(cfg.model))
    assert not hasattr(trainer.policy.model, "peft_config")  # no LoRA
    before = {n: p.detach().clone() for n, p in trainer.policy.model.named_parameters()}
    ckpt = Checkpointer(tmp_path / "ck")
    _train_and_save(trainer, ckpt, 2)
    after = dict(trainer.policy.model.named_parameters())
    assert any(not torch.equal(before[n], after[n]) for n in before)
    assert (tmp_path / "ck" / "round-000002" / "model.safetensors").is_file()
    fresh = Trainer(cfg, load_policy(cfg.model))
    assert ckpt.restore_latest(fresh.policy.model, fresh.optimizer, fresh.generator) == 2
    restored = dict(fresh.policy.model.named_parameters())
    assert all(torch.equal(after[n], restored[n]) for n in after)


def test_a_resume_moves_the_rounds_the_restore_undid(tmp_path: Path) -> None:
    """A node stopped after round 5 with its newest checkpoint at round 3 redoes rounds
    4 and 5: their first lines move to ``<name>.undone.jsonl`` and the file reads as if
    uninterrupted; later appends go to the rewritten file."""
    log = JsonLines(tmp_path / "metrics.jsonl")
    for r in range(1, 6):
        log.append({"round": r, "reward_mean": r / 10})
    log.append({"note": "no round: stays"})
    assert log.rewind(3) == 2
    log.append({"round": 4, "reward_mean": 0.9})
    log.close()
    assert [r.get("round") for r in _lines(tmp_path / "metrics.jsonl")] == [1, 2, 3, None, 4]
    assert [r["round"] for r in _lines(tmp_path / "metrics.undone.jsonl")] == [4, 5]
    assert JsonLines(tmp_path / "metrics.jsonl").rewind(4) == 0  # nothing after 4


def _lines(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()]

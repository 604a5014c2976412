"""Where a node's memory goes: resident memory after each stage of one process.

Runs, in this one process and with ``--threads`` torch threads, what a node does on a
config (default configs/node.yaml): imports, model load, the LoRA wrap, the trainer
(optimizer made, its state still empty), then ``--rounds`` rounds of rollout + update
as ``node.run_round`` does them. Each row is the resident memory (VmRSS) after the
stage, the peak (VmHWM) while it ran (the peak is reset before each stage through
/proc/self/clear_refs), and the change from the row before, all MiB. Rounds whose
groups carry no reward signal would make no optimizer step, so, unless
``--allow-skip``, a group without signal gets alternating 0/1 rewards for the update
(as in bench_round.py): every round then trains, and the first one makes the
optimizer's state.

Besides the rows it prints the tensor sizes (weights, trainable parameters, the
optimizer's state) and, last, what ``malloc_trim`` gives back: the part of the RSS
that is free memory the C allocator kept, not live data. Linux only (/proc).

    .venv/bin/python scripts/memory_profile.py                 # node.yaml, 5 rounds
    .venv/bin/python scripts/memory_profile.py --rounds 2 --model tests-tiny-model-dir
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from swarmnode.lab import REPO


def status_mb(field: str) -> float:
    """A field of /proc/self/status (VmRSS, VmHWM, ...), MiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return 0.0


def reset_peak() -> None:
    with contextlib.suppress(OSError):
        Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS


class Table:
    def __init__(self) -> None:
        self.last = status_mb("VmRSS")
        print(f"{'stage':<34} {'rss':>8} {'peak':>8} {'delta':>8} {'seconds':>8}", flush=True)
        self.row("python + argparse", 0.0)

    def row(self, stage: str, seconds: float) -> None:
        rss, peak = status_mb("VmRSS"), status_mb("VmHWM")
        print(
            f"{stage:<34} {rss:8.0f} {peak:8.0f} {rss - self.last:+8.0f} {seconds:8.1f}",
            flush=True,
        )
        self.last = rss
        reset_peak()


def tensor_mb(tensors: Any) -> float:
    seen: dict[int, int] = {}
    for t in tensors:
        seen[t.data_ptr()] = t.numel() * t.element_size()
    return sum(seen.values()) / 2**20


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", type=Path, default=REPO / "configs" / "node.yaml")
    p.add_argument("--model", help="override model.name (e.g. a tiny model folder)")
    p.add_argument("--rounds", type=int, default=5, help="rounds after the load (default 5)")
    p.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    p.add_argument("--allow-skip", action="store_true", help="train only groups with signal")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config field, e.g. train.micro_batch_tokens=192 (repeatable)",
    )
    p.add_argument(
        "--no-tune",
        action="store_true",
        help="keep glibc's default mmap/trim thresholds and arenas (the node tunes them)",
    )
    p.add_argument(
        "--no-trim",
        action="store_true",
        help="no malloc_trim after each round (the node trims after every round)",
    )
    return p.parse_args()


def import_stages(args: argparse.Namespace, table: Table) -> Any:
    """Import what a node imports, one row each (torch, transformers + peft, swarmnode
    with the config loaded, libp2p if the swarm is on); the config."""
    t0 = time.perf_counter()
    import torch

    torch.set_num_threads(args.threads)
    table.row("import torch", time.perf_counter() - t0)
    t0 = time.perf_counter()
    import peft  # noqa: F401
    import transformers  # noqa: F401
    from transformers import AutoModelForCausalLM  # noqa: F401

    table.row("import transformers, peft", time.perf_counter() - t0)
    t0 = time.perf_counter()
    import swarmnode.learn.model
    import swarmnode.learn.trainer
    import swarmnode.node  # noqa: F401  (what the daemon imports)
    from swarmnode.config import load_config

    overrides: dict[str, Any] = {"model.threads": args.threads}
    if args.model:
        overrides["model.name"] = args.model
    for item in args.set:
        key, _, value = item.partition("=")
        overrides[key] = yaml.safe_load(value)
    cfg = load_config(args.config, overrides)
    table.row("import swarmnode (+ reasoning_gym)", time.perf_counter() - t0)
    if cfg.swarm.enabled:
        t0 = time.perf_counter()
        import libp2p  # noqa: F401

        table.row("import libp2p (swarm.enabled)", time.perf_counter() - t0)
    return cfg


def build_trainer(cfg: Any, table: Table) -> tuple[Any, Any]:
    """The model, its LoRA wrap and the trainer, one row each: (policy, trainer)."""
    from swarmnode.learn.model import load_policy, wrap_lora
    from swarmnode.learn.trainer import Trainer

    t0 = time.perf_counter()
    plain = cfg.model.model_copy(
        update={"lora": cfg.model.lora.model_copy(update={"enabled": False})}
    )
    policy = load_policy(plain, seed=cfg.train.seed)
    table.row("model load (weights, tokenizer)", time.perf_counter() - t0)
    if cfg.model.lora.enabled:
        t0 = time.perf_counter()
        policy.model = wrap_lora(policy.model, cfg.model.lora, cfg.train.seed)
        policy.model.train()
        table.row("LoRA wrap", time.perf_counter() - t0)
    t0 = time.perf_counter()
    trainer = Trainer(cfg, policy)
    table.row("Trainer (task mix, optimizer)", time.perf_counter() - t0)
    return policy, trainer


def run_rounds(args: argparse.Namespace, trainer: Any, table: Table) -> int:
    """``--rounds`` rounds of rollout + update (+ malloc_trim), rows for each stage;
    the groups trained."""
    from swarmnode.learn.memory import release_free_memory

    trained = 0
    for r in range(1, args.rounds + 1):
        t0 = time.perf_counter()
        groups, _ = trainer.rollout(r)
        table.row(f"round {r} rollout (sampling)", time.perf_counter() - t0)
        if not args.allow_skip:
            groups = [
                g
                if g.has_signal
                else replace(g, rewards=[float(j % 2) for j in range(len(g.rewards))])
                for g in groups
            ]
        t0 = time.perf_counter()
        step = trainer.update(groups)
        trained += step.groups_trained
        table.row(f"round {r} update ({step.groups_trained} groups)", time.perf_counter() - t0)
        if not args.no_trim:
            t0 = time.perf_counter()
            release_free_memory()
            table.row(f"round {r} malloc_trim", time.perf_counter() - t0)
    return trained


def report(policy: Any, trainer: Any, trained: int) -> None:
    """The tensor sizes, then what malloc_trim gives back (the last line)."""
    from swarmnode.learn.memory import release_free_memory

    params = list(policy.model.parameters())
    trainable = [p for p in params if p.requires_grad]
    state = [v for s in trainer.optimizer.state.values() for v in s.values() if v.dim() > 0]
    print(
        f"tensors: weights {tensor_mb(params):.0f} MiB ({next(iter(params)).dtype}), "
        f"trainable {tensor_mb(trainable):.1f} MiB, optimizer state {tensor_mb(state):.1f} MiB",
        flush=True,
    )
    before = status_mb("VmRSS")
    trimmed = release_free_memory()
    after = status_mb("VmRSS")
    print(
        f"rss_mb={after:.0f} before_malloc_trim_mb={before:.0f} "
        f"malloc_trim_freed_mb={before - after:.0f} released={'yes' if trimmed else 'no'} "
        f"groups_trained={trained}",
        flush=True,
    )


def main() -> int:
    args = parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from swarmnode.learn.memory import tune_allocator

    if not args.no_tune:
        tune_allocator()  # first, as the node does: before any thread allocates
    reset_peak()
    table = Table()
    cfg = import_stages(args, table)
    policy, trainer = build_trainer(cfg, table)
    trained = run_rounds(args, trainer, table)
    report(policy, trainer, trained)
    return 0


if __name__ == "__main__":
    sys.exit(main())

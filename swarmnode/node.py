"""The daemon's lifecycle: load, resume, run rounds, checkpoint, stop cleanly.

The event loop (asyncio, on uvloop when installed) owns the lifecycle; every
heavy step (model load, generation, backward, checkpoint) runs in a worker thread,
so the loop stays free for the network and the control endpoint.

Invariants:
- SIGINT/SIGTERM only set ``stop``; generation and the update poll it, so a stop
  lands within a token or a micro-batch. An interrupted round is discarded whole.
- Shutdown happens in ``finally``: the last finished round is checkpointed, the
  metrics file closed. A failure in a round propagates (after that save).
- Rounds are numbered from 1; a checkpoint after round k resumes at round k + 1.
  ``max_rounds`` is the last round number to run, so a resumed node does not
  overshoot.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import threading
import time
from pathlib import Path
from typing import Any

from swarmnode.checkpoint import Checkpointer
from swarmnode.config import Config, dump_config
from swarmnode.generate import GenerationCancelled
from swarmnode.metrics import MetricsLog, progress_line, reward_summary
from swarmnode.trainer import Trainer

log = logging.getLogger(__name__)


def build_trainer(cfg: Config) -> Trainer:
    from swarmnode.model import load_policy

    return Trainer(cfg, load_policy(cfg.model, seed=cfg.train.seed))


def run_round(trainer: Trainer, round_index: int, stop: threading.Event) -> dict[str, Any]:
    """Generate, score and train on this round's local groups; return its metrics."""
    groups, gen = trainer.rollout(round_index, should_stop=stop.is_set)
    t0 = time.perf_counter()
    step = trainer.update(groups, should_stop=stop.is_set)
    train_seconds = time.perf_counter() - t0
    return {
        "round": round_index,
        **reward_summary(groups, trainer.cfg.train.format_reward_weight),
        "groups_trained": step.groups_trained,
        "groups_skipped": step.groups_skipped,
        "gen_seconds": round(gen.seconds, 3),
        "train_seconds": round(train_seconds, 3),
        "tokens_generated": gen.tokens,
        "tokens_trained": step.tokens_trained,
        "loss": round(step.loss, 6),
        "kl": round(step.kl, 6),
        "grad_norm": round(step.grad_norm, 6),
        "clip_fraction": round(step.clip_fraction, 6),
    }


class Node:
    """One swarmnode process."""

    def __init__(self, cfg: Config, echo: bool = True) -> None:
        self.cfg = cfg
        self.data_dir = Path(cfg.node.data_dir)
        self.stop = threading.Event()
        self.echo = echo
        self.round = 0  # last finished round

    def _install_signals(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self._on_signal, sig)

    def _on_signal(self, sig: int) -> None:
        if self.stop.is_set():
            return
        log.warning("%s received: stopping after saving a checkpoint", signal.Signals(sig).name)
        self.stop.set()

    async def run(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        dump_config(self.cfg, self.data_dir / "config.resolved.yaml")
        self._install_signals()
        trainer = await asyncio.to_thread(build_trainer, self.cfg)
        ckpt = Checkpointer(self.data_dir / "checkpoints", keep=self.cfg.checkpoint.keep)
        restored = await asyncio.to_thread(
            ckpt.restore_latest, trainer.policy.model, trainer.optimizer, trainer.generator
        )
        self.round = saved = restored or 0
        if restored:
            log.info("resuming at round %d", restored + 1)
        metrics = MetricsLog(self.data_dir / "metrics.jsonl")
        last = self.cfg.node.max_rounds
        try:
            while not self.stop.is_set() and (last is None or self.round < last):
                try:
                    rec = await asyncio.to_thread(run_round, trainer, self.round + 1, self.stop)
                except (GenerationCancelled, InterruptedError):
                    break  # stop requested mid-round: the round is discarded
                self.round = rec["round"]
                metrics.write(rec)
                if self.echo:
                    print(progress_line(rec), flush=True)
                if self.round % self.cfg.checkpoint.every_rounds == 0:
                    await asyncio.to_thread(self._save, ckpt, trainer)
                    saved = self.round
        finally:
            if self.round > saved:
                self._save(ckpt, trainer)
            metrics.close()

    def _save(self, ckpt: Checkpointer, trainer: Trainer) -> None:
        path = ckpt.save(self.round, trainer.policy.model, trainer.optimizer, trainer.generator)
        log.info("checkpoint %s", path.name)


def run(cfg: Config) -> None:
    """Run a node until it is stopped or reaches ``max_rounds``."""
    try:
        import uvloop

        runner = asyncio.Runner(loop_factory=uvloop.new_event_loop)
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux/macOS
        runner = asyncio.Runner()
    with runner:
        runner.run(Node(cfg).run())

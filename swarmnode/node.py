"""The daemon's lifecycle: load, resume, run rounds, share, checkpoint, stop cleanly.

The event loop (asyncio, on uvloop when installed) owns the lifecycle and the
network glue (``swarm.SwarmLink``); every heavy step (model load, generation,
verification, backward, checkpoint) runs in a worker thread, so the loop stays free
for the control endpoint and ingestion, and libp2p runs in its own thread anyway.

One round: rollout -> publish the round's groups (one message) -> compose the update
from I local + J external groups (``SwarmSampler``) -> GRPO step -> metrics.

Invariants:
- SIGINT/SIGTERM only set ``stop``; generation and the update poll it, so a stop
  lands within a token or a micro-batch. An interrupted round is discarded whole.
- Shutdown happens in ``finally``: the last finished round is checkpointed, the
  metrics file closed, ingestion cancelled, libp2p and the control socket stopped,
  each with a timeout. A failure in a round propagates (after that save).
- Fail-stop on the network side: a crashed libp2p thread or ingest task sets
  ``stop``; the node checkpoints and ``run`` raises ``SwarmError`` (exit 1). While
  it goes down, ``swarmnode status`` shows ``swarm_failure``.
- Rounds are numbered from 1; a checkpoint after round k resumes at round k + 1.
  ``max_rounds`` is the last round number to run, so a resumed node does not
  overshoot.
- The control socket answers from the start (state ``loading`` while the model
  loads), also for a node that trains alone.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from swarmnode.checkpoint import Checkpointer
from swarmnode.config import Config, dump_config
from swarmnode.generate import GenerationCancelled
from swarmnode.groups import RolloutGroup
from swarmnode.grpo import StepStats
from swarmnode.metrics import MetricsLog, progress_line, reward_summary
from swarmnode.p2p.control import ControlServer
from swarmnode.sampler import Composition
from swarmnode.swarm import SwarmLink
from swarmnode.trainer import Trainer

log = logging.getLogger(__name__)
T = TypeVar("T")


def build_trainer(cfg: Config) -> Trainer:
    from swarmnode.model import load_policy

    return Trainer(cfg, load_policy(cfg.model, seed=cfg.train.seed))


def compose_and_update(
    trainer: Trainer,
    link: SwarmLink,
    round_index: int,
    local: list[RolloutGroup],
    stop: threading.Event,
) -> tuple[Composition, StepStats]:
    """Pick this round's I local + J external groups and take one GRPO step on them."""
    comp = link.compose(round_index, local)
    return comp, trainer.update(comp.groups, should_stop=stop.is_set)


class Node:
    """One swarmnode trainer process."""

    def __init__(self, cfg: Config, echo: bool = True) -> None:
        self.cfg = cfg
        self.data_dir = Path(cfg.node.data_dir)
        self.stop = threading.Event()
        self.echo = echo
        self.round = 0  # last finished round
        self.state = "starting"
        self.last: dict[str, Any] | None = None  # last round's metrics record
        self.link = SwarmLink(cfg, self.data_dir, self.stop.set)
        # All model work on one long-lived thread: torch keeps per-thread state, and
        # a new thread per call would grow one malloc arena each (RSS creep).
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="swarmnode-trainer")

    async def _work(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(*args)`` on the trainer thread without blocking the event loop."""
        return await asyncio.get_running_loop().run_in_executor(self._executor, partial(fn, *args))

    def _install_signals(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self._on_signal, sig)

    def _on_signal(self, sig: int) -> None:
        if self.stop.is_set():
            return
        log.warning("%s received: stopping after saving a checkpoint", signal.Signals(sig).name)
        self.stop.set()

    def status(self) -> dict[str, Any]:
        """The node part of ``swarmnode status``."""
        return {
            "role": "trainer",
            "name": self.cfg.node.name,
            "state": self.state,
            "round": self.round,
            "max_rounds": self.cfg.node.max_rounds,
            "last_round": self.last,
            **self.link.status(),
        }

    async def run(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._install_signals()
        control = ControlServer(self.data_dir, self.link.transport, self.status)
        await control.start()  # refuses a second node on the same data_dir: before any write
        trainer: Trainer | None = None
        ckpt = Checkpointer(self.data_dir / "checkpoints", keep=self.cfg.checkpoint.keep)
        saved = 0
        metrics: MetricsLog | None = None
        try:
            dump_config(self.cfg, self.data_dir / "config.resolved.yaml")
            metrics = MetricsLog(self.data_dir / "metrics.jsonl")
            await self.link.start_network()  # peers may connect while the model loads
            self.state = "loading"
            trainer = await self._work(build_trainer, self.cfg)
            restored = await self._work(
                ckpt.restore_latest, trainer.policy.model, trainer.optimizer, trainer.generator
            )
            self.round = saved = restored or 0
            if restored:
                log.info("resuming at round %d", restored + 1)
            self.link.start_ingest(trainer.score)
            self.state = "training"
            last = self.cfg.node.max_rounds
            while not self.stop.is_set() and (last is None or self.round < last):
                started = time.monotonic()
                try:
                    rec = await self._round(trainer, self.round + 1)
                except (GenerationCancelled, InterruptedError):
                    break  # stop requested mid-round: the round is discarded
                self.round, self.last = rec["round"], rec
                metrics.write(rec)
                if self.echo:
                    print(self._progress(rec), flush=True)
                if self.round % self.cfg.checkpoint.every_rounds == 0:
                    await self._work(self._save, ckpt, trainer)
                    saved = self.round
                await self._pace(started)
        finally:
            self.state = "stopping"
            try:
                if trainer is not None and self.round > saved:
                    await self._work(self._save, ckpt, trainer)
            finally:
                if metrics is not None:
                    metrics.close()
                await self.link.stop()
                await control.stop()
                self._executor.shutdown(wait=False)
        self.link.check()

    async def _round(self, trainer: Trainer, r: int) -> dict[str, Any]:
        groups, gen = await self._work(trainer.rollout, r, self.stop.is_set)
        published = await self.link.publish(r, groups)
        t0 = time.perf_counter()
        comp, step = await self._work(compose_and_update, trainer, self.link, r, groups, self.stop)
        return {
            "round": r,
            **reward_summary(groups, self.cfg.train.format_reward_weight),
            "groups_trained": step.groups_trained,
            "groups_skipped": step.groups_skipped,
            "gen_seconds": round(gen.seconds, 3),
            "train_seconds": round(time.perf_counter() - t0, 3),
            "tokens_generated": gen.tokens,
            "tokens_trained": step.tokens_trained,
            "tokens_masked": step.tokens_masked,
            "loss": round(step.loss, 6),
            "kl": round(step.kl, 6),
            "grad_norm": round(step.grad_norm, 6),
            "clip_fraction": round(step.clip_fraction, 6),
            **self.link.round_metrics(comp, published),
        }

    async def _pace(self, started: float) -> None:
        """Wait out ``swarm.min_round_s`` (in short naps, so a stop is prompt)."""
        end = started + self.cfg.swarm.min_round_s
        while not self.stop.is_set() and (left := end - time.monotonic()) > 0:
            await asyncio.sleep(min(0.2, left))

    def _progress(self, rec: dict[str, Any]) -> str:
        line = progress_line(rec)
        if self.link.transport is not None:
            line += (
                f"  ext {rec['external_groups']} from {rec['external_peers']}p"
                f"  queue {rec.get('queue_groups', 0)}  peers {rec.get('peers', 0)}"
            )
        return line

    def _save(self, ckpt: Checkpointer, trainer: Trainer) -> None:
        path = ckpt.save(self.round, trainer.policy.model, trainer.optimizer, trainer.generator)
        log.info("checkpoint %s", path.name)


def _runner() -> asyncio.Runner:
    try:
        import uvloop

        return asyncio.Runner(loop_factory=uvloop.new_event_loop)
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux/macOS
        return asyncio.Runner()


def run(cfg: Config) -> None:
    """Run a trainer node until it is stopped or reaches ``max_rounds``."""
    with _runner() as runner:
        runner.run(Node(cfg).run())

"""The trainer daemon: load, resume, run rounds, share, checkpoint, stop cleanly.

The event loop (run by ``daemon.run_daemon``) owns the lifecycle and the network side
(``exchange.RolloutExchange``); every heavy step (model load, generation, batch
composition, backward, checkpoint) runs on one trainer thread, so the loop stays
free for the control endpoint and the ingest pump.

One round, in the order the data flows:
rollout (``Trainer.rollout``) -> ``RolloutExchange.publish`` (one message) ->
``SwarmSampler.compose`` (I local + J external groups, from the ``IngestQueue`` the
exchange fills) -> ``Trainer.update`` (one GRPO step) -> a ``RoundRecord`` in
metrics.jsonl.

Invariants:
- ``stop`` (set by a signal, or by the network side failing) is polled by generation
  (per token) and by the update (per layer, ``interrupt.stop_points``), so a stop
  lands within a token or one layer's forward/backward. An interrupted round is
  discarded whole.
- Shutdown happens in ``finally``: the last finished round is checkpointed, the
  metrics file closed, the exchange (pump + transport) and the control socket
  stopped, each with a timeout. A failure in a round propagates (after that save).
- Fail-stop on the network side: the node checkpoints and ``run`` raises
  ``SwarmError`` (exit 1); while it goes down, ``swarmnode status`` shows
  ``swarm_failure``.
- Rounds are numbered from 1; a checkpoint after round k resumes at round k + 1.
  ``max_rounds`` is the last round number to run, so a resumed node does not
  overshoot.
- The control socket answers from the start (state ``loading`` while the model
  loads), also for a node that trains alone. Peers' groups are verified from the
  start too: the scorer needs no model.
- Wired at construction: the ingest queue reports its verdicts to the transport's
  peer scores from the moment it is made; the control socket and the monitor get
  ``status`` (one ``ops.status.TrainerStatus``, built there only), never the node.
- ``trained_from`` keeps at most ``TRAINED_FROM_PEERS`` peers, the least recently
  trained on forgotten first (counted in status).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from swarmnode.config import Config, dump_config
from swarmnode.learn.checkpoint import Checkpointer
from swarmnode.learn.collapse import CollapseWatch
from swarmnode.learn.curriculum import Curriculum
from swarmnode.learn.generate import GenerationCancelled
from swarmnode.learn.memory import release_free_memory, tune_allocator
from swarmnode.learn.metrics import (
    JsonLines,
    MetricsLog,
    RoundRecord,
    progress_line,
    read_rounds,
    reward_summary,
    rss_mb,
    trained_items,
)
from swarmnode.learn.replay import ReplayBuffer
from swarmnode.learn.rewards import make_scorer
from swarmnode.learn.tasks import SharedSchedule
from swarmnode.learn.trainer import Trainer
from swarmnode.ops.control import ControlServer
from swarmnode.ops.gcclock import gc_clock
from swarmnode.ops.monitor import MonitorServer, start_monitor
from swarmnode.ops.status import History, RoundHistory, SapoSummary, TrainerStatus
from swarmnode.p2p.netshare import TRAINER_THREAD, batch_thread
from swarmnode.share.completion import AnswerBook, GroupCompleter
from swarmnode.share.exchange import RolloutExchange
from swarmnode.share.ingest import Catalog, IngestQueue
from swarmnode.share.sampler import PeerLRU, SwarmSampler
from swarmnode.share.transport import Transport

log = logging.getLogger(__name__)
T = TypeVar("T")
TRAINED_FROM_PEERS = 4096  # trained_from's bound: the peers it counts groups for


def build_trainer(cfg: Config) -> Trainer:
    from swarmnode.learn.model import load_policy

    return Trainer(cfg, load_policy(cfg.model, seed=cfg.train.seed))


def with_node_seeds(cfg: Config) -> Config:
    """``cfg`` with its seeds offset by this node's identity when ``node.distinct_seeds``.

    Nodes started from one config would otherwise draw the same items and, on the
    same model, sample the same completions: peers' groups would repeat our own. The
    offset comes from the peer ID (the identity key is made here if it does not exist
    yet), so a restarted node keeps its seeds; the result has ``distinct_seeds`` off,
    so its resolved config, reloaded, gives the same seeds.
    """
    if not cfg.node.distinct_seeds:
        return cfg
    import hashlib

    from swarmnode.p2p.identity import identity_path, load_or_create_identity, peer_id_of

    key_pair, _ = load_or_create_identity(
        identity_path(Path(cfg.node.data_dir), cfg.swarm.key_file)
    )
    peer = peer_id_of(key_pair)
    offset = int.from_bytes(hashlib.sha256(peer.encode()).digest()[:4], "big") % (2**30)
    log.info("seeds offset by %d from this node's peer ID %s", offset, peer)
    return cfg.model_copy(
        update={
            "node": cfg.node.model_copy(update={"distinct_seeds": False}),
            "tasks": cfg.tasks.model_copy(update={"seed": (cfg.tasks.seed + offset) % 2**31}),
            "train": cfg.train.model_copy(update={"seed": cfg.train.seed + offset}),
        }
    )


def default_transport(cfg: Config, data_dir: Path) -> Transport | None:
    """The libp2p transport when ``swarm.enabled``, else None (the node trains alone)."""
    if not cfg.swarm.enabled:
        return None
    if cfg.swarm.net_process:
        from swarmnode.p2p.netproc import ProcessTransport

        return ProcessTransport(cfg.swarm, data_dir)
    from swarmnode.p2p.transport import GossipTransport

    return GossipTransport(cfg.swarm, data_dir)


class Node:
    """One swarmnode trainer process (``transport`` given: tests, the in-memory one)."""

    def __init__(self, cfg: Config, echo: bool = True, transport: Transport | None = None) -> None:
        cfg = self.cfg = with_node_seeds(cfg)
        self.data_dir = Path(cfg.node.data_dir)
        self.stop = threading.Event()
        self.echo = echo
        self.round = 0  # last finished round
        self.state = "starting"
        self.last: RoundRecord | None = None
        self.history = RoundHistory()  # recent rounds and totals (the monitor)
        self.monitor: MonitorServer | None = None  # /metrics and the dashboard
        # peer -> external groups trained on, bounded
        self.trained_from: PeerLRU[int] = PeerLRU(TRAINED_FROM_PEERS, default=0)
        self.transport = (
            transport if transport is not None else default_transport(cfg, self.data_dir)
        )
        self.exchange: RolloutExchange | None = None
        self.answers: AnswerBook | None = None  # peers' answers by item (group completion)
        self.schedule: SharedSchedule | None = None  # the swarm's shared items
        self.completer: GroupCompleter | None = None  # made once the tokenizer is loaded
        self.curriculum: Curriculum | None = None  # made once the task mix exists
        self.collapse: CollapseWatch | None = None  # own answers per dataset, bounded
        self._items: JsonLines | None = None  # trained_items.jsonl, open while running
        queue: IngestQueue | None = None
        if self.transport is not None:
            scorer = make_scorer(cfg.train.format_reward_weight, cfg.partial_credit_datasets())
            catalog = Catalog([*cfg.tasks.datasets, *cfg.sapo.extra_catalog])
            held = cfg.tasks.heldout_percent
            if cfg.sapo.complete_groups:
                self.answers = AnswerBook(heldout_percent=held)
            scores = self.transport.peer_scores  # ingestion's verdicts move senders' scores
            queue = IngestQueue(
                cfg.sapo,
                catalog,
                scorer,
                answers=self.answers,
                verdicts=None if scores is None else scores.report,
                heldout_percent=held,
            )
            self.exchange = RolloutExchange(cfg, self.transport, queue, self.stop.set)
        self.replay = (
            ReplayBuffer(cfg.sapo.replay_size, cfg.sapo.replay_uses, cfg.sapo.freshness_s)
            if cfg.sapo.self_replay
            else None
        )
        self.sampler = SwarmSampler(cfg.sapo, queue, seed=cfg.train.seed, replay=self.replay)
        # All model work on one long-lived thread: torch keeps per-thread state, and
        # a new thread per call would grow one malloc arena each (RSS creep).
        # With batch_threads it runs under SCHED_OTHER whatever the thread that started
        # it; without, the node leaves every thread's policy as it was launched with.
        self._executor = ThreadPoolExecutor(
            1,
            thread_name_prefix=TRAINER_THREAD,
            initializer=partial(batch_thread, False) if cfg.swarm.batch_threads else None,
        )

    async def _work(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(*args)`` on the trainer thread without blocking the event loop."""
        return await asyncio.get_running_loop().run_in_executor(self._executor, partial(fn, *args))

    def status(self, history: bool = False) -> TrainerStatus:
        """What this node says about itself (``swarmnode status``, the monitor); with
        ``history``, also the dashboard's curves and swarm view."""
        cfg, ex = self.cfg, self.exchange
        adaptive = cfg.sapo.mode == "adaptive"
        trust = self.sampler.peer_trust  # written by the trainer thread: read a snapshot
        view = None
        if history:
            peers = [] if ex is None else ex.peers.snapshot(self.trained_from)
            view = History(self.history.curves(), peers)
        return TrainerStatus(
            name=cfg.node.name,
            state=self.state,
            round=self.round,
            max_rounds=cfg.node.max_rounds,
            model=cfg.model.name,
            swarm=cfg.swarm.name if self.transport is not None else None,
            sapo=SapoSummary(cfg.sapo.mode, cfg.sapo.local_groups, cfg.sapo.external_groups),
            last_round=self.last,
            trained_from=self.trained_from.snapshot(),
            trained_from_forgotten=self.trained_from.forgotten,
            peer_trust={p: round(t, 3) for p, t in trust.snapshot().items()} if adaptive else None,
            peer_trust_forgotten=trust.forgotten,
            exchange=None if ex is None else ex.status(),
            totals=dict(self.history.totals),
            rss_mb=rss_mb(),
            gc=gc_clock().snapshot(),
            checkpoint_age_s=self._checkpoint_age(),
            now=time.time(),
            history=view,
        )

    def _checkpoint_age(self) -> float | None:
        found = Checkpointer(self.data_dir / "checkpoints").checkpoints()
        return round(time.time() - found[0][1].stat().st_mtime, 1) if found else None

    async def run(self) -> None:
        tune_allocator()  # before the trainer thread's first allocation (docs/memory.md)
        gc_clock()  # from the start: what the collector costs, in the status
        if self.cfg.swarm.batch_threads:  # this thread and those it starts but the trainer's
            batch_thread()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        control = ControlServer(self.data_dir, self.status)
        await control.start()  # refuses a second node on the same data_dir: before any write
        trainer: Trainer | None = None
        ckpt = Checkpointer(self.data_dir / "checkpoints", keep=self.cfg.checkpoint.keep)
        saved = 0
        metrics: MetricsLog | None = None
        items: JsonLines | None = None
        try:
            dump_config(self.cfg, self.data_dir / "config.resolved.yaml")
            self.monitor = await start_monitor(self.cfg.monitor, partial(self.status, history=True))
            metrics = MetricsLog(self.data_dir / "metrics.jsonl")
            items = self._items = JsonLines(self.data_dir / "trained_items.jsonl")
            if self.exchange is not None:
                await self.exchange.start()  # peers may connect while the model loads
            self.state = "loading"
            trainer = await self._work(build_trainer, self.cfg)
            restored = await self._work(
                ckpt.restore_latest, trainer.policy.model, trainer.optimizer, trainer.generator
            )
            self.round = saved = restored or 0
            if restored:
                log.info("resuming at round %d", restored + 1)
            for jl in (metrics, items):  # rounds the restore undid (stopped before a save)
                if moved := jl.rewind(saved):
                    log.info(
                        "moved %d lines of rounds after %d to %s",
                        moved,
                        saved,
                        jl.undone_path.name,
                    )
            self._tasks_side(trainer, restored or 0)
            if self.answers is not None:
                sapo = self.cfg.sapo
                self.completer = GroupCompleter(
                    self.answers,
                    trainer.encode_completion,
                    sapo.complete_max_per_peer,
                    sapo.complete_max,
                    max_pending=self.cfg.rollout.questions_per_round,
                )
            self.state = "training"
            last = self.cfg.node.max_rounds
            while not self.stop.is_set() and (last is None or self.round < last):
                started = time.monotonic()
                try:
                    rec = await self._round(trainer, self.round + 1)
                except (GenerationCancelled, InterruptedError):
                    break  # stop requested mid-round: the round is discarded
                self.round, self.last = rec.round, rec
                self.history.add(rec)
                metrics.write(rec)
                if self.echo:
                    print(progress_line(rec, self.exchange is not None), flush=True)
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
                for log_file in (metrics, items):
                    if log_file is not None:
                        log_file.close()
                if self.exchange is not None:
                    await self.exchange.stop()
                if self.monitor is not None:
                    await self.monitor.stop()
                await control.stop()
                self._executor.shutdown(wait=False)
        if self.exchange is not None:
            self.exchange.check()

    async def _round(self, trainer: Trainer, r: int) -> RoundRecord:
        shared = self.schedule.next(self.cfg.sapo.shared_items) if self.schedule else []
        groups, gen = await self._work(trainer.rollout, r, self.stop.is_set, shared)
        published = await self.exchange.publish(r, groups) if self.exchange else 0
        t0 = time.perf_counter()
        local, completed = groups, 0
        if self.completer is not None:  # peers' better answers join no-signal groups
            local, completed = await self._work(self.completer.prepare, groups)
        comp = await self._work(self.sampler.compose, r, local)
        step = await self._work(trainer.update, comp.groups, self.stop.is_set)
        if self._items is not None:
            for line in trained_items(r, comp.groups):
                self._items.append(line)
        if self.replay is not None:  # after this round's update: never replayed into it
            self.replay.add(groups)
        await self._work(release_free_memory)  # the round's freed tensors: back to the OS
        if self.curriculum is not None:  # levels for the next round
            self.curriculum.observe(groups)
        if self.collapse is not None:
            self.collapse.observe(groups)
        by_peer = comp.by_peer()
        for peer, n in by_peer.items():
            self.trained_from[peer] += n
        reward_mean, accuracy, format_reward = reward_summary(
            groups, self.cfg.train.format_reward_weight
        )
        rec = RoundRecord(
            round=r,
            reward_mean=reward_mean,
            accuracy=accuracy,
            format_reward=format_reward,
            gen_seconds=round(gen.seconds, 3),
            tokens_generated=gen.tokens,
            groups_trained=step.groups_trained,
            groups_skipped=step.groups_skipped,
            train_seconds=round(time.perf_counter() - t0, 3),
            tokens_trained=step.tokens_trained,
            tokens_masked=step.tokens_masked,
            is_weighted=step.weighted,
            is_weight_mean=step.weight_sum / step.weighted if step.weighted else None,
            loss=round(step.loss, 6),
            kl=round(step.kl, 6),
            grad_norm=round(step.grad_norm, 6),
            local_signal=sum(g.has_signal for g in groups),
            levels=self.curriculum.levels() if self.curriculum else {},
            collapsed=self.collapse.collapsed() if self.collapse else [],
            local_groups=comp.local,
            external_groups=comp.external,
            external_peers=comp.external_peers,
            external_shortfall=comp.shortfall,
            external_by_peer=by_peer,
            replay_groups=comp.replayed,
            completed_groups=completed,
            completions_cut=trainer.completions_cut,
            published_bytes=published,
            rss_mb=rss_mb(),
        )
        return self.exchange.status().with_figures(rec) if self.exchange else rec

    def _tasks_side(self, trainer: Trainer, restored: int) -> None:
        """The shared schedule and the curriculum: both follow the trainer's task mix."""
        cfg = self.cfg
        self.collapse = CollapseWatch(trainer.tasks.regenerate)
        if cfg.tasks.curriculum.enabled:
            self.curriculum = Curriculum(
                cfg.tasks.curriculum, trainer.tasks, cfg.train.format_reward_weight
            )
            done = [r for r in read_rounds(self.data_dir / "metrics.jsonl") if r.round == restored]
            if done:
                self.curriculum.restore(done[-1].levels)
        if self.transport is not None and cfg.sapo.shared_items:
            self.schedule = SharedSchedule(
                cfg.swarm.name, trainer.tasks, cfg.sapo.schedule_period_s
            )

    async def _pace(self, started: float) -> None:
        """Wait out ``swarm.min_round_s`` (in short naps, so a stop is prompt)."""
        end = started + self.cfg.swarm.min_round_s
        while not self.stop.is_set() and (left := end - time.monotonic()) > 0:
            await asyncio.sleep(min(0.2, left))

    def _save(self, ckpt: Checkpointer, trainer: Trainer) -> None:
        path = ckpt.save(self.round, trainer.policy.model, trainer.optimizer, trainer.generator)
        log.info("checkpoint %s", path.name)

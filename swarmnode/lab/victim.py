"""The measuring side shared by scripts/bench_flood.py and scripts/bench_scale.py.

A victim node (a ``swarmnode start`` process on the tiny test model or a named one,
optionally alone on the first CPU), the honest peer that publishes a realistic batch
each time the victim finishes a round (within ``OwnPace``, as a node would), reading
the victim's rounds, status and per-thread CPU, and the bootstrap interval of a
round-time ratio. Every wait has a deadline; a victim that exits ends the bench with
its log's tail.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from swarmnode.config import SwarmConfig, parse_config
from swarmnode.lab import REPO
from swarmnode.lab.bench_swarm import TASKS, node_cfg, peer_batch
from swarmnode.learn.metrics import RoundRecord, read_rounds
from swarmnode.learn.rewards import make_scorer
from swarmnode.learn.tasks import TaskMix
from swarmnode.ops.control import ControlError, query_status
from swarmnode.p2p.netproc import process_cpu_s, stat_times
from swarmnode.p2p.transport import GossipTransport
from swarmnode.share.publish_rate import OwnPace
from swarmnode.share.wire import encode_batch

# The victim's sapo.freshness_s: a phase's flood groups expire before the next phase
# (``Victim.settle``), not to take the next phase's slots; honest groups wait a round.
FRESHNESS_S = 60.0


def counted_in(status: dict[str, Any]) -> int:
    """Every message the victim read off a stream, before any gate (``msgs_read``:
    each ends delivered, dropped or rejected, each counted)."""
    return int(status["swarm"]["counters"].get("msgs_read", 0))


async def shut_down(
    victim: Victim,
    children: list[subprocess.Popen[bytes]],
    stop: asyncio.Event,
    honest: asyncio.Task[None] | None,
) -> None:
    """Kill the attacking / forwarding processes, stop the honest peer, stop the node."""
    for child in children:
        if child.poll() is None:
            child.kill()
    stop.set()
    if honest is not None:
        await asyncio.wait_for(honest, 30)
    victim.proc.terminate()
    victim.proc.wait(timeout=60)


async def honest_peer(
    addr: str,
    tmp: Path,
    node_data: Path,
    stop: asyncio.Event,
    q: int,
    g: int,
    ids: list[str],
    published: list[int],
) -> None:
    """Publishes one realistic batch each time the victim finishes a round, within
    ``OwnPace`` (as the node's own exchange does): an honest peer that published
    faster than the victim's per-originator rate would be rate-limited, scored down
    and disconnected by it, and its groups would be missing from every later phase."""
    cfg = SwarmConfig(
        enabled=True, listen=["/ip4/127.0.0.1/tcp/0"], bootstrap=[addr], discovery_interval_s=0.5
    )
    peer = GossipTransport(cfg, tmp / "honest")
    mix = TaskMix(parse_config({"tasks": {**TASKS, "seed": 1000}}).tasks)
    score = make_scorer(0.0)  # honest: the rewards it claims are the ones the victim finds
    await peer.start()
    ids.append(peer.peer_id)
    pace = OwnPace(cfg.origin_msgs_per_s, cfg.origin_msgs_burst, cfg.origin_groups_per_s)
    rng, seen = random.Random(0), 0
    try:
        while not stop.is_set():
            n = len(read_rounds(node_data / "metrics.jsonl"))
            for r in range(seen + 1, n + 1):
                if not pace.admit(q):
                    continue
                groups = peer_batch(mix, r, q, g, 0, rng)
                for grp in groups:
                    grp.rewards = score(grp.completions, mix.regenerate(grp.ref))[0]
                await peer.publish(encode_batch("default", r, groups))
                published[0] += 1
            seen = n
            await asyncio.sleep(0.05)
    finally:
        await peer.stop()


class Victim:
    def __init__(self, proc: subprocess.Popen[bytes], data: Path, log: Path) -> None:
        self.proc, self.data, self.log = proc, data, log

    def rounds(self) -> list[RoundRecord]:
        if self.proc.poll() is not None:
            raise SystemExit(f"victim exited: {self.log.read_text()[-3000:]}")
        return read_rounds(self.data / "metrics.jsonl")

    def status(self) -> dict[str, Any]:
        return query_status(self.data, timeout=10.0)

    def pids(self) -> list[int]:
        """The node's process and its children (the network process, with
        ``swarm.net_process``): what the node costs is all of them."""
        try:
            kids = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children").read_text()
        except OSError:
            kids = ""
        return [self.proc.pid, *map(int, kids.split())]

    def cpu_s(self) -> float:
        """CPU seconds the node's processes have used (all their threads): what a flood
        costs the node itself, apart from the attacker's own CPU on this shared machine."""
        return sum(process_cpu_s(pid) or 0.0 for pid in self.pids())

    def _tasks(self) -> list[Path]:
        out: list[Path] = []
        for pid in self.pids():
            with contextlib.suppress(OSError):  # a child that ended
                out.extend(Path(f"/proc/{pid}/task").iterdir())
        return out

    def thread_times(self) -> dict[str, tuple[float, float, int]]:
        """Each thread's (user seconds, system seconds, minor page faults) so far, by
        thread id."""
        out = {}
        for task in self._tasks():
            times = stat_times(task / "stat")
            if times is not None:  # None: the thread ended
                out[task.name] = times
        return out

    def thread_switches(self) -> dict[str, tuple[int, int]]:
        """Each thread's (voluntary, involuntary) context switches so far, by thread id:
        its wake-ups, and the times the kernel took the core from it."""
        out = {}
        for task in self._tasks():
            try:
                lines = (task / "status").read_text().splitlines()
            except OSError:  # the thread ended
                continue
            n = {k: int(v) for k, _, v in (ln.partition(":") for ln in lines) if "ctxt" in k}
            out[task.name] = (n["voluntary_ctxt_switches"], n["nonvoluntary_ctxt_switches"])
        return out

    async def address(self, ip: str | None = None) -> str:
        """Its first listen address (on ``ip`` if given), once its transport is up."""
        while True:
            self.rounds()  # exits if the process died
            try:
                addrs = [str(a) for a in self.status()["swarm"]["listen_addrs"]]
                return next(a for a in addrs if ip is None or f"/ip4/{ip}/" in a)
            except (ControlError, KeyError, TypeError, StopIteration):
                await asyncio.sleep(0.5)

    async def settle(self, honest: str, timeout: float) -> None:
        """Until no group but the honest peer's is queued (the flood's expire after
        ``FRESHNESS_S``), so that the next phase starts clean; unmeasured."""
        deadline = time.monotonic() + timeout
        while set(self.status()["node"]["ingest"]["per_peer"]) - {honest}:
            if time.monotonic() > deadline:
                raise SystemExit(f"victim: flood groups still queued after {timeout:.0f}s")
            await asyncio.sleep(1.0)

    async def wait_rounds(self, n: int, timeout: float) -> list[RoundRecord]:
        deadline = time.monotonic() + timeout
        while len(recs := self.rounds()) < n:
            if time.monotonic() > deadline:
                raise SystemExit(f"victim: fewer than {n} rounds in {timeout:.0f}s")
            await asyncio.sleep(0.2)
        return recs


MODEL_HELP = (
    "the victim's model.name (default: the tiny test model, whose 0.2-0.4 s rounds magnify"
    " per-message costs; embedded:smollm2-135m is what a user's CPU node runs)"
)


NET_PROCESS_HELP = (
    "the node's swarm.net_process on: its libp2p host in a child process (the CPU, threads"
    " and context switches reported are the node's and its child's together)"
)


PIN_HELP = (
    "run the victim alone on the first CPU and this process, the honest peer and the"
    " attackers on the others, as if they were other machines (on a 2-core machine"
    " they otherwise take CPU from the victim that a remote attacker could not)"
)


def pin_cpus(pin: bool) -> set[int] | None:
    """With ``--pin``: move this process (and so every child it starts after this) off
    the first CPU and return ``{first}``, the victim's; None without it."""
    if not pin:
        return None
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        raise SystemExit("--pin needs at least 2 CPUs")
    os.sched_setaffinity(0, cpus[1:])
    return {cpus[0]}


def start_node(
    tmp: Path,
    name: str,
    external: int,
    questions: int,
    model: str | None = None,
    cpus: set[int] | None = None,
    verify: str = "on_arrival",
    net_share: float | None = 0.1,
    batch_threads: bool = True,
    net_process: bool = False,
    idontwant: bool = False,
    listen: list[str] | None = None,
) -> Victim:
    """A ``swarmnode start`` process (1 thread), data and log in tmp, on ``model`` (a
    name or folder as in ``model.name``) or, by default, the tiny test model; on
    ``cpus`` only if given (set in the child before exec, so all its threads);
    ``verify`` is its ``sapo.verify``; ``net_share``, ``batch_threads``,
    ``net_process`` and ``idontwant`` its ``swarm.max_net_share``,
    ``swarm.batch_threads``, ``swarm.net_process`` and ``swarm.idontwant``; ``listen``
    its ``swarm.listen`` (default: one loopback port, its first listen address)."""
    if model is None:
        from swarmnode.lab.tiny import make_tiny_model

        model = str(make_tiny_model(tmp / "tiny", "llama"))
    cfg = node_cfg(model, tmp / name, True, external, questions, 8, 48)
    cfg["sapo"]["verify"] = verify
    cfg["swarm"]["max_net_share"] = net_share
    cfg["swarm"]["batch_threads"] = batch_threads
    cfg["swarm"]["net_process"] = net_process
    cfg["swarm"]["idontwant"] = idontwant
    if listen is not None:
        cfg["swarm"]["listen"] = listen
    cfg["sapo"]["freshness_s"] = FRESHNESS_S
    (tmp / f"{name}.yaml").write_text(yaml.safe_dump(cfg))
    log = tmp / f"{name}.log"
    proc = subprocess.Popen(
        [sys.executable, "-m", "swarmnode.cli", "start", "--config", str(tmp / f"{name}.yaml")],
        cwd=REPO,
        env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)},
        stdout=subprocess.DEVNULL,
        stderr=log.open("wb"),
        preexec_fn=None if cpus is None else lambda: os.sched_setaffinity(0, cpus),
    )
    return Victim(proc, tmp / name, log)


def deltas(new: dict[str, int], old: dict[str, int]) -> dict[str, int]:
    return {k: v - old.get(k, 0) for k, v in sorted(new.items()) if v != old.get(k, 0)}


def gc_per_round(gc0: dict[str, Any], gc1: dict[str, Any], rounds: int) -> dict[str, list[float]]:
    """The victim's garbage collections and their CPU seconds (``node.gc``) over a
    phase of ``rounds`` rounds, per round and generation; empty if the node does not
    report them."""
    n = max(1, rounds)
    return {
        k: [round((b - a) / n, 4) for a, b in zip(gc0[k], gc1[k], strict=True)]
        for k in ("collections", "cpu_s", "trainer_cpu_s")
        if k in gc0 and k in gc1
    }


def thread_spent(
    before: dict[str, tuple[float, float, int]], after: dict[str, tuple[float, float, int]]
) -> dict[str, list[float]]:
    """What each thread spent between two ``Victim.thread_times``: [user seconds, system
    seconds, minor page faults], by thread id."""
    return {
        tid: [n - m for n, m in zip(t, before.get(tid, (0.0, 0.0, 0)), strict=True)]
        for tid, t in after.items()
    }


def work_ratio(
    calm: list[dict[str, Any]], other: list[dict[str, Any]], n: int = 2000
) -> tuple[float, float, float]:
    """Round time against what calm rounds of the same work took: a least-squares fit
    of calm round seconds on (tokens generated, tokens trained, 1), then sum(other's
    seconds) / sum(the fit's for other's work); with a 95% bootstrap interval (rounds
    resampled on both sides, the fit redone). The embedded model's rounds vary 4-25 s
    with what it writes; this takes that out of the comparison. Each phase's ``work``
    is its rounds' [tokens generated, tokens trained], ``durations`` their seconds."""
    import numpy as np

    def rows(rs: list[dict[str, Any]]) -> tuple[Any, Any]:
        x = [[g, t, 1.0] for r in rs for g, t in r["work"]]
        return np.array(x, dtype=float), np.array([d for r in rs for d in r["durations"]])

    (xc, yc), (xo, yo) = rows(calm), rows(other)

    def ratio(ic: Any, io: Any) -> float:
        coef = np.linalg.lstsq(xc[ic], yc[ic], rcond=None)[0]
        return float(yo[io].sum() / (xo[io] @ coef).sum())

    rng = np.random.default_rng(0)
    draws = sorted(
        ratio(rng.integers(0, len(yc), len(yc)), rng.integers(0, len(yo), len(yo)))
        for _ in range(n)
    )
    return (
        ratio(np.arange(len(yc)), np.arange(len(yo))),
        draws[int(0.025 * n)],
        draws[int(0.975 * n) - 1],
    )


def trainer_figures(
    spent: dict[str, list[float]], st0: dict[str, Any], st1: dict[str, Any], rounds: int
) -> tuple[str, dict[str, Any]]:
    """The trainer's thread id (the busiest in ``spent``, ``thread_spent``'s output) and,
    a round over the phase: its [user s, system s, minor faults] (``trainer_per_round``)
    and the collector's cost (``gc_per_round``, from the statuses at either end)."""
    trainer = max(spent, key=lambda tid: spent[tid][0] + spent[tid][1])
    n = max(1, rounds)
    return trainer, {
        "trainer_per_round": [round(x / n, 3) for x in spent[trainer]],
        "gc_per_round": gc_per_round(st0["node"].get("gc", {}), st1["node"].get("gc", {}), n),
    }


def ratio_interval(calm: list[float], other: list[float], n: int = 2000) -> tuple[float, float]:
    """95% bootstrap interval of mean(other) / mean(calm), rounds resampled per side."""
    rng = random.Random(0)
    draws = sorted(
        statistics.fmean(rng.choices(other, k=len(other)))
        / statistics.fmean(rng.choices(calm, k=len(calm)))
        for _ in range(n)
    )
    return draws[int(0.025 * n)], draws[int(0.975 * n) - 1]

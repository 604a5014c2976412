"""Flood measurement: what a real node experiences when 1 peer or 5 Sybils flood it.

The victim is a ``swarmnode start`` process training a tiny model (swarmnode/lab/tiny.py),
or ``--model`` (e.g. the embedded model a user's node runs), in a swarm, with
``--external`` peer groups per round. An honest peer (a ``GossipTransport`` in this
process) publishes one realistic batch of catalog items each time the victim
finishes a round, as in scripts/bench_swarm.py, within the pace a node keeps
(``OwnPace``: where the victim's rounds are faster than 2.5 a second, the rounds over
it are not published, as a node would not publish them). Flooders run in a separate
process (``--flooder``): raw py-libp2p hosts with Ed25519 identities, one each, that join
the topic, wait until the victim is in their mesh, then publish (as fast as their
connection to the victim takes them, or at a set rate) validly signed, well-formed
messages (msgpack built here, never swarmnode's encoder) of real catalog items with
true reward claims, so that nothing but their rate can count against them. Their own
gossipsub spam guard is off, and each counts what its router really queued for the
victim (``sent``) apart from what its outbound queue dropped.

Phases, each ``--phase-s`` seconds from the moment the flooders are meshed: ``calm``;
``5idle`` (five raw hosts meshed with the victim that publish nothing: what five more
peers cost whatever they send, the reference that tells a flood's own cost from the peer
count's; the calm victim has one peer); ``1peer`` (one identity, as fast as it can);
``5sybil`` (five, as fast as they can); ``5sybil_under`` (five, each under the
per-originator rates: ``--under-rate`` messages a second of ``--under-groups`` groups, so
none is rate-limited or graylisted: the ingestion time budget,
``sapo.ingest_max_share``, is what must hold). A flood phase is valid when the flooders
sent at least 100 messages to the victim and the victim counted at least 100 beyond the
honest peer's (``5idle`` when its hosts were meshed). A graylisted flooder is cut off
(it keeps redialling, as attackers do): that is the defence working, and the phase still
lasts ``--phase-s``.

Per phase: mean round time over the whole phase (and the median), honest groups accepted
(the honest peer's ``accepted`` verdicts) and trained on (``external_by_peer``), groups
and tokens the victim trained, the victim's counters (msgs_in, dropped.* and rejected.*
by reason, peers_graylisted), ingestion verdicts, the flooders' score verdicts and
seconds to graylist each, the ingest time share and the victim's log growth per minute
(its stderr, default log level). ``--cycles N`` runs the phases N times in turn, so that
the machine's drift and the model's own (its completions, and its rounds with them,
change as it trains) fall on every phase alike; figures are then pooled per kind of
phase. Last line, per phase: round-time ratio to calm (mean, with a 95% bootstrap
interval over rounds; median; each cycle's; and ``vs_5idle``, the same against ``5idle``
where it ran), honest groups accepted/trained, groups/tokens the victim trained, flood
sent and counted, flooders graylisted and seconds to it, ingest time share, log bytes
per minute. Goal: ratios <= 1.10. Exit status 1 if a flood phase was not valid.
``--pin`` puts the victim alone on the first CPU and everything else on the others (its
first field, ``victim_cpus``, is the victim's affinity as read from the running
process), so that on a small machine the attackers' own CPU does not count against the
victim.

    nice -n 10 .venv/bin/python scripts/bench_flood.py --phase-s 60
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import random
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trio
import yaml
from libp2p import new_host
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.peer.peerinfo import info_from_p2p_addr
from libp2p.pubsub.gossipsub import GossipSub
from libp2p.pubsub.pb import rpc_pb2
from libp2p.pubsub.pubsub import Pubsub
from libp2p.tools.anyio_service import background_trio_service
from multiaddr import Multiaddr

from swarmnode.config import SwarmConfig, parse_config
from swarmnode.lab import REPO
from swarmnode.lab.bench_swarm import TASKS, node_cfg, peer_batch
from swarmnode.learn.metrics import RoundRecord, read_rounds
from swarmnode.learn.rewards import make_scorer
from swarmnode.learn.tasks import TaskMix
from swarmnode.ops.control import ControlError, query_status
from swarmnode.p2p.gossip import GOSSIP_PROTOCOLS, topic_for
from swarmnode.p2p.transport import GossipTransport
from swarmnode.share.publish_rate import OwnPace
from swarmnode.share.wire import encode_batch

TOPIC = topic_for("default")
# The victim's sapo.freshness_s: a phase's flood groups expire before the next phase
# (``Victim.settle``), not to take the next phase's slots; honest groups wait a round.
FRESHNESS_S = 60.0
FLOODERS: list[subprocess.Popen[bytes]] = []  # killed on the way out, whatever happens
UNDER = -1.0  # a phase's rate: --under-rate messages a second of --under-groups groups
SILENT = -2.0  # a phase's rate: meshed with the victim, publishing nothing
PHASES = (  # name, identities, messages/s per identity (0: as fast as it can), groups each
    ("calm", 0, 0.0, 1),
    ("5idle", 5, SILENT, 0),
    ("1peer", 1, 0.0, 1),
    ("5sybil", 5, 0.0, 1),
    ("5sybil_under", 5, UNDER, -1),
)


# ---- the flooder process -----------------------------------------------------------


def flood_pool(seed: int, k: int, size: int) -> list[dict[str, Any]]:
    """``size`` well-formed catalog groups (G = 8) with true reward claims, identity k
    (items from the task seed ``seed + k``: a new phase's flood is new to the victim)."""
    mix = TaskMix(parse_config({"tasks": {**TASKS, "seed": seed + k}}).tasks)
    score, rng = make_scorer(0.0), random.Random(k)
    pool: list[dict[str, Any]] = []
    for r in itertools.count(1):
        for g in peer_batch(mix, r, 4, 8, 0, rng):
            rewards = score(g.completions, mix.regenerate(g.ref))[0]
            pool.append(
                {
                    "ref": {
                        "dataset": g.ref.dataset,
                        "config": g.ref.config,
                        "seed": g.ref.seed,
                        "index": g.ref.index,
                    },
                    "question": g.question,
                    "completions": list(g.completions),
                    "rewards": [float(x) for x in rewards],
                    "model": "flood",
                    "finished": [True] * len(g.completions),
                }
            )
        if len(pool) >= size:
            return pool
    raise AssertionError("unreachable")


def flood_payload(pool: list[dict[str, Any]], i: int, groups: int) -> bytes:
    import msgpack

    now = time.time()
    batch = [dict(pool[(i * groups + j) % len(pool)], created=now) for j in range(groups)]
    obj = {"v": 2, "swarm": "default", "round": i + 1, "groups": batch}
    return bytes(msgpack.packb(obj, use_bin_type=True))


class Flooder:
    """The flooder process: one raw py-libp2p host per identity, and what each did.

    ``sent[k]``: messages identity k's router queued for the victim, less those its
    outbound queue dropped (``queue_dropped``); ``published``: publishes that
    returned; ``failed``: publishes or redials that raised; ``redials``: dials after
    the victim cut it off (or after py-libp2p dropped its stream to the victim: it
    does when a write waits 5 s for credit); ``pruned_by``: PRUNEs the victim sent
    each; ``meshed_s_by``: seconds each had the victim in its mesh (py-libp2p
    publishes only to mesh peers: one not meshed sends nothing, whatever its rate)."""

    def __init__(
        self, target: str, identities: int, seconds: float, rate: float, groups: int, seed: int
    ) -> None:
        self.info = info_from_p2p_addr(Multiaddr(target))
        self.identities, self.seconds, self.rate, self.groups = identities, seconds, rate, groups
        self.pools = [flood_pool(seed, k, 1500) for k in range(identities)]
        self.published, self.sent = [0] * identities, [0] * identities
        self.queue_dropped = [0] * identities
        self.failed, self.redials = [0] * identities, [0] * identities
        self.pruned = [0] * identities  # PRUNEs the victim sent identity k
        self.meshed_s = [0.0] * identities  # seconds of the flood with the victim in k's mesh
        self.ready: list[str] = []
        self.stop_at: list[float] = []  # set once every host is meshed
        self.all_ready = trio.Event()

    def count_sends(self, k: int, ps: Pubsub, gs: GossipSub) -> None:
        """``sent[k]``: messages the router queued for the victim, less queue drops."""
        send, drop = gs.send_rpc, gs._handle_dropped_rpc
        victim, queue_dropped = self.info.peer_id, self.queue_dropped

        def send_rpc(peer: Any, rpc: rpc_pb2.RPC, priority: bool = False) -> None:
            if peer != victim or not rpc.publish or peer not in ps.peer_queues:
                send(peer, rpc, priority)
                return
            before = queue_dropped[k]
            send(peer, rpc, priority)
            if queue_dropped[k] == before:
                self.sent[k] += len(rpc.publish)

        def dropped(peer: Any, rpc: rpc_pb2.RPC, reason: str) -> None:
            if peer == victim:
                queue_dropped[k] += len(rpc.publish)
            drop(peer, rpc, reason)

        handle_prune = gs.handle_prune

        async def pruned(msg: rpc_pb2.ControlPrune, sender: Any) -> None:
            if sender == victim:
                self.pruned[k] += 1
            await handle_prune(msg, sender)

        setattr(gs, "send_rpc", send_rpc)  # noqa: B010 (instrumenting a library object)
        setattr(gs, "_handle_dropped_rpc", dropped)  # noqa: B010
        setattr(gs, "handle_prune", pruned)  # noqa: B010

    async def one(self, k: int) -> None:
        """Identity k: join the topic, wait until the victim is in its mesh (and every
        other host too), then flood until the shared stop time."""
        info = self.info
        listen = [Multiaddr("/ip4/127.0.0.1/tcp/0")]
        host = new_host(key_pair=create_new_key_pair(), listen_addrs=listen)
        # py-libp2p's spam guard also throttles our own publishes (10/s): an attacker
        # turns it off.
        gs = GossipSub(
            list(GOSSIP_PROTOCOLS), 6, 4, 12, heartbeat_interval=1, spam_protection_enabled=False
        )
        ps = Pubsub(host, gs, strict_signing=True)
        self.count_sends(k, ps, gs)
        async with (
            host.run(listen_addrs=listen),
            background_trio_service(ps),
            background_trio_service(gs),
        ):
            await ps.wait_until_ready()
            await ps.subscribe(TOPIC)
            with trio.fail_after(60):
                await host.connect(info)
                while info.peer_id not in gs.mesh.get(TOPIC, set()):
                    await trio.sleep(0.2)
            self.ready.append(host.get_id().to_base58())
            if len(self.ready) == self.identities:
                print(json.dumps({"ready": self.ready}), flush=True)
                self.stop_at.append(time.monotonic() + self.seconds)
                self.all_ready.set()
            await self.all_ready.wait()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self.watch_mesh, k, gs)
                await self.flood(k, host, ps)
                nursery.cancel_scope.cancel()

    async def watch_mesh(self, k: int, gs: GossipSub) -> None:
        """``meshed_s[k]``: how long the victim was in identity k's mesh (sampled every
        0.5 s): a pruned identity publishes to nobody, whatever its rate."""
        while True:
            await trio.sleep(0.5)
            if self.info.peer_id in gs.mesh.get(TOPIC, set()):
                self.meshed_s[k] += 0.5

    async def flood(self, k: int, host: Any, ps: Pubsub) -> None:
        """Publish ``rate`` messages a second (0: as fast as the connection takes
        them; ``SILENT``: none) until the stop time; redial whenever the victim cut
        us off."""
        info, rate = self.info, self.rate
        i, next_at = 0, time.monotonic()
        while time.monotonic() < self.stop_at[0]:
            if info.peer_id not in ps.peers:  # cut off by the victim: redial, as attackers do
                self.redials[k] += 1
                with trio.move_on_after(2):
                    try:
                        await host.connect(info)
                    except Exception:  # refused: counted, tried again in a second
                        self.failed[k] += 1
                await trio.sleep(1)
                continue
            if rate == SILENT:  # a peer like any other, with nothing to say
                await trio.sleep(0.5)
                continue
            queue = ps.peer_queues.get(info.peer_id)
            if queue is not None and len(queue) >= 8:
                # Unpaced, the publish loop starved the writer task: 16 of 8,390
                # messages left and the rest died in the full queue. Send only as
                # fast as the connection takes them.
                await trio.sleep(0.001)
                continue
            try:
                await ps.publish(TOPIC, flood_payload(self.pools[k], i, self.groups))
                self.published[k] += 1
            except Exception:  # counted; a flooder keeps going
                self.failed[k] += 1
                await trio.sleep(0.01)
            i += 1
            if rate > 0:
                next_at += 1 / rate
                await trio.sleep(max(0.0, next_at - time.monotonic()))
            elif i % 20 == 0:
                await trio.sleep(0)

    def figures(self) -> str:
        cpu = resource.getrusage(resource.RUSAGE_SELF)
        sent = self.sent
        out: dict[str, Any] = {"sent": sum(sent), "sent_by": sent, "published": sum(self.published)}
        out.update(
            queue_dropped=sum(self.queue_dropped),
            failed=sum(self.failed),
            redials=sum(self.redials),
            pruned_by=self.pruned,
            meshed_s_by=self.meshed_s,
        )
        out["cpu_s"] = round(cpu.ru_utime + cpu.ru_stime, 1)
        return json.dumps(out)

    async def report(self) -> None:
        """The figures every 2 s: a flooder stuck in a write still leaves its count."""
        await self.all_ready.wait()
        while True:
            await trio.sleep(2)
            print(self.figures(), flush=True)

    async def main(self) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self.report)
            for k in range(self.identities):
                nursery.start_soon(self.one, k)


def run_flooder(
    target: str, identities: int, seconds: float, rate: float, groups: int, seed: int
) -> None:
    """Raw py-libp2p hosts: mesh with the victim, then publish (``rate`` messages a
    second each; 0: as fast as they can). Prints {"ready": [peer ids]} once every host
    has the victim in its mesh, and the figures ({"sent": n, ...}) at the end."""
    flooder = Flooder(target, identities, seconds, rate, groups, seed)
    try:
        trio.run(flooder.main)
    finally:
        print(flooder.figures(), flush=True)


# ---- the measuring side -------------------------------------------------------------


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

    def cpu_s(self) -> float:
        """CPU seconds the node process has used (all its threads): what a flood costs
        the node itself, apart from the attacker's own CPU on this shared machine."""
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def thread_cpu_s(self) -> dict[str, float]:
        """CPU seconds each of its threads has used, by thread id."""
        out = {}
        for task in Path(f"/proc/{self.proc.pid}/task").iterdir():
            try:
                fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:  # the thread ended
                continue
            out[task.name] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        return out

    async def address(self) -> str:
        """Its first listen address, once its transport is up."""
        while True:
            self.rounds()  # exits if the process died
            try:
                return str(self.status()["swarm"]["listen_addrs"][0])
            except (ControlError, IndexError, KeyError, TypeError):
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
) -> Victim:
    """A ``swarmnode start`` process (1 thread), data and log in tmp, on ``model`` (a
    name or folder as in ``model.name``) or, by default, the tiny test model; on
    ``cpus`` only if given (set in the child before exec, so all its threads);
    ``verify`` is its ``sapo.verify``."""
    if model is None:
        from swarmnode.lab.tiny import make_tiny_model

        model = str(make_tiny_model(tmp / "tiny", "llama"))
    cfg = node_cfg(model, tmp / name, True, external, questions, 8, 48)
    cfg["sapo"]["verify"] = verify
    cfg["swarm"]["max_net_share"] = net_share
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


def start_flooder(
    addr: str, identities: int, rate: float, groups: int, seed: int
) -> subprocess.Popen[bytes]:
    argv = [sys.executable, "-m", "swarmnode.lab.bench_flood", "--flooder", addr]
    argv += ["--identities", str(identities)]
    argv += ["--flood-rate", str(rate), "--flood-groups", str(groups), "--flood-seed", str(seed)]
    flooder = subprocess.Popen(
        argv,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    FLOODERS.append(flooder)
    return flooder


def deltas(new: dict[str, int], old: dict[str, int]) -> dict[str, int]:
    return {k: v - old.get(k, 0) for k, v in sorted(new.items()) if v != old.get(k, 0)}


async def phase(
    victim: Victim,
    name: str,
    flood: tuple[int, float, int],
    seconds: float,
    addr: str,
    honest: str,
    honest_published: list[int],
    seed: int,
) -> dict[str, Any]:
    identities, rate, groups = flood
    flooder, flood_ids = None, []
    if identities:
        flooder = start_flooder(addr, identities, rate, groups, seed)
        assert flooder.stdout is not None
        line = await asyncio.wait_for(asyncio.to_thread(flooder.stdout.readline), 300)
        flood_ids = json.loads(line)["ready"]  # meshed with the victim: the flood starts
    st0, log0, t0 = victim.status(), victim.log.stat().st_size, time.monotonic()
    cpu0, threads0 = victim.cpu_s(), victim.thread_cpu_s()
    before, pub0 = victim.rounds(), honest_published[0]
    graylisted_at: dict[str, float] = {}
    shares: list[float] = []  # the CPU share outside training, each second
    levels: list[float | None] = []  # the level the cap held heavy readers to, each second
    while (now := time.monotonic()) < t0 + seconds:
        swarm = victim.status()["swarm"]
        scores = swarm.get("peer_scores", {})
        reading = swarm.get("reading", {})
        if "net_share" in reading:
            shares.append(reading["net_share"])
            levels.append(reading.get("net_share_level"))
        for p in flood_ids:
            if scores.get(p, {}).get("graylisted") and p not in graylisted_at:
                graylisted_at[p] = round(now - t0, 1)
        await asyncio.sleep(1.0)
    st1, log1, t1 = victim.status(), victim.log.stat().st_size, time.monotonic()
    cpu1, threads1 = victim.cpu_s(), victim.thread_cpu_s()
    used = [c - threads0.get(tid, 0.0) for tid, c in threads1.items()]
    recs = [before[-1], *victim.rounds()[len(before) :]]
    out: dict[str, Any] = {}
    if flooder is not None:
        flooder.send_signal(signal.SIGINT)  # trio: KeyboardInterrupt, then the figures
        try:  # a loaded machine can take a while to unwind five hosts
            tail = await asyncio.to_thread(flooder.communicate, timeout=20)
        except subprocess.TimeoutExpired:  # its last periodic figures will do
            flooder.kill()
            tail = await asyncio.to_thread(flooder.communicate, timeout=20)
        lines = [ln for ln in tail[0].decode().splitlines() if '"sent"' in ln]
        out.update(json.loads(lines[-1]) if lines else {"sent": 0, "figures_lost": True})
        verdicts: dict[str, int] = {}
        for p in flood_ids:
            for k, v in st1["swarm"]["peer_scores"].get(p, {}).get("verdicts", {}).items():
                verdicts[k] = verdicts.get(k, 0) + v
        out["flooder_verdicts"] = verdicts
        out["flooder_scores"] = [
            st1["swarm"]["peer_scores"].get(p, {}).get("score") for p in flood_ids
        ]
        out["s_to_graylist"] = [graylisted_at.get(p) for p in flood_ids]
    times = [b.time - a.time for a, b in itertools.pairwise(recs)]
    honest_v0 = st0["swarm"]["peer_scores"].get(honest, {}).get("verdicts", {})
    honest_v1 = st1["swarm"]["peer_scores"].get(honest, {}).get("verdicts", {})
    flood_counted = counted_in(st1) - counted_in(st0) - (honest_published[0] - pub0)
    out.update(
        durations=[round(t, 3) for t in times],
        round_s=round((recs[-1].time - recs[0].time) / max(1, len(times)), 3),
        cpu_s_per_round=round((cpu1 - cpu0) / max(1, len(times)), 4),
        round_s_median=round(statistics.median(times), 3) if times else None,
        rounds=len(times),
        flood_counted=flood_counted,
        valid=not identities
        or rate == SILENT
        or (out.get("sent", 0) >= 100 and flood_counted >= 100),
        honest_accepted=honest_v1.get("accepted", 0) - honest_v0.get("accepted", 0),
        honest_trained=sum(r.external_by_peer.get(honest, 0) for r in recs[1:]),
        groups_trained=sum(r.groups_trained for r in recs[1:]),
        tokens_trained=sum(r.tokens_trained for r in recs[1:]),
        ingest_time_share_max=max(r.ingest_time_share for r in recs[1:]) if times else None,
        ingest_accepted=recs[-1].ingest_accepted - recs[0].ingest_accepted,
        ingest_rejected=deltas(recs[-1].ingest_rejected, recs[0].ingest_rejected),
        ingest_evicted=deltas(
            st1["node"]["ingest"].get("ingest_evicted", {}),
            st0["node"]["ingest"].get("ingest_evicted", {}),
        ),
        log_bytes_per_min=round((log1 - log0) * 60 / (t1 - t0)),
        counters=deltas(st1["swarm"]["counters"], st0["swarm"]["counters"]),
        reading=st1["swarm"].get("reading", {}),  # CPU share outside training, at the end
        # sampled each second: the share's mean and peak, and the seconds the cap bound
        net_share_mean=round(statistics.fmean(shares), 4) if shares else None,
        net_share_max=max(shares, default=None),
        cap_bound_s=sum(1 for lv in levels if lv is not None),
        # the busiest thread is the trainer's: the others' CPU over the phase, a core's share
        outside_training_share=round((sum(used) - max(used)) / (t1 - t0), 4),
        work=[[r.tokens_generated, r.tokens_trained] for r in recs[1:]],
    )
    print(name, json.dumps(out), flush=True)
    if identities:
        await victim.settle(honest, FRESHNESS_S + 60)
    return out


def ratio_interval(calm: list[float], other: list[float], n: int = 2000) -> tuple[float, float]:
    """95% bootstrap interval of mean(other) / mean(calm), rounds resampled per side."""
    rng = random.Random(0)
    draws = sorted(
        statistics.fmean(rng.choices(other, k=len(other)))
        / statistics.fmean(rng.choices(calm, k=len(calm)))
        for _ in range(n)
    )
    return draws[int(0.025 * n)], draws[int(0.975 * n) - 1]


def work_ratio(
    calm: list[dict[str, Any]], other: list[dict[str, Any]], n: int = 2000
) -> tuple[float, float, float]:
    """Round time against what calm rounds of the same work took: a least-squares fit
    of calm round seconds on (tokens generated, tokens trained, 1), then sum(other's
    seconds) / sum(the fit's for other's work); with a 95% bootstrap interval (rounds
    resampled on both sides, the fit redone). The embedded model's rounds vary 10-25 s
    with what it writes; this takes that out of the comparison."""
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


def summary(res: dict[str, dict[str, Any]]) -> str:
    """The last line: every phase kind's figures, pooled over the cycles (``calm0``,
    ``calm1``, ... together), ratios against calm first."""
    kinds: dict[str, list[dict[str, Any]]] = {}
    for key, r in res.items():
        kinds.setdefault(key.rstrip("0123456789"), []).append(r)

    def pooled(rs: list[dict[str, Any]], field: str) -> int:
        return sum(r[field] for r in rs)

    def durations(rs: list[dict[str, Any]]) -> list[float]:
        return [t for r in rs for t in r["durations"]] or [float("nan")]

    def cpu_per_round(rs: list[dict[str, Any]]) -> float:
        return sum(r["cpu_s_per_round"] * r["rounds"] for r in rs) / max(1, pooled(rs, "rounds"))

    calm_rs = kinds["calm"]
    calm, calm_cpu = statistics.fmean(durations(calm_rs)), cpu_per_round(calm_rs)
    calm_median = statistics.median(durations(calm_rs))
    parts = [
        f"cycles {len(calm_rs)} calm_round_s {calm:.3f} calm_cpu_s_per_round {calm_cpu:.4f}"
        f" calm rounds {pooled(calm_rs, 'rounds')}"
        f" honest {pooled(calm_rs, 'honest_accepted')}/{pooled(calm_rs, 'honest_trained')}"
        f" trained {pooled(calm_rs, 'groups_trained')}g/{pooled(calm_rs, 'tokens_trained')}t"
        f" log_B_per_min {max(r['log_bytes_per_min'] for r in calm_rs)}"
    ]
    for name, rs in kinds.items():
        if name == "calm":
            continue
        d = durations(rs)
        lo, hi = ratio_interval(durations(calm_rs), d)
        per_cycle = ",".join(
            f"{r['round_s'] / c['round_s']:.2f}" for r, c in zip(rs, calm_rs, strict=False)
        )
        gray = [s for r in rs for s in r["s_to_graylist"]]
        wr, wlo, whi = work_ratio(calm_rs, rs)
        vs_idle = ""
        if name not in ("calm", "5idle") and "5idle" in kinds:
            idle = durations(kinds["5idle"])
            ilo, ihi = ratio_interval(idle, d)
            vs_idle = f" vs_5idle {statistics.fmean(d) / statistics.fmean(idle):.2f}"
            vs_idle += f" [{ilo:.2f}, {ihi:.2f}]"
        parts.append(
            f"{name}{'' if all(r['valid'] for r in rs) else ' INVALID'}"
            f" ratio {statistics.fmean(d) / calm:.2f} [{lo:.2f}, {hi:.2f}]"
            f" (median {statistics.median(d) / calm_median:.2f}) per_cycle {per_cycle}{vs_idle}"
            f" node_cpu_per_round_ratio {cpu_per_round(rs) / calm_cpu:.2f}"
            f" work_adjusted {wr:.3f} [{wlo:.3f}, {whi:.3f}]"
            f" outside_training_share {[r['outside_training_share'] for r in rs]}"
            f" (calm {[r['outside_training_share'] for r in calm_rs]})"
            f" rounds {pooled(rs, 'rounds')}"
            f" flooder_cpu_s {sum(r.get('cpu_s') or 0.0 for r in rs):.1f}"
            f" honest {pooled(rs, 'honest_accepted')}/{pooled(rs, 'honest_trained')}"
            f" trained {pooled(rs, 'groups_trained')}g/{pooled(rs, 'tokens_trained')}t"
            f" sent {pooled(rs, 'sent')} counted {pooled(rs, 'flood_counted')}"
            f" graylisted {sum(1 for s in gray if s is not None)}/{len(gray)} at_s {gray}"
            f" ingest_share {max(r['ingest_time_share_max'] or 0.0 for r in rs)}"
            f" net_share_at_end {[r.get('reading', {}).get('net_share') for r in rs]}"
            f" throttled_net {sum(r['counters'].get('throttled.net_share', 0) for r in rs)}"
            f" log_B_per_min {max(r['log_bytes_per_min'] for r in rs)}"
        )
    return "; ".join(parts)


async def amain(args: argparse.Namespace) -> int:
    from swarmnode.learn.model import cpu_has_bf16  # torch: only the measuring side

    tmp = Path(tempfile.mkdtemp(prefix="bench-flood-"))
    cpus = pin_cpus(args.pin)
    net_share = None if args.max_net_share == "null" else float(args.max_net_share)
    victim = start_node(
        tmp, "victim", args.external, args.questions, args.model, cpus, args.verify, net_share
    )
    stop, ids, published = asyncio.Event(), [], [0]  # type: ignore[var-annotated]
    honest_task = None
    res: dict[str, dict[str, Any]] = {}
    try:
        addr = await victim.address()
        cpus = os.sched_getaffinity(victim.proc.pid)  # what it really runs on
        honest_task = asyncio.create_task(
            honest_peer(addr, tmp, tmp / "victim", stop, args.questions, 8, ids, published)
        )
        await victim.wait_rounds(args.warmup, 1800)
        while not ids:
            await asyncio.sleep(0.1)
        phases = [ph for ph in PHASES if ph[0] in args.phases.split(",")]
        for i, (name, n, rate, groups) in itertools.product(range(args.cycles), phases):
            if rate == UNDER:
                rate, groups = args.under_rate, args.under_groups
            flood, key = (n, rate, groups), f"{name}{i}"
            seed = 5000 + 100 * len(res)  # each phase's flood items new to the victim
            res[key] = await phase(victim, key, flood, args.phase_s, addr, ids[0], published, seed)
    finally:
        await shut_down(victim, FLOODERS, stop, honest_task)
    print(f"victim data and log: {tmp}" if args.keep else "", flush=True)
    print(
        f"victim_cpus {','.join(map(str, sorted(cpus or ())))} cpu_bf16 {int(cpu_has_bf16())}"
        f" {summary(res)}",
        flush=True,
    )
    if not args.keep:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0 if all(r["valid"] for r in res.values()) else 1


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--phase-s", type=float, default=60.0, help="seconds each phase lasts")
    ap.add_argument("--cycles", type=int, default=1, help="times the phases run, in turn")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument(
        "--phases",
        default=",".join(p[0] for p in PHASES),
        help="the phases a cycle runs, comma-separated, in this order: calm,5idle,1peer,5sybil,"
        "5sybil_under (default: all; the ratios need calm)",
    )
    ap.add_argument("--questions", type=int, default=2)
    ap.add_argument("--external", type=int, default=1, help="peer groups trained a round")
    ap.add_argument("--keep", action="store_true", help="keep the temp folder (logs)")
    ap.add_argument("--model", help=MODEL_HELP)
    ap.add_argument("--pin", action="store_true", help=PIN_HELP)
    ap.add_argument(
        "--max-net-share",
        default="0.1",
        help="the victim's swarm.max_net_share (default: the default, 0.1; null = no cap)",
    )
    ap.add_argument(
        "--verify",
        default="on_arrival",
        choices=["on_arrival", "when_drawn"],
        help="the victim's sapo.verify (configs/public.yaml: when_drawn)",
    )
    ap.add_argument("--flooder", metavar="ADDR", help=argparse.SUPPRESS)
    ap.add_argument("--identities", type=int, default=1, help=argparse.SUPPRESS)
    ap.add_argument("--seconds", type=float, default=3600, help=argparse.SUPPRESS)
    ap.add_argument("--flood-rate", type=float, default=0.0, help=argparse.SUPPRESS)
    ap.add_argument("--flood-groups", type=int, default=1, help=argparse.SUPPRESS)
    ap.add_argument("--flood-seed", type=int, default=5000, help=argparse.SUPPRESS)
    ap.add_argument(
        "--under-rate", type=float, default=4.0, help="5sybil_under: messages/s per identity"
    )
    ap.add_argument("--under-groups", type=int, default=6, help="5sybil_under: groups per message")
    args = ap.parse_args()
    if args.flooder:
        run_flooder(
            args.flooder,
            args.identities,
            args.seconds,
            args.flood_rate,
            args.flood_groups,
            args.flood_seed,
        )
        return
    sys.exit(asyncio.run(amain(args)))


if __name__ == "__main__":
    main()

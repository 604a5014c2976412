"""Scale without malice: one real node receiving the rounds of N honest peers.

The node is a ``swarmnode start`` process training a tiny model (swarmnode/lab/tiny.py), or
``--model`` (e.g. the embedded model a user's node runs), with ``--external`` peer
groups a round, as in scripts/bench_flood.py. The swarm around it is ``--peers``
honest identities (Ed25519) spread over ``--procs`` forwarder processes: each
process is one raw py-libp2p gossipsub host meshed with the node, and each identity
in it publishes a realistic batch (``--groups`` catalog groups of G = 8 with true
reward claims, msgpack built here, signed by that identity) every ``--period``
seconds with a random phase (or, with ``--target-msgs-per-s``, that share of its
rounds, as swarmnode's ``swarm.target_msgs_per_s`` makes a node do), relayed by its
process's host as a mesh peer relays other peers' messages. So the node sees what a
node of a swarm of N sees: N originators, a few forwarders, N / period messages a
second (times the share). (In a real mesh up to D
copies of each message arrive, one per mesh peer; all but the first stop at the seen
check, the cheapest gate. They are not simulated.)

Phases, each ``--phase-s`` seconds: ``calm`` and ``scale`` (the N peers as well,
from the moment every forwarder is meshed), ``--cycles`` times in turn (calm, scale,
calm, scale, ...), so that the machine's drift and the model's own (its completions
grow or shrink as it trains, and round time with them) fall on both sides alike.
In both, one more honest peer publishes a batch each time the node finishes a round
(bench_flood's), so the node trains its ``--external`` peer groups every round
either way: the ratio is the cost of the traffic, not of training more (the tiny
model alone rarely has a group with signal, and its rounds would be generation
only). Per phase: mean and median round time,
the node's peak ingest time share (``sapo.ingest_max_share`` is the budget) and RSS,
messages sent and counted, ingestion verdicts, groups trained from peers, and the
node's counters (frames read, throttled reads, drops by reason).
Last line: the round-time ratio over all cycles (goal <= 1.10; the mean of every
scale round against the mean of every calm round) with a 95% bootstrap interval
(rounds resampled within each side), the median ratio, each cycle's ratio, the ratio
of generation seconds per generated token (what the node's own sampling cost, apart
from how long its completions happened to be), ingest share, RSS, messages a second,
groups accepted and trained from peers and tokens trained on each side.

    .venv/bin/python scripts/bench_scale.py --peers 200 --procs 4 --phase-s 90
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

import msgpack
import trio
from libp2p import new_host
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.peer.id import ID
from libp2p.peer.peerinfo import info_from_p2p_addr
from libp2p.pubsub.pb import rpc_pb2
from libp2p.pubsub.pubsub import Pubsub
from libp2p.pubsub.validators import PUBSUB_SIGNING_PREFIX
from libp2p.tools.anyio_service import background_trio_service
from multiaddr import Multiaddr

from swarmnode.lab import REPO
from swarmnode.lab.flooder import TOPIC, flood_pool
from swarmnode.lab.victim import (
    MODEL_HELP,
    NET_PROCESS_HELP,
    PIN_HELP,
    Victim,
    counted_in,
    deltas,
    honest_peer,
    pin_cpus,
    ratio_interval,
    shut_down,
    start_node,
    thread_spent,
    trainer_figures,
    work_ratio,
)
from swarmnode.p2p.gossip import GOSSIP_PROTOCOLS, QuietGossipSub
from swarmnode.p2p.yamux_window import install as half_window_credit
from swarmnode.p2p.yamux_write import install as whole_writes

FORWARDERS: list[subprocess.Popen[bytes]] = []


# ---- a forwarder process: one host relaying the batches of many identities ---------


class Forwarder:
    """One forwarder process: a raw py-libp2p gossipsub host meshed with the node,
    relaying the batches of ``identities`` honest originators (their own keys, their
    own signatures), each every ``period`` seconds with a random phase, a round
    published with probability ``share``. ``figures``: sent, failed, bytes, skipped."""

    def __init__(
        self, target: str, proc: int, identities: int, period: float, groups: int, share: float
    ) -> None:
        self.info = info_from_p2p_addr(Multiaddr(target))
        self.proc, self.identities, self.period = proc, identities, period
        self.groups, self.share = groups, share
        # task seed 5100 + proc, as before --flood-seed
        self.pool = flood_pool(5000, 100 + proc, 2000)
        self.keys = [create_new_key_pair() for _ in range(identities)]
        self.ids = [ID.from_pubkey(k.public_key).to_bytes() for k in self.keys]
        self.figures = {"sent": 0, "failed": 0, "bytes": 0, "skipped": 0}
        self.seqno = time.time_ns()

    def message(self, k: int, i: int) -> rpc_pb2.Message:
        """Identity k's i-th batch, signed by k."""
        self.seqno += 1
        now, groups, pool = time.time(), self.groups, self.pool
        batch = [dict(pool[(i * groups + j) % len(pool)], created=now) for j in range(groups)]
        obj = {"v": 2, "swarm": "default", "round": i + 1, "groups": batch}
        data = bytes(msgpack.packb(obj, use_bin_type=True))
        msg = rpc_pb2.Message(
            data=data, topicIDs=[TOPIC], from_id=self.ids[k], seqno=self.seqno.to_bytes(8, "big")
        )
        msg.signature = self.keys[k].private_key.sign(
            PUBSUB_SIGNING_PREFIX.encode() + msg.SerializeToString()
        )
        return msg

    def line(self) -> str:
        cpu = resource.getrusage(resource.RUSAGE_SELF)
        return json.dumps({**self.figures, "cpu_s": round(cpu.ru_utime + cpu.ru_stime, 1)})

    async def report(self) -> None:
        while True:  # a process slow to exit still leaves its figures
            await trio.sleep(2)
            print(self.line(), flush=True)

    async def main(self) -> None:
        info = self.info
        listen = [Multiaddr("/ip4/127.0.0.1/tcp/0")]
        host = new_host(key_pair=create_new_key_pair(), listen_addrs=listen)
        # Honest swarmnode peers send IDONTWANT only for large messages, as the node does.
        gs = QuietGossipSub(
            list(GOSSIP_PROTOCOLS), 6, 4, 12, heartbeat_interval=1, spam_protection_enabled=False
        )
        ps = Pubsub(host, gs, strict_signing=True)
        async with (
            host.run(listen_addrs=listen),
            background_trio_service(ps),
            background_trio_service(gs),
            trio.open_nursery() as nursery,
        ):
            await ps.wait_until_ready()
            await ps.subscribe(TOPIC)
            with trio.fail_after(120):
                await host.connect(info)
                while info.peer_id not in gs.mesh.get(TOPIC, set()):
                    await trio.sleep(0.2)
            print(json.dumps({"ready": host.get_id().to_base58()}), flush=True)
            nursery.start_soon(self.report)
            await self.relay(host, ps)

    async def relay(self, host: Any, ps: Pubsub) -> None:
        """Each identity's batches on its schedule, pushed as a mesh peer relays
        them: from_id and signature are the identity's, the host only forwards."""
        rng = random.Random(self.proc)
        period, figures = self.period, self.figures
        start = time.monotonic()
        due = sorted((start + rng.uniform(0, period), k) for k in range(self.identities))
        count = itertools.count()
        while True:
            at, k = due.pop(0)
            await trio.sleep(max(0.0, at - time.monotonic()))
            due.append((at + period * rng.uniform(0.9, 1.1), k))
            due.sort()
            if rng.random() >= self.share:  # this round not published (publish_rate)
                figures["skipped"] += 1
                continue
            msg = self.message(k, next(count))
            try:  # relayed as a mesh peer relays: from_id and signature are k's
                await ps.push_msg(host.get_id(), msg)
                figures["sent"] += 1
                figures["bytes"] += len(msg.data)
            except Exception:  # counted; an honest peer keeps going
                figures["failed"] += 1


def run_forwarder(
    target: str, proc: int, identities: int, period: float, groups: int, share: float = 1.0
) -> None:
    half_window_credit()  # yamux credit as a swarmnode peer returns it
    whole_writes()  # and its writes whole (a stock py-libp2p host can splice them)
    forwarder = Forwarder(target, proc, identities, period, groups, share)
    try:
        trio.run(forwarder.main)
    except KeyboardInterrupt:
        pass
    finally:
        print(forwarder.line(), flush=True)


# ---- the measuring side -------------------------------------------------------------


def publish_share(args: argparse.Namespace) -> float:
    """The share of rounds each peer publishes: with ``swarm.target_msgs_per_s`` set,
    every node's ``PublishRate`` settles where the swarm's total rate is the target
    (tests/test_publish_rate.py: 19.9 heard at 200 peers for a target of 20), i.e.
    p = target * period / peers; without it, every round."""
    if args.target_msgs_per_s is None:
        return 1.0
    return min(1.0, args.target_msgs_per_s * args.period / args.peers)


def start_forwarder(addr: str, proc: int, args: argparse.Namespace) -> subprocess.Popen[bytes]:
    k = args.peers // args.procs + (1 if proc < args.peers % args.procs else 0)
    argv = [sys.executable, "-m", "swarmnode.lab.bench_scale", "--forwarder", addr]
    argv += ["--proc", str(proc)]
    argv += ["--identities", str(k), "--period", str(args.period), "--groups", str(args.groups)]
    argv += ["--share", str(publish_share(args))]
    child = subprocess.Popen(
        argv,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    FORWARDERS.append(child)
    return child


async def phase(
    victim: Victim, name: str, addr: str, args: argparse.Namespace, label: str
) -> dict[str, Any]:
    children = []
    if name != "calm":
        children = [start_forwarder(addr, p, args) for p in range(args.procs)]
        for child in children:
            assert child.stdout is not None
            line = await asyncio.wait_for(asyncio.to_thread(child.stdout.readline), 600)
            if "ready" not in json.loads(line):  # meshed with the node
                raise SystemExit(f"forwarder not ready: {line!r}")
    st0, before, t0, cpu0 = victim.status(), victim.rounds(), time.monotonic(), victim.cpu_s()
    threads0 = victim.thread_times()
    rss = []
    while time.monotonic() < t0 + args.phase_s:
        await asyncio.sleep(1.0)
        rss.append(victim.rounds()[-1].rss_mb or 0.0)
    st1, t1, cpu1 = victim.status(), time.monotonic(), victim.cpu_s()
    spent = thread_spent(threads0, victim.thread_times())
    recs = [before[-1], *victim.rounds()[len(before) :]]
    out: dict[str, Any] = {"sent": 0, "failed": 0, "skipped": 0, "cpu_s": 0.0}
    for child in children:
        child.send_signal(signal.SIGINT)
        try:
            tail = await asyncio.to_thread(child.communicate, timeout=20)
        except subprocess.TimeoutExpired:  # its last periodic figures will do
            child.kill()
            tail = await asyncio.to_thread(child.communicate, timeout=20)
        lines = [ln for ln in tail[0].decode().splitlines() if '"sent"' in ln]
        if lines:
            fig = json.loads(lines[-1])
            out["sent"] += fig["sent"]
            out["failed"] += fig["failed"]
            out["skipped"] += fig.get("skipped", 0)
            out["cpu_s"] += fig["cpu_s"]
        else:
            out["figures_lost"] = True
    times = [b.time - a.time for a, b in itertools.pairwise(recs)]
    later = recs[1:]
    out.update(
        durations=[round(t, 3) for t in times],
        gen_s=round(sum(r.gen_seconds for r in later), 2),
        tokens_generated=sum(r.tokens_generated for r in later),
        round_s=round((recs[-1].time - recs[0].time) / max(1, len(times)), 3),
        round_s_median=round(statistics.median(times), 3) if times else None,
        rounds=len(times),
        cpu_s_per_round=round((cpu1 - cpu0) / max(1, len(times)), 4),
        seconds=round(t1 - t0, 1),
        counted=counted_in(st1) - counted_in(st0),
        msgs_per_s=round((counted_in(st1) - counted_in(st0)) / (t1 - t0), 1),
        ingest_accepted=later[-1].ingest_accepted - recs[0].ingest_accepted if later else 0,
        ingest_rejected=deltas(recs[-1].ingest_rejected, recs[0].ingest_rejected),
        external_trained=sum(r.external_groups for r in later),
        groups_trained=sum(r.groups_trained for r in later),
        tokens_trained=sum(r.tokens_trained for r in later),
        ingest_time_share_max=max((r.ingest_time_share for r in later), default=None),
        rss_mb_max=max(rss) if rss else None,
        rss_mb_end=rss[-1] if rss else None,
        peers=st1["swarm"].get("num_peers"),
        counters=deltas(st1["swarm"]["counters"], st0["swarm"]["counters"]),
        work=[[r.tokens_generated, r.tokens_trained] for r in later],
        **trainer_figures(spent, st0, st1, len(times))[1],
    )
    print(label, json.dumps(out), flush=True)
    return out


def pooled(res: dict[str, dict[str, Any]], kind: str) -> dict[str, Any]:
    """Every phase of one kind (calm or scale) taken together."""
    phases = [v for k, v in res.items() if k.startswith(kind)]
    keys = ("sent", "cpu_s", "counted", "seconds", "ingest_accepted", "external_trained")
    out: dict[str, Any] = {k: sum(p[k] for p in phases) for k in keys}
    out.update({k: sum(p[k] for p in phases) for k in ("groups_trained", "tokens_trained")})
    out["durations"] = [t for p in phases for t in p["durations"]]
    out["cpu_s_per_round"] = sum(p["cpu_s_per_round"] * p["rounds"] for p in phases) / max(
        1, len(out["durations"])
    )
    out["s_per_token"] = sum(p["gen_s"] for p in phases) / max(
        1, sum(p["tokens_generated"] for p in phases)
    )
    out["ingest_time_share_max"] = max((p["ingest_time_share_max"] or 0.0) for p in phases)
    out["rss_mb_max"] = max((p["rss_mb_max"] or 0.0) for p in phases)
    out["msgs_per_s"] = round(out["counted"] / max(1e-9, out["seconds"]), 1)
    return out


def summary(res: dict[str, dict[str, Any]], args: argparse.Namespace, cpus: set[int]) -> str:
    from swarmnode.learn.model import cpu_has_bf16  # torch: only the measuring side

    calm, scale = pooled(res, "calm"), pooled(res, "scale")
    c, s = calm["durations"], scale["durations"]
    lo, hi = ratio_interval(c, s)
    per_cycle = [
        res[f"scale{i}"]["round_s"] / res[f"calm{i}"]["round_s"] for i in range(args.cycles)
    ]
    wr, wlo, whi = work_ratio(  # rounds' seconds against calm's for the same work
        [v for k, v in res.items() if k.startswith("calm")],
        [v for k, v in res.items() if k.startswith("scale")],
    )
    return (
        f"victim_cpus {','.join(map(str, sorted(cpus)))} cpu_bf16 {int(cpu_has_bf16())}"
        f" verify {args.verify} peers {args.peers} procs {args.procs} period_s {args.period}"
        f" cycles {args.cycles} phase_s {args.phase_s} publish_share {publish_share(args):.3f}"
        f" ratio {statistics.fmean(s) / statistics.fmean(c):.3f} [{lo:.3f}, {hi:.3f}]"
        f" (median {statistics.median(s) / statistics.median(c):.3f})"
        f" per_cycle {','.join(f'{r:.2f}' for r in per_cycle)}"
        f" work_adjusted {wr:.3f} [{wlo:.3f}, {whi:.3f}]"
        f" gen_s_per_token_ratio {scale['s_per_token'] / calm['s_per_token']:.3f}"
        f" node_cpu_per_round_ratio {scale['cpu_s_per_round'] / calm['cpu_s_per_round']:.2f}"
        f" rounds calm {len(c)} scale {len(s)}"
        f" calm_round_s {statistics.fmean(c):.2f} scale_round_s {statistics.fmean(s):.2f}"
        f" msgs_per_s {scale['msgs_per_s']} sent {scale['sent']} counted {scale['counted']}"
        f" ingest_share_max {scale['ingest_time_share_max']}"
        f" rss_mb calm {calm['rss_mb_max']} scale {scale['rss_mb_max']}"
        f" accepted {scale['ingest_accepted']} external_trained {scale['external_trained']}"
        f" trained calm {calm['groups_trained']}g/{calm['tokens_trained']}t"
        f" scale {scale['groups_trained']}g/{scale['tokens_trained']}t"
        f" forwarders_cpu_s {scale['cpu_s']:.1f}"
    )


async def amain(args: argparse.Namespace) -> int:
    tmp = Path(tempfile.mkdtemp(prefix="bench-scale-"))
    cpus = pin_cpus(args.pin)
    victim = start_node(
        tmp,
        "node",
        args.external,
        args.questions,
        args.model,
        cpus,
        args.verify,
        net_process=args.net_process,
    )
    res: dict[str, dict[str, Any]] = {}
    stop, ids, published = asyncio.Event(), [], [0]  # type: ignore[var-annotated]
    honest_task = None
    try:
        addr = await victim.address()
        cpus = os.sched_getaffinity(victim.proc.pid)  # what it really runs on
        honest_task = asyncio.create_task(
            honest_peer(addr, tmp, tmp / "node", stop, args.questions, 8, ids, published)
        )
        await victim.wait_rounds(args.warmup, 1800)
        while not ids:
            await asyncio.sleep(0.1)
        for i in range(args.cycles):
            for name in ("calm", "scale"):
                res[f"{name}{i}"] = await phase(victim, name, addr, args, f"{name}{i}")
    finally:
        await shut_down(victim, FORWARDERS, stop, honest_task)
    print(f"node data and log: {tmp}" if args.keep else "", flush=True)
    print(summary(res, args, cpus or set()), flush=True)
    if not args.keep:
        shutil.rmtree(tmp, ignore_errors=True)
    scale = pooled(res, "scale")
    return 0 if scale["counted"] > 0 and scale["external_trained"] > 0 else 1


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--peers", type=int, default=200, help="honest identities")
    ap.add_argument("--procs", type=int, default=4, help="forwarder processes carrying them")
    ap.add_argument("--period", type=float, default=10.0, help="seconds between one peer's batches")
    ap.add_argument("--groups", type=int, default=4, help="groups in one peer's batch")
    ap.add_argument("--phase-s", type=float, default=90.0)
    ap.add_argument("--cycles", type=int, default=1, help="calm/scale pairs, in turn")
    ap.add_argument(
        "--target-msgs-per-s",
        type=float,
        help="the peers' swarm.target_msgs_per_s: each publishes a round with the "
        "probability its publish_rate settles at (default: every round)",
    )
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--questions", type=int, default=2)
    ap.add_argument("--external", type=int, default=1, help="peer groups trained a round")
    ap.add_argument("--keep", action="store_true", help="keep the temp folder (logs)")
    ap.add_argument("--model", help=MODEL_HELP)
    ap.add_argument("--pin", action="store_true", help=PIN_HELP)
    ap.add_argument("--net-process", action="store_true", help=NET_PROCESS_HELP)
    ap.add_argument(
        "--verify",
        default="on_arrival",
        choices=["on_arrival", "when_drawn"],
        help="the node's sapo.verify (configs/public.yaml: when_drawn)",
    )
    ap.add_argument("--forwarder", metavar="ADDR", help=argparse.SUPPRESS)
    ap.add_argument("--proc", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--identities", type=int, default=1, help=argparse.SUPPRESS)
    ap.add_argument("--share", type=float, default=1.0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.forwarder:
        run_forwarder(
            args.forwarder, args.proc, args.identities, args.period, args.groups, args.share
        )
        return
    sys.exit(asyncio.run(amain(args)))


if __name__ == "__main__":
    main()

"""Flood measurement: a real node's round time calm vs flooded by 1 peer and by 5 Sybils.

The victim is a ``swarmnode start`` process training a tiny model (tests/tiny.py) in
a swarm, with ``--external`` peer groups per round. An honest peer (a
``GossipTransport`` in this process) publishes one realistic batch of catalog items
each time the victim finishes a round, as in scripts/bench_swarm.py. Flooders run in
a separate process (``--flooder``): raw py-libp2p hosts, one identity each, that
join the topic, wait until the victim is in their mesh, then publish validly signed
small messages (payloads built with msgpack directly, never swarmnode's encoder) as
fast as they can. A phase's rounds are counted only once the victim's own counters
show the flood arriving; if it never does, the run is reported INVALID (exit 1).

Per phase (calm, 1peer, 5sybil): median round time (interval between metrics
records), honest groups accepted (the honest peer's ``accepted`` verdicts) and
trained on (``external_by_peer``), flood messages sent vs counted by the victim
(msgs_in, dropped.*, rejected.*), flooders graylisted, the victim's log growth per
minute (its stderr, at the default log level) and the flooder's CPU seconds.
Last line: ratio_1peer ratio_5sybil, honest accepted/trained in each flood phase,
tokens trained, log bytes per minute. Goal: ratios <= 1.10.

    nice -n 10 .venv/bin/python scripts/bench_flood.py --rounds 12
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

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from swarmnode.config import SwarmConfig, parse_config  # noqa: E402
from swarmnode.control import ControlError, query_status  # noqa: E402
from swarmnode.metrics import RoundRecord, read_rounds  # noqa: E402
from swarmnode.p2p.gossip import topic_for  # noqa: E402
from swarmnode.p2p.transport import GossipTransport  # noqa: E402
from swarmnode.p2p.wire import encode_batch  # noqa: E402
from swarmnode.rewards import make_scorer  # noqa: E402
from swarmnode.tasks import TaskMix  # noqa: E402

sys.path.insert(0, str(REPO / "scripts"))
from bench_swarm import TASKS, node_cfg, peer_batch  # noqa: E402

TOPIC = topic_for("default")
FLOODERS: list[subprocess.Popen[bytes]] = []  # killed on the way out, whatever happens


# ---- the flooder process -----------------------------------------------------------


def flood_payload(i: int) -> bytes:
    import msgpack

    group = {
        "ref": {"dataset": "basic_arithmetic", "config": {}, "seed": 0, "index": i},
        "question": "2+2?",
        "completions": ["4", "5"],
        "rewards": [1.0, 0.0],
        "model": "",
        "created": time.time(),
        "finished": [True, True],
    }
    return bytes(msgpack.packb({"v": 2, "swarm": "default", "round": i, "groups": [group]}))


def run_flooder(target: str, identities: int, seconds: float) -> None:
    """Raw py-libp2p hosts: mesh with the victim, then publish as fast as they can.
    Prints {"ready": [peer ids]} once every host has the victim in its mesh, and
    {"sent": n, ...} at the end."""
    import trio
    from libp2p import new_host
    from libp2p.peer.peerinfo import info_from_p2p_addr
    from libp2p.pubsub.gossipsub import GossipSub
    from libp2p.pubsub.pubsub import Pubsub
    from libp2p.tools.anyio_service import background_trio_service
    from multiaddr import Multiaddr

    from swarmnode.p2p.gossip import GOSSIP_PROTOCOLS

    info = info_from_p2p_addr(Multiaddr(target))
    sent = [0] * identities
    failed = [0] * identities
    ready: list[str] = []

    async def one(k: int, all_ready: trio.Event, stop_at: list[float]) -> None:
        listen = [Multiaddr("/ip4/127.0.0.1/tcp/0")]
        host = new_host(listen_addrs=listen)
        gs = GossipSub(list(GOSSIP_PROTOCOLS), 6, 4, 12, heartbeat_interval=1)
        ps = Pubsub(host, gs, strict_signing=True)
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
            ready.append(host.get_id().to_base58())
            if len(ready) == identities:
                print(json.dumps({"ready": ready}), flush=True)
                stop_at.append(time.monotonic() + seconds)
                all_ready.set()
            await all_ready.wait()
            i = 0
            while time.monotonic() < stop_at[0]:
                try:
                    await ps.publish(TOPIC, flood_payload(i))
                    sent[k] += 1
                except Exception:  # cut off by the victim: keep trying, as attackers do
                    failed[k] += 1
                    await trio.sleep(0.01)
                i += 1
                if i % 20 == 0:
                    await trio.sleep(0)

    async def main() -> None:
        all_ready, stop_at = trio.Event(), []  # type: ignore[var-annotated]
        async with trio.open_nursery() as nursery:
            for k in range(identities):
                nursery.start_soon(one, k, all_ready, stop_at)

    try:
        trio.run(main)
    finally:
        cpu = resource.getrusage(resource.RUSAGE_SELF)
        out: dict[str, float] = {"sent": sum(sent), "publish_failed": sum(failed)}
        out["cpu_s"] = round(cpu.ru_utime + cpu.ru_stime, 1)
        print(json.dumps(out), flush=True)


# ---- the measuring side -------------------------------------------------------------


def flood_counts(status: dict[str, Any]) -> int:
    """Every inbound message the victim counted: delivered, dropped or rejected."""
    c = status["swarm"]["counters"]
    return c.get("msgs_in", 0) + sum(
        v for k, v in c.items() if k.startswith(("dropped.", "rejected.")) and "groups" not in k
    )


async def honest_peer(
    addr: str, tmp: Path, node_data: Path, stop: asyncio.Event, q: int, g: int, ids: list[str]
) -> None:
    """Publishes one realistic batch each time the victim finishes a round."""
    cfg = SwarmConfig(
        enabled=True, listen=["/ip4/127.0.0.1/tcp/0"], bootstrap=[addr], discovery_interval_s=0.5
    )
    peer = GossipTransport(cfg, tmp / "honest")
    mix = TaskMix(parse_config({"tasks": {**TASKS, "seed": 1000}}).tasks)
    score = make_scorer(0.0)  # honest: the rewards it claims are the ones the victim finds
    await peer.start()
    ids.append(peer.peer_id)
    rng, seen = random.Random(0), 0
    try:
        while not stop.is_set():
            n = len(read_rounds(node_data / "metrics.jsonl"))
            for r in range(seen + 1, n + 1):
                groups = peer_batch(mix, r, q, g, 0, rng)
                for grp in groups:
                    grp.rewards = score(grp.completions, mix.regenerate(grp.ref))[0]
                await peer.publish(encode_batch("default", r, groups))
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

    async def wait_rounds(self, n: int, timeout: float) -> list[RoundRecord]:
        deadline = time.monotonic() + timeout
        while len(recs := self.rounds()) < n:
            if time.monotonic() > deadline:
                raise SystemExit(f"victim: fewer than {n} rounds in {timeout:.0f}s")
            await asyncio.sleep(0.2)
        return recs


async def phase(
    victim: Victim, name: str, identities: int, rounds: int, addr: str, honest: str
) -> dict[str, Any]:
    flooder, before = None, flood_counts(victim.status())
    if identities:
        flooder = subprocess.Popen(
            [sys.executable, __file__, "--flooder", addr, "--identities", str(identities)],
            cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO)},
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        FLOODERS.append(flooder)
        assert flooder.stdout is not None
        line = await asyncio.wait_for(asyncio.to_thread(flooder.stdout.readline), 120)
        flood_ids = json.loads(line)["ready"]  # meshed with the victim
        deadline = time.monotonic() + 60
        while flood_counts(victim.status()) - before < 100:  # the flood shows at the victim
            if time.monotonic() > deadline:
                raise SystemExit(f"{name}: INVALID: the flood never reached the victim")
            await asyncio.sleep(0.5)
    st0, log0, t0 = victim.status(), victim.log.stat().st_size, time.monotonic()
    start = len(victim.rounds()) + 1  # the first whole round under these conditions
    recs = (await victim.wait_rounds(start + rounds, 60 + 30 * rounds))[start - 1 : start + rounds]
    st1, log1, t1 = victim.status(), victim.log.stat().st_size, time.monotonic()
    out: dict[str, Any] = {}
    if flooder is not None:
        flooder.send_signal(signal.SIGINT)  # trio: KeyboardInterrupt, then the figures
        tail = await asyncio.to_thread(flooder.communicate, timeout=30)
        out.update(json.loads(tail[0].decode().strip().splitlines()[-1]))
        scores = st1["swarm"].get("peer_scores", {})
        out["flooders_graylisted"] = sum(
            1 for p in flood_ids if p in st1["swarm"].get("graylisted", [])
        )
        out["flooder_scores"] = [scores.get(p, {}).get("score") for p in flood_ids]
    times = [b.time - a.time for a, b in itertools.pairwise(recs)]

    def verdicts(st: dict[str, Any]) -> dict[str, int]:
        return dict(st["swarm"]["peer_scores"].get(honest, {}).get("verdicts", {}))

    out.update(
        round_s=round(statistics.median(times), 3),
        rounds=len(times),
        counted_in=flood_counts(st1) - flood_counts(st0),
        honest_accepted=verdicts(st1).get("accepted", 0) - verdicts(st0).get("accepted", 0),
        honest_trained=sum(r.external_by_peer.get(honest, 0) for r in recs[1:]),
        groups_trained=sum(r.groups_trained for r in recs[1:]),
        tokens_trained=sum(r.tokens_trained for r in recs[1:]),
        ingest_time_share=recs[-1].ingest_time_share,
        log_bytes_per_min=round((log1 - log0) * 60 / (t1 - t0)),
        counters={
            k: v - st0["swarm"]["counters"].get(k, 0)
            for k, v in st1["swarm"]["counters"].items()
            if k.startswith(("dropped.", "rejected.", "inbox_dropped", "peers_graylisted"))
            and v != st0["swarm"]["counters"].get(k, 0)
        },
    )
    print(name, json.dumps(out), flush=True)
    return out


async def amain(args: argparse.Namespace) -> int:
    tmp = Path(tempfile.mkdtemp(prefix="bench-flood-"))
    from tests.tiny import make_tiny_model

    model = str(make_tiny_model(tmp / "tiny", "llama"))
    cfg = node_cfg(model, tmp / "victim", True, args.external, args.questions, 8, 48)
    (tmp / "victim.yaml").write_text(yaml.safe_dump(cfg))
    log = tmp / "victim.log"
    proc = subprocess.Popen(
        [sys.executable, "-m", "swarmnode.cli", "start", "--config", str(tmp / "victim.yaml")],
        cwd=REPO,
        env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)},
        stdout=subprocess.DEVNULL,
        stderr=log.open("wb"),
    )
    victim = Victim(proc, tmp / "victim", log)
    stop, ids = asyncio.Event(), []  # type: ignore[var-annotated]
    honest_task = None
    try:
        addr = None
        while addr is None:
            victim.rounds()
            try:
                addr = victim.status()["swarm"]["listen_addrs"][0]
            except (ControlError, IndexError, KeyError, TypeError):
                await asyncio.sleep(0.5)
        honest_task = asyncio.create_task(
            honest_peer(addr, tmp, tmp / "victim", stop, args.questions, 8, ids)
        )
        await victim.wait_rounds(args.warmup, 600)
        while not ids:
            await asyncio.sleep(0.1)
        res = {
            name: await phase(victim, name, n, args.rounds, addr, ids[0])
            for name, n in (("calm", 0), ("1peer", 1), ("5sybil", 5))
        }
    finally:
        for child in FLOODERS:
            if child.poll() is None:
                child.kill()
        stop.set()
        if honest_task is not None:
            await asyncio.wait_for(honest_task, 30)
        proc.terminate()
        proc.wait(timeout=60)
    calm = res["calm"]["round_s"]
    one, syb = res["1peer"], res["5sybil"]
    print(
        f"ratio_1peer {one['round_s'] / calm:.2f} ratio_5sybil {syb['round_s'] / calm:.2f}"
        f" calm_round_s {calm:.3f}"
        f" honest_accepted_1peer {one['honest_accepted']} trained {one['honest_trained']}"
        f" honest_accepted_5sybil {syb['honest_accepted']} trained {syb['honest_trained']}"
        f" honest_calm {res['calm']['honest_accepted']}/{res['calm']['honest_trained']}"
        f" groups_trained_flood {one['groups_trained'] + syb['groups_trained']}"
        f" tokens_trained_flood {one['tokens_trained'] + syb['tokens_trained']}"
        f" flood_sent {one['sent']}/{syb['sent']} counted {one['counted_in']}/{syb['counted_in']}"
        f" graylisted {one['flooders_graylisted']}/1 {syb['flooders_graylisted']}/5"
        f" log_bytes_per_min {max(one['log_bytes_per_min'], syb['log_bytes_per_min'])}"
    )
    if not args.keep:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=12, help="rounds measured per phase")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--questions", type=int, default=2)
    ap.add_argument("--external", type=int, default=1, help="peer groups trained a round")
    ap.add_argument("--keep", action="store_true", help="keep the temp folder (logs)")
    ap.add_argument("--flooder", metavar="ADDR", help=argparse.SUPPRESS)
    ap.add_argument("--identities", type=int, default=1, help=argparse.SUPPRESS)
    ap.add_argument("--seconds", type=float, default=3600, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.flooder:
        run_flooder(args.flooder, args.identities, args.seconds)
        return
    sys.exit(asyncio.run(amain(args)))


if __name__ == "__main__":
    main()

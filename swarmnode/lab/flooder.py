"""The flooder process of scripts/bench_flood.py: raw py-libp2p hosts that flood a node.

One host per identity (Ed25519), each its own gossipsub router with py-libp2p's spam
guard off, as an attacker would run it: it joins the swarm topic, waits until the
victim is in its mesh (and every other identity's too), then publishes validly signed,
well-formed messages (msgpack built here, never swarmnode's encoder) of real catalog
items with true reward claims, so that nothing but their rate can count against them:
as fast as the connection takes them, or ``--rate`` a second (``SILENT``: none, a peer
like any other with nothing to say). Each counts what its router really queued for the
victim (``sent``) apart from what its outbound queue dropped, the PRUNEs it got and the
seconds it had the victim in its mesh. It redials whenever the victim cut it off.

``--apart``: the same hosts flood a stand-in instead (one more raw host in this process,
a stock py-libp2p gossipsub router with strict signing that speaks the meshsub versions
the node speaks by default, so that neither side sends IDONTWANT, and relays each
message to the other flooders as the victim would): the attack's whole CPU stays on the attackers'
machine and none of its messages reach the victim. On a machine that also runs the
victim, that phase measures what the attackers' load costs the victim through the
machine alone (caches, memory, the hypervisor), apart from anything the node does.

``--listen-ip``: where its hosts listen; bench_flood's ``5sybil_far`` runs it in the
far namespace of a ``FarLink`` (swarmnode/lab/farlink.py), as on a machine of its own.

Prints ``{"ready": [peer ids]}`` once every identity is meshed, its figures as one JSON
line every 2 s and once more when it stops (SIGINT). Run by ``bench_flood.start_flooder``:

    python -m swarmnode.lab.flooder ADDR --identities 5 --rate 4 --groups 6 --seed 5000
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import resource
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import msgpack
import trio
from libp2p import new_host
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.peer.peerinfo import info_from_p2p_addr
from libp2p.pubsub.gossipsub import GossipSub
from libp2p.pubsub.pb import rpc_pb2
from libp2p.pubsub.pubsub import Pubsub
from libp2p.tools.anyio_service import background_trio_service
from multiaddr import Multiaddr

from swarmnode.config import SwarmConfig, parse_config
from swarmnode.lab.bench_swarm import TASKS, peer_batch
from swarmnode.learn.rewards import make_scorer
from swarmnode.learn.tasks import TaskMix
from swarmnode.p2p.gossip import GOSSIP_PROTOCOLS, node_protocols, topic_for

TOPIC = topic_for("default")
SILENT = -2.0  # a rate: meshed with the victim, publishing nothing


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
    now = time.time()
    batch = [dict(pool[(i * groups + j) % len(pool)], created=now) for j in range(groups)]
    obj = {"v": 2, "swarm": "default", "round": i + 1, "groups": batch}
    return bytes(msgpack.packb(obj, use_bin_type=True))


def _cpu_s() -> float:
    cpu = resource.getrusage(resource.RUSAGE_SELF)
    return cpu.ru_utime + cpu.ru_stime


@asynccontextmanager
async def _router(
    protocols: list[Any], listen_ip: str, **gossip: Any
) -> AsyncIterator[tuple[Any, Pubsub, GossipSub]]:
    """A raw py-libp2p host listening on ``listen_ip`` with a gossipsub router (D 6,
    4-12, strict signing), running and ready: (host, pubsub, gossipsub)."""
    listen = [Multiaddr(f"/ip4/{listen_ip}/tcp/0")]
    host = new_host(key_pair=create_new_key_pair(), listen_addrs=listen)
    gs = GossipSub(protocols, 6, 4, 12, heartbeat_interval=1, **gossip)
    ps = Pubsub(host, gs, strict_signing=True)
    async with (
        host.run(listen_addrs=listen),
        background_trio_service(ps),
        background_trio_service(gs),
    ):
        await ps.wait_until_ready()
        yield host, ps, gs


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
        self,
        target: str,
        identities: int,
        seconds: float,
        rate: float,
        groups: int,
        seed: int,
        apart: bool = False,
        listen_ip: str = "127.0.0.1",
    ) -> None:
        self.info = info_from_p2p_addr(Multiaddr(target))
        self.apart = apart  # flood a stand-in (main starts it and sets self.info to it)
        self.listen_ip = listen_ip  # where its hosts listen (the victim may dial them)
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
        self.ready_cpu_s = 0.0  # the process's CPU when the flood began (start-up's cost)

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
        # py-libp2p's spam guard also throttles our own publishes (10/s): an attacker
        # turns it off.
        async with _router(
            list(GOSSIP_PROTOCOLS), self.listen_ip, spam_protection_enabled=False
        ) as (
            host,
            ps,
            gs,
        ):
            self.count_sends(k, ps, gs)
            await ps.subscribe(TOPIC)
            with trio.fail_after(60):
                await host.connect(info)
                while info.peer_id not in gs.mesh.get(TOPIC, set()):
                    await trio.sleep(0.2)
            self.ready.append(host.get_id().to_base58())
            if len(self.ready) == self.identities:
                print(json.dumps({"ready": self.ready}), flush=True)
                self.stop_at.append(time.monotonic() + self.seconds)
                self.ready_cpu_s = _cpu_s()
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
        sent = self.sent
        out: dict[str, Any] = {"sent": sum(sent), "sent_by": sent, "published": sum(self.published)}
        out.update(
            queue_dropped=sum(self.queue_dropped),
            failed=sum(self.failed),
            redials=sum(self.redials),
            pruned_by=self.pruned,
            meshed_s_by=self.meshed_s,
        )
        out["cpu_s"] = round(_cpu_s(), 1)  # with start-up (the identities' item pools)
        out["flood_cpu_s"] = round(_cpu_s() - self.ready_cpu_s, 1) if self.ready_cpu_s else None
        return json.dumps(out)

    async def report(self) -> None:
        """The figures every 2 s: a flooder stuck in a write still leaves its count."""
        await self.all_ready.wait()
        while True:
            await trio.sleep(2)
            print(self.figures(), flush=True)

    async def stand_in(self, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """``--apart``: a stock router with strict signing in the victim's place, on
        this process's core; its address becomes the hosts' target. It speaks what the
        node speaks by default (no gossipsub v1.2: with it, it and every flooder sent
        each other IDONTWANT for every message, and the attackers' process spent 71 s
        of CPU in a 240 s phase against 33 s flooding the node)."""
        protocols = node_protocols(idontwant=SwarmConfig().idontwant)
        async with _router(protocols, self.listen_ip) as (host, ps, _):
            sub = await ps.subscribe(TOPIC)
            addr = f"{host.get_addrs()[0]}"
            if "/p2p/" not in addr:
                addr += f"/p2p/{host.get_id().to_base58()}"
            self.info = info_from_p2p_addr(Multiaddr(addr))
            task_status.started()
            while True:  # read what it is sent, as a subscriber does
                await sub.get()

    async def main(self) -> None:
        async with trio.open_nursery() as nursery:
            if self.apart:
                await nursery.start(self.stand_in)
            nursery.start_soon(self.report)
            for k in range(self.identities):
                nursery.start_soon(self.one, k)


def run_flooder(flooder: Flooder) -> None:
    """Raw py-libp2p hosts: mesh with the victim (``--apart``: a stand-in), then publish
    (``rate`` messages a second each; 0: as fast as they can). Prints {"ready": [peer
    ids]} once every host has its target in its mesh, and the figures ({"sent": n,
    ...}) at the end."""
    try:
        trio.run(flooder.main)
    finally:
        print(flooder.figures(), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("target", metavar="ADDR", help="the victim's multiaddr, with /p2p/")
    ap.add_argument("--identities", type=int, default=1)
    ap.add_argument("--seconds", type=float, default=3600, help="the most it floods")
    ap.add_argument(
        "--rate", type=float, default=0.0, help="messages/s each (0: as fast as it can)"
    )
    ap.add_argument("--groups", type=int, default=1, help="groups per message")
    ap.add_argument("--seed", type=int, default=5000, help="which catalog items it sends")
    ap.add_argument(
        "--apart",
        action="store_true",
        help="flood a stand-in in this process instead of ADDR (the attack's CPU, none of "
        "its messages)",
    )
    ap.add_argument(
        "--listen-ip",
        default="127.0.0.1",
        help="the address its hosts listen on (the far side of a FarLink: its far_ip)",
    )
    a = ap.parse_args()
    run_flooder(
        Flooder(a.target, a.identities, a.seconds, a.rate, a.groups, a.seed, a.apart, a.listen_ip)
    )


if __name__ == "__main__":
    main()

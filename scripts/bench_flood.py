"""Flood measurement: round time calm vs under a flood from 1 peer and from 5 Sybils.

A victim ``GossipTransport`` runs fixed CPU-bound "rounds" (pure Python, which
competes for the GIL with the libp2p thread exactly as generation glue does) while
raw py-libp2p peers publish small validly signed, well-formed messages as fast as
they can (payloads built with msgpack directly). An honest ``GossipTransport``
publishes one message a second throughout. Every log record is counted in bytes.

Last line: ratio_1peer ratio_5sybil honest_delivered/honest_sent log_bytes_per_min.
This measures the network side only (no model); the round is a stand-in workload.
Known flaw (docs/reliability.md): flooders are threads in this process and may publish
before they are meshed; the figures are not valid until that is fixed.

Run: python scripts/bench_flood.py [--seconds 20]
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import msgpack
import trio
from libp2p import new_host
from libp2p.peer.peerinfo import info_from_p2p_addr
from libp2p.pubsub.gossipsub import GossipSub
from libp2p.pubsub.pubsub import Pubsub
from libp2p.tools.anyio_service import background_trio_service
from multiaddr import Multiaddr

from swarmnode.config import SwarmConfig
from swarmnode.p2p.gossip import GOSSIP_PROTOCOLS, topic_for
from swarmnode.p2p.transport import GossipTransport

TOPIC = topic_for("default")


class ByteCounter(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.bytes = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.bytes += len(self.format(record)) + 1


def cfg(**kw: Any) -> SwarmConfig:
    return SwarmConfig(
        enabled=True, listen=["/ip4/127.0.0.1/tcp/0"], mdns=False, dial_timeout_s=5.0, **kw
    )


def payload(i: int) -> bytes:
    return bytes(
        msgpack.packb(
            {
                "v": 2,
                "swarm": "default",
                "round": i,
                "groups": [
                    {
                        "ref": {"dataset": "basic_arithmetic", "config": {}, "seed": 0, "index": i},
                        "question": "2+2?",
                        "completions": ["4", "5"],
                        "rewards": [1.0, 0.0],
                        "model": "",
                        "created": time.time(),
                        "finished": [True, True],
                    }
                ],
            }
        )
    )


def flooder(target: str, stop: threading.Event, sent: list[int]) -> None:
    async def main() -> None:
        host = new_host(listen_addrs=[Multiaddr("/ip4/127.0.0.1/tcp/0")])
        gs = GossipSub(list(GOSSIP_PROTOCOLS), 6, 4, 12, heartbeat_interval=1)
        ps = Pubsub(host, gs, strict_signing=True)
        async with (
            host.run(listen_addrs=[Multiaddr("/ip4/127.0.0.1/tcp/0")]),
            background_trio_service(ps),
            background_trio_service(gs),
        ):
            await ps.wait_until_ready()
            await ps.subscribe(TOPIC)
            with trio.move_on_after(10):
                await host.connect(info_from_p2p_addr(Multiaddr(target)))
            i = 0
            while not stop.is_set():
                try:
                    await ps.publish(TOPIC, payload(i))
                    sent[0] += 1
                except Exception:  # cut off by the victim: keep trying, as an attacker would
                    await trio.sleep(0.01)
                i += 1
                if i % 20 == 0:
                    await trio.sleep(0)

    trio.run(main)


def cpu_round(n: int = 300_000) -> float:
    t0 = time.perf_counter()
    x = 0
    for i in range(n):
        x += i * i % 7
    return time.perf_counter() - t0


async def phase(victim: GossipTransport, honest: GossipTransport, seconds: float) -> dict[str, Any]:
    rounds: list[float] = []
    sent = got = 0
    end = time.monotonic() + seconds
    next_pub = time.monotonic()
    victim.inbox.drain()
    while time.monotonic() < end:
        if time.monotonic() >= next_pub:
            await honest.publish(payload(10_000_000 + sent))
            sent += 1
            next_pub += 1.0
        rounds.append(await asyncio.to_thread(cpu_round))
        for r in victim.inbox.drain():
            if r.peer_id == honest.peer_id:
                got += 1
        await asyncio.sleep(0)
    await asyncio.sleep(2.0)  # late arrivals still count as delivered
    got += sum(1 for r in victim.inbox.drain() if r.peer_id == honest.peer_id)
    return {"round_s": sorted(rounds)[len(rounds) // 2], "honest_sent": sent, "honest_got": got}


async def main_async(seconds: float) -> None:
    counter = ByteCounter()
    logging.getLogger().addHandler(counter)
    logging.getLogger().setLevel(logging.INFO)
    tmp = Path(tempfile.mkdtemp())
    victim = GossipTransport(cfg(), tmp / "victim")
    await victim.start()
    addr = victim.info.listen_addrs[0]  # type: ignore[union-attr]
    honest = GossipTransport(cfg(bootstrap=[addr]), tmp / "honest")
    await honest.start()
    deadline = time.monotonic() + 30
    while victim.stats()["mesh_size"] < 1 and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    results: dict[str, Any] = {"calm": await phase(victim, honest, seconds)}
    for name, n in (("1peer", 1), ("5sybil", 5)):
        stop = threading.Event()
        sent = [0]
        threads = [
            threading.Thread(target=flooder, args=(addr, stop, sent), daemon=True) for _ in range(n)
        ]
        for t in threads:
            t.start()
        log0, t0 = counter.bytes, time.monotonic()
        res = await phase(victim, honest, seconds)
        res["log_bytes_per_min"] = (counter.bytes - log0) * 60 / (time.monotonic() - t0)
        res["flood_msgs"] = sent[0]
        stop.set()
        for t in threads:
            t.join(15)
        results[name] = res
    st = victim.stats()
    await honest.stop()
    await victim.stop()
    calm = results["calm"]["round_s"]
    for name in ("1peer", "5sybil"):
        results[name]["ratio"] = results[name]["round_s"] / calm
    results["counters"] = {k: v for k, v in st["counters"].items() if "." in k}
    results["graylisted"] = len(st["graylisted"])
    for k, v in results.items():
        print(k, v)
    one, syb = results["1peer"], results["5sybil"]
    print(
        f"ratio_1peer {one['ratio']:.2f} ratio_5sybil {syb['ratio']:.2f} "
        f"honest {one['honest_got'] + syb['honest_got']}/{one['honest_sent'] + syb['honest_sent']} "
        f"log_bytes_per_min {max(one['log_bytes_per_min'], syb['log_bytes_per_min']):.0f}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=20.0)
    asyncio.run(main_async(ap.parse_args().seconds))


if __name__ == "__main__":
    main()

"""Idle CPU of one transport: the bench's 10 ms poll loop vs waiting on the inbox.

PYTHONPATH=. .venv/bin/python docs/experiments/2026-12-03-benchpoll/idle_loop_cpu.py poll 20
PYTHONPATH=. .venv/bin/python docs/experiments/2026-12-03-benchpoll/idle_loop_cpu.py wait 20
"""

import asyncio
import sys
import tempfile
import time
from pathlib import Path

from swarmnode.lab.bench_gossip import cpu_s, swarm_cfg
from swarmnode.p2p.netshare import non_trainer_cpu
from swarmnode.p2p.transport import GossipTransport


async def main(mode: str, secs: float) -> None:
    boot = GossipTransport(swarm_cfg([]), Path(tempfile.mkdtemp()))
    await boot.start()
    t = GossipTransport(swarm_cfg([boot.info.listen_addrs[0]]), Path(tempfile.mkdtemp()))
    await t.start()
    await asyncio.sleep(5)
    c0, n0, t0 = cpu_s(), non_trainer_cpu(), time.monotonic()
    end = t0 + secs
    while time.monotonic() < end:
        if mode == "poll":
            t.inbox.drain()
            await asyncio.sleep(0.01)
        else:
            await t.receive(timeout=min(1.0, end - time.monotonic()))
    dt = time.monotonic() - t0
    print(
        f"{mode}: process {(cpu_s() - c0) / dt:.4f} core (2 transports), "
        f"non-trainer threads {(non_trainer_cpu() - n0) / dt:.4f}"
    )
    await t.stop()
    await boot.stop()


asyncio.run(main(sys.argv[1], float(sys.argv[2])))

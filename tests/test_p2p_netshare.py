"""``swarm.max_net_share`` over real libp2p: a raw py-libp2p peer keeps the node's
libp2p thread busy with frames of replayed (already seen) messages, nothing any
per-message check holds against it; the node's CPU outside training goes over its
cap, the cap engages, the flood is read at the fair level (counted), and an honest peer's messages
published meanwhile all arrive. Frames are built by hand (``test_p2p_hostile``)."""

from __future__ import annotations

import asyncio
import itertools
import os
import threading
from pathlib import Path

import pytest

from swarmnode.p2p import netshare
from swarmnode.p2p.transport import GossipTransport
from tests.helpers import Proc, node_config, wait_until
from tests.test_p2p_hostile import ATTACKER_ID, frame, message, paced_flooder, payload
from tests.test_p2p_swarm import TIMEOUT, Collector, batch, run, swarm_cfg, wait_for


def test_a_replay_flood_is_held_to_the_cap_and_an_honest_peer_still_gets_through(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(netshare, "STARTUP_S", 0.0)  # the flood starts with the node
    # Both peers are seconds old here; the cap holds newer peers for older ones
    # (TENURE_RATIO, test_netshare), so let it hold the heavier of two alike peers.
    monkeypatch.setattr(netshare, "TENURE_RATIO", 1.0)
    good = message(payload(1))
    f = frame(*[good] * 40)  # one valid message, then 39 copies of it in every frame

    async def main() -> None:
        node = GossipTransport(swarm_cfg(max_net_share=0.02, newcomer_s=0), tmp_path / "node")
        await node.start()
        addr = node.info.listen_addrs[0]  # type: ignore[union-attr]
        honest = GossipTransport(swarm_cfg(bootstrap=[addr]), tmp_path / "honest")
        await honest.start()
        col = Collector(node)
        finished = threading.Event()
        endless = itertools.takewhile(lambda _: not finished.is_set(), itertools.repeat(f))
        attacker = threading.Thread(
            target=paced_flooder, args=(addr, endless, 0.0, finished.is_set)
        )
        try:
            await wait_for(lambda: honest.stats()["mesh_size"] >= 1, "honest peer in mesh")
            attacker.daemon = True
            attacker.start()
            await wait_for(
                lambda: node.stats()["reading"].get("net_share_level") is not None,
                "the cap engaged",
            )
            for r in range(10, 15):
                await honest.publish(batch(r))
                await asyncio.sleep(0.3)
            for r in range(10, 15):
                await wait_for(lambda r=r: col.has(honest.peer_id, r), f"honest round {r}")
            st = node.stats()
            c = st["counters"]
            assert c.get("throttled.net_share", 0) > 0 and c.get("dropped.seen", 0) > 0
            assert st["reading"]["net_share_cap"] == 0.02
            me = ATTACKER_ID.to_base58()
            assert me in st["connected_peers"]  # nothing invalid: read less, not cut off
            assert honest.peer_id not in st["graylisted"]
        finally:
            finished.set()
            attacker.join(TIMEOUT)
            await honest.stop()
            await node.stop()

    run(main())


@pytest.mark.skipif(not hasattr(os, "SCHED_BATCH"), reason="SCHED_BATCH is Linux's")
def test_a_node_runs_its_trainer_as_usual_and_every_other_thread_batch(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    """A real ``swarmnode start`` process: the thread that does the training (the one
    with the most CPU once rounds ran) is SCHED_OTHER, the main thread and the threads
    it starts (the libp2p thread, py-libp2p's cache cleaner, the event loop's workers)
    SCHED_BATCH (their wake-ups do not preempt it); native threads the trainer starts
    (torch's, the tokenizer's) are the trainer's and SCHED_OTHER. With
    ``swarm.batch_threads: false`` the node touches no policy: every thread keeps the
    one it was launched with (this test's, which CI may run under SCHED_BATCH). Read
    from outside, through /proc and sched_getscheduler."""

    def cpu(pid: int) -> dict[int, int]:
        out = {}
        for task in Path(f"/proc/{pid}/task").iterdir():
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
            out[int(task.name)] = int(fields[11]) + int(fields[12])
        return out

    def policies(batch_threads: bool) -> tuple[int, int, list[int]]:
        name = f"n{int(batch_threads)}"
        cfg = node_config(tmp_path, name, tiny_model_dir)
        text = cfg.read_text().replace(
            "swarm:\n", f"swarm:\n  batch_threads: {str(batch_threads).lower()}\n", 1
        )
        cfg.write_text(text)
        node = Proc(cfg, tmp_path / name)
        try:
            wait_until(lambda: node.node().get("round", 0) >= 2, f"{name}: 2 rounds")
            before = cpu(node.proc.pid)  # the imports were the main thread's: from here
            rounds = node.node()["round"]
            wait_until(lambda: node.node().get("round", 0) >= rounds + 10, f"{name}: 10 more")
            used = {t: c - before.get(t, 0) for t, c in cpu(node.proc.pid).items()}
            trainer = max(used, key=used.__getitem__)
            others = [os.sched_getscheduler(t) for t in used if t not in (trainer, node.proc.pid)]
            return os.sched_getscheduler(trainer), os.sched_getscheduler(node.proc.pid), others
        finally:
            assert node.stop() == 0

    trainer, main, others = policies(True)
    assert trainer == os.SCHED_OTHER and main == os.SCHED_BATCH
    assert others.count(os.SCHED_BATCH) >= 3  # libp2p, its cache cleaner, a loop worker
    trainer, main, others = policies(False)
    assert {trainer, main, *others} == {os.sched_getscheduler(0)}

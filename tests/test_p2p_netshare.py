"""``swarm.max_net_share`` over real libp2p: a raw py-libp2p peer keeps the node's
libp2p thread busy with frames of replayed (already seen) messages, nothing any
per-message check holds against it; the node's CPU outside training goes over its
cap, the cap engages, the flood is read at the fair level (counted), and an honest peer's messages
published meanwhile all arrive. Frames are built by hand (``test_p2p_hostile``)."""

from __future__ import annotations

import asyncio
import itertools
import threading
from pathlib import Path

import pytest

from swarmnode.p2p import netshare
from swarmnode.p2p.transport import GossipTransport
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

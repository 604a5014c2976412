"""Real libp2p hosts on loopback: a peer that comes back is heard again at once.

In one process, over GossipTransport (the slow multi-process versions: tests/test_churn.py
and tests/test_partition.py). Every wait polls with a deadline.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from swarmnode.p2p.transport import GossipTransport
from swarmnode.share.wire import decode_batch
from tests.helpers import batch, swarm_cfg, wait_for

BURST = 40  # messages the first life publishes, ten a second (gossipsub allows 30)


def test_restarted_peer_is_not_mistaken_for_its_earlier_life(tmp_path: Path) -> None:
    """py-libp2p numbers a host's messages from int(time.time()) up, one per message, and
    peers drop a (sender, seqno) they saw in the last 120 s. A node that published
    faster than one message a second and restarted with the same identity reused
    seqnos of its first life: its new messages were dropped as already seen."""

    async def main() -> None:
        fast = {"origin_msgs_per_s": 1000.0, "origin_msgs_burst": 1000.0}
        b = GossipTransport(swarm_cfg(**fast), tmp_path / "b")
        await b.start()
        addr = b.info.listen_addrs[0]  # type: ignore[union-attr]
        got: list[tuple[str, int]] = []

        def received(sender: str, round_: int) -> bool:
            got.extend((r.peer_id, decode_batch(r.payload).round) for r in b.inbox.drain())
            return (sender, round_) in got

        async def life(rounds: list[int]) -> str:
            """Start A on its data directory, publish ``rounds``, wait for B to get the
            last one, stop A; return A's peer ID."""
            a = GossipTransport(swarm_cfg(bootstrap=[addr], outbox_size=BURST), tmp_path / "a")
            await a.start()
            try:
                await wait_for(lambda: b.stats()["mesh_size"] >= 1, "A in B's mesh")
                for r in rounds:
                    await a.publish(batch(r))
                    await asyncio.sleep(0.1)
                await wait_for(lambda: received(a.peer_id, rounds[-1]), f"round {rounds[-1]}")
            finally:
                await a.stop()
            await wait_for(lambda: a.peer_id not in b.stats()["connected_peers"], "A gone")
            return a.peer_id

        try:
            first = await life(list(range(BURST)))
            assert await life([1000]) == first  # same identity, heard again at once
        finally:
            await b.stop()

    asyncio.run(main())

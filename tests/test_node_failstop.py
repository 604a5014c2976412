"""Fail-stop: when the network side dies, the node says so, saves and exits non-zero."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from swarmnode.checkpoint import Checkpointer
from swarmnode.config import parse_config
from swarmnode.node import Node
from swarmnode.swarm import SwarmError
from tests.conftest import tiny_config


def test_dead_libp2p_thread_stops_the_node_with_a_clear_error(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    cfg = parse_config(
        tiny_config(
            tiny_model_dir,
            tmp_path / "d",
            swarm={"enabled": True, "listen": ["/ip4/127.0.0.1/tcp/0"], "min_round_s": 0.2},
            checkpoint={"every_rounds": 1000},
        )
    )
    node = Node(cfg, echo=False)
    seen: list[str | None] = []

    async def main() -> None:
        run = asyncio.create_task(node.run())
        for _ in range(600):
            if node.round >= 2 or run.done():
                break
            await asyncio.sleep(0.1)
        transport = node.link.transport
        assert transport is not None and node.round >= 2
        transport._call_soon(transport._host.stop_event.set)  # the libp2p thread ends
        for _ in range(300):
            if node.link.failure or run.done():
                break
            await asyncio.sleep(0.1)
        seen.append(node.status()["swarm_failure"])
        await asyncio.wait_for(run, 60)

    with pytest.raises(SwarmError, match="libp2p thread stopped"):
        asyncio.run(main())
    assert seen and seen[0] and "libp2p thread stopped" in seen[0]  # visible in status
    ckpts = Checkpointer(tmp_path / "d" / "checkpoints").checkpoints()
    assert ckpts and ckpts[0][0] == node.round  # saved on the way out
    assert not (tmp_path / "d" / "control.sock").exists()

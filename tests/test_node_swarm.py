"""Whole trainer nodes in one process over the in-memory transport: three nodes train
on each other's groups; a dead transport stops a node with a clear error, saved."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from swarmnode.config import parse_config
from swarmnode.learn.checkpoint import Checkpointer
from swarmnode.learn.metrics import read_rounds
from swarmnode.node import Node
from swarmnode.share.exchange import SwarmError
from swarmnode.share.memory_transport import MemoryNetwork
from tests.helpers import tiny_config, wait_for


def swarm_node(model_dir: Path, data_dir: Path, net: MemoryNetwork, name: str, **cfg: dict) -> Node:
    raw = tiny_config(
        model_dir,
        data_dir,
        node={"name": name},
        swarm={"enabled": True, "min_round_s": 0.05},
        # The format reward gives the tiny model's groups a reward spread (signal).
        train={"learning_rate": 0.001, "format_reward_weight": 0.5},
        sapo={"local_groups": 2, "external_groups": 2},
        checkpoint={"every_rounds": 1000},
    )
    for section, values in cfg.items():
        raw[section].update(values)
    return Node(parse_config(raw), echo=False, transport=net.transport(name))


@pytest.mark.parametrize("verify", ["on_arrival", "when_drawn"])
def test_three_nodes_train_on_each_others_groups(
    tiny_model_dir: Path, tmp_path: Path, verify: str
) -> None:
    net = MemoryNetwork()
    sapo = {"local_groups": 2, "external_groups": 2, "verify": verify}
    nodes = [swarm_node(tiny_model_dir, tmp_path / n, net, n, sapo=sapo) for n in "ABC"]

    def trained_on_both() -> bool:
        return all(
            set(node.trained_from) >= {o.cfg.node.name for o in nodes if o is not node}
            for node in nodes
        )

    async def main() -> None:
        runs = []
        for n in nodes:  # one at a time: transformers' model loading is not thread-safe
            runs.append(asyncio.create_task(n.run()))
            await wait_for(lambda n=n: n.state == "training" or runs[-1].done(), "loading", 60)
        try:
            await wait_for(lambda: trained_on_both() or any(r.done() for r in runs), "sharing", 120)
            assert trained_on_both()
        finally:
            for n in nodes:
                n.stop.set()
            await asyncio.wait_for(asyncio.gather(*runs), 60)

    asyncio.run(main())
    for node in nodes:
        recs = read_rounds(node.data_dir / "metrics.jsonl")
        assert recs and recs[-1].round == node.round
        from_file = {p for r in recs for p in r.external_by_peer}
        assert from_file == set(node.trained_from)  # metrics.jsonl says what status says
        assert sum(r.external_groups for r in recs) == sum(node.trained_from.values())
        assert max(r.peers for r in recs) == 2 and max(r.ingest_accepted for r in recs) > 0
        status = node.status().control_json()["node"]  # what swarmnode status reads
        assert status["ingest"]["ingest_accepted"] > 0 and status["swarm_failure"] is None
        late = status["ingest"]["ingest_late_verified"]
        if verify == "when_drawn":  # what was trained was verified when drawn
            assert late >= sum(node.trained_from.values()) > 0
        else:
            assert late == 0 and status["ingest"]["ingest_unverified"] == 0


def test_dead_transport_stops_the_node_with_a_clear_error(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    node = swarm_node(tiny_model_dir, tmp_path / "d", MemoryNetwork(), "A")
    seen: list[str | None] = []

    async def main() -> None:
        run = asyncio.create_task(node.run())
        await wait_for(lambda: node.round >= 2 or run.done(), "two rounds", 120)
        assert node.round >= 2
        node.transport.crash()  # type: ignore[union-attr]

        def failure() -> str | None:  # what swarmnode status reads
            return node.status().control_json()["node"]["swarm_failure"]

        await wait_for(lambda: bool(failure()) or run.done(), "failure", 30)
        seen.append(failure())
        await asyncio.wait_for(run, 60)

    with pytest.raises(SwarmError, match="transport stopped unexpectedly"):
        asyncio.run(main())
    assert seen and seen[0] and "transport stopped unexpectedly" in seen[0]  # shown in status
    ckpts = Checkpointer(tmp_path / "d" / "checkpoints").checkpoints()
    assert ckpts and ckpts[0][0] == node.round  # saved on the way out
    assert not (tmp_path / "d" / "control.sock").exists()

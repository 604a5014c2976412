"""Real ``swarmnode start`` processes on loopback: sharing, bootstrap loss, PSK
isolation, a stable peer ID, a peer with another architecture, hostile messages.
Minutes of CPU, so marked slow: the default suite covers the same data path in one
process over the in-memory transport (tests/test_node_swarm.py).

Every node is a separate process with a tiny model (OMP_NUM_THREADS=1); the tests
read what a user would: ``metrics.jsonl``, the control socket (``swarmnode status``)
and the CLI. Every wait polls with a deadline; nothing asserts on a fixed sleep.
"""

from __future__ import annotations

import signal
import threading
from pathlib import Path
from typing import Any

import pytest

from swarmnode.learn.groups import ItemRef, RolloutGroup
from swarmnode.learn.tasks import ref_config, regenerate
from swarmnode.share import wire
from swarmnode.share.wire import encode_batch
from tests.helpers import (
    Proc,
    batch,
    cli,
    free_port,
    kill_live,
    node_config,
    raw_peer,
    tiny_config,
    wait_until,
)


@pytest.mark.slow
def test_three_nodes_share_survive_bootstrap_loss_and_keep_ids(
    tiny_model_dir: Path, tiny_qwen_dir: Path, tmp_path: Path
) -> None:
    """A (llama, the bootstrap address), B (llama) and C (qwen: another architecture
    and tokenizer) train on each other's groups; an intruder with the wrong PSK gets
    nothing; B and C keep exchanging after A is killed; A keeps its peer ID and B and
    C find it again at its address."""
    cli("keygen", "--psk", "--data-dir", str(tmp_path / "psk"))
    cli("keygen", "--psk", "--data-dir", str(tmp_path / "other-psk"))
    psk, wrong = tmp_path / "psk" / "swarm.key", tmp_path / "other-psk" / "swarm.key"
    # A fixed port for A, so that its restart is found again at the same address.
    a_cfg = node_config(tmp_path, "a", tiny_model_dir, psk=psk, port=free_port())
    id_before = cli("id", "--config", str(a_cfg)).splitlines()[0].removeprefix("peer id: ")
    procs: list[Proc] = []
    try:
        a = Proc(a_cfg, tmp_path / "a")
        procs.append(a)
        addr = a.addr()
        assert addr.endswith(f"/p2p/{id_before}")
        b = Proc(node_config(tmp_path, "b", tiny_model_dir, addr, psk=psk), tmp_path / "b")
        c = Proc(node_config(tmp_path, "c", tiny_qwen_dir, addr, psk=psk), tmp_path / "c")
        intruder = Proc(
            node_config(tmp_path, "x", tiny_model_dir, addr, role="bootstrap", psk=wrong),
            tmp_path / "x",
        )
        procs += [b, c, intruder]
        trio = (a, b, c)
        wait_until(lambda: all(p.swarm().get("peer_id") for p in trio), "peer ids")
        ids = {p: str(p.swarm()["peer_id"]) for p in trio}

        def trained_on_both() -> bool:
            return all({ids[q] for q in trio if q is not p} <= set(p.metrics_from()) for p in trio)

        wait_until(trained_on_both, "every node's updates to include both peers' groups")
        for p in trio:  # the same figures through the control socket
            node = p.node()
            assert {ids[q] for q in trio if q is not p} <= set(node["trained_from"])
            assert node["ingest"]["ingest_accepted"] > 0
            assert node["last_round"]["local_groups"] >= 1
        # The qwen node's groups were trained on by the llama nodes, and vice versa.
        assert b.metrics_from()[ids[c]] > 0 and c.metrics_from()[ids[b]] > 0
        peers_text = cli("peers", "--data-dir", str(tmp_path / "b"))
        assert ids[a] in peers_text and ids[c] in peers_text and "connected: 2" in peers_text
        # The intruder with another PSK never got a connection or a message.
        xs = intruder.swarm()
        assert xs["connected_peers"] == [] and xs["msgs_in"] == 0
        assert xs["peer_id"] not in a.swarm()["connected_peers"]

        # Kill the bootstrap address: B and C keep exchanging directly.
        assert a.stop(signal.SIGKILL) == -signal.SIGKILL
        base_b, base_c = b.metrics_from()[ids[c]], c.metrics_from()[ids[b]]
        wait_until(
            lambda: (
                ids[a] not in b.swarm()["connected_peers"]
                and b.metrics_from()[ids[c]] > base_b + 1
                and c.metrics_from()[ids[b]] > base_c + 1
            ),
            "B and C to keep training on each other's groups without A",
        )

        # A restarts with the same identity, so the bootstrap address B and C hold is valid.
        a2 = Proc(a_cfg, tmp_path / "a")
        procs.append(a2)
        assert a2.addr().endswith(f"/p2p/{id_before}")
        assert cli("id", "--config", str(a_cfg)).splitlines()[0] == f"peer id: {id_before}"
        wait_until(
            lambda: {ids[b], ids[c]} <= set(a2.swarm()["connected_peers"]),
            "B and C to redial the restarted bootstrap",
            timeout=30,
        )
        status_text = cli("status", "--config", str(a_cfg))
        assert f"peer id {id_before}" in status_text and "peers 2" in status_text
        for p in (b, c, intruder, a2):
            assert p.stop() == 0, p.log.read_text()[-3000:]
    finally:
        kill_live()


def _good_group(data_dir_cfg: dict[str, Any]) -> RolloutGroup:
    """A real, verifiable group from the node's own catalog: one right, one wrong."""
    spec = data_dir_cfg["tasks"]["datasets"][0]
    ref = ItemRef(spec["name"], ref_config(spec["config"], 100_000), 3, 17)
    entry = regenerate(ref)
    right, wrong = f"<answer>{entry['answer']}</answer>", "<answer>-1</answer>"
    return RolloutGroup(ref, entry["question"], [right, wrong], [1.0, 0.0])


@pytest.mark.slow
def test_hostile_messages_to_a_running_node(tiny_model_dir: Path, tmp_path: Path) -> None:
    raw = tiny_config(tiny_model_dir, tmp_path / "n")
    config = node_config(tmp_path, "n", tiny_model_dir)
    good = encode_batch("default", 9, [_good_group(raw)])
    sends = [
        (b"\xc1 not msgpack", True),
        (batch(2).replace(b"\xa1v\x02", b"\xa1v\x07", 1), True),  # unknown version
        (b"\x00" * (wire.MAX_MESSAGE_BYTES + 10), True),  # oversized
        (batch(3, swarm="other-swarm"), True),
        (batch(4), False),  # well-formed but unsigned
        (good, True),
    ]
    n = Proc(config, tmp_path / "n")
    try:
        addr = n.addr()
        wait_until(lambda: n.node().get("state") == "training", "training")
        finished = threading.Event()
        sender = threading.Thread(
            target=raw_peer, args=(addr, sends, finished.is_set, b"\x0a\x05ab"), daemon=True
        )
        sender.start()
        want = {"msgpack", "version", "too_large", "wrong_swarm", "signature", "rpc_decode"}
        wait_until(lambda: want <= set(n.swarm()["rejected"]), "every hostile message counted")
        wait_until(lambda: n.node()["ingest"]["ingest_accepted"] == 1, "the good group verified")
        finished.set()
        sender.join(60)
        round_after = n.node()["round"]
        wait_until(lambda: n.node()["round"] >= round_after + 3, "training to go on")
        node = n.node()
        assert sum(node["trained_from"].values()) == 1  # the one good group, trained on
        assert node["decode_failures"] == {}  # nothing hostile got past the validator
        text = cli("status", "--data-dir", str(tmp_path / "n"))
        for reason in want:
            assert f"{reason}=1" in text
        assert n.stop() == 0, n.log.read_text()[-3000:]
    finally:
        kill_live()

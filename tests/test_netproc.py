"""``swarm.net_process``: the libp2p host in a child process, over real libp2p.

The link's frames are checked with hostile bytes; the transport against a thread-mode
peer on loopback (messages both ways, verdicts that graylist, a clean stop); the child
killed under it; the node killed above it (its child must not outlive it); and two
real ``swarmnode start`` processes, one of each mode, training on each other's groups.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import msgpack
import pytest

from swarmnode.p2p.netproc import (
    MAX_FRAME,
    LinkError,
    ProcessTransport,
    encode_frame,
    read_frame,
)
from swarmnode.p2p.transport import GossipTransport
from swarmnode.share.transport import TransportError
from swarmnode.share.wire import decode_batch
from tests.helpers import REPO, Proc, batch, node_config, swarm_cfg, wait_for, wait_until


def frames(data: bytes) -> list[dict[str, Any]]:
    async def main() -> list[dict[str, Any]]:
        reader = asyncio.StreamReader()
        reader.feed_data(data)
        reader.feed_eof()
        out = []
        while (f := await read_frame(reader)) is not None:
            out.append(f)
        return out

    return asyncio.run(main())


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is gone as far as the node is concerned
        return "zombie" not in Path(f"/proc/{pid}/status").read_text().lower()
    except OSError:  # reaped since
        return False


def test_the_link_reads_its_own_frames_and_refuses_anything_else() -> None:
    good = encode_frame("pub", d=b"x" * 10) + encode_frame("stop")
    assert [f["t"] for f in frames(good)] == ["pub", "stop"]
    with pytest.raises(LinkError):
        encode_frame("pub", v=2)  # would overwrite the version
    body = msgpack.packb({"v": 2, "t": "pub"})
    for bad in (
        (MAX_FRAME + 1).to_bytes(4, "big") + b"\0" * 16,  # too large
        len(body).to_bytes(4, "big") + body,  # another version
        (3).to_bytes(4, "big") + b"\xc1\xc1\xc1",  # not msgpack
        (1).to_bytes(4, "big") + msgpack.packb(1),  # not a map
        good[:7],  # ends inside a frame
        b"\0\0",  # ends inside a header
    ):
        with pytest.raises(LinkError):
            frames(bad)


def test_messages_cross_both_ways_verdicts_graylist_and_stop_ends_the_child(
    tmp_path: Path,
) -> None:
    async def main() -> None:
        node = ProcessTransport(swarm_cfg(), tmp_path / "node")
        await node.start()
        pid = node.pid
        assert pid is not None and pid != os.getpid() and alive(pid)
        peer = GossipTransport(swarm_cfg(bootstrap=[node.info["listen_addrs"][0]]), tmp_path / "p")  # type: ignore[index]
        await peer.start()
        try:
            await wait_for(lambda: node.stats()["mesh_size"] >= 1, "the peer in the node's mesh")
            await wait_for(lambda: peer.stats()["mesh_size"] >= 1, "the node in the peer's mesh")
            await peer.publish(batch(1))
            got = await node.receive(30.0)
            assert got is not None and got.peer_id == peer.peer_id
            assert decode_batch(got.payload).round == 1
            await node.publish(batch(2))
            await wait_for(lambda: len(peer.inbox) >= 1, "the node's message at the peer")
            assert peer.inbox.drain()[0].peer_id == node.peer_id
            # ingestion's verdicts reach the host's scores in the child: it graylists
            node.peer_scores.report(peer.peer_id, "signature", 50)
            await wait_for(lambda: peer.peer_id in node.stats()["graylisted"], "graylisted")
            st = node.stats()
            assert st["running"] and st["peer_id"] == node.peer_id
            assert st["process"]["pid"] == pid and st["process"]["cpu_s"] > 0
            assert st["process"]["rss_mb"] > 10
            assert st["msgs_in"] >= 1 and st["msgs_out"] >= 1
        finally:
            await peer.stop()
            await node.stop()
        assert not node.running and not alive(pid)

    asyncio.run(main())


def test_a_child_that_dies_stops_the_transport_and_stop_says_why(tmp_path: Path) -> None:
    async def main() -> None:
        node = ProcessTransport(swarm_cfg(), tmp_path / "node")
        await node.start()
        assert node.running and node.pid is not None
        os.kill(node.pid, signal.SIGKILL)
        await wait_for(lambda: not node.running, "the transport to notice")
        # the exit is seen (poll) up to a poll period before the link's reader counts it
        await wait_for(lambda: "thread_crashed" in node.stats()["counters"], "the count")
        assert node.stats()["counters"]["thread_crashed"] == 1
        with pytest.raises(TransportError, match="exit code -9"):
            await node.stop()
        with pytest.raises(TransportError):
            await node.publish(batch(1))

    asyncio.run(main())


def test_a_child_that_cannot_start_says_why_and_leaves_nothing_behind(tmp_path: Path) -> None:
    async def main() -> None:
        # the child reads the swarm's key file, which is not there
        psk = tmp_path / "missing.key"
        node = ProcessTransport(swarm_cfg(psk_file=str(psk)), tmp_path / "n")
        with pytest.raises(TransportError, match=f"failed to start: {psk}: cannot read PSK"):
            await node.start()
        assert node.pid is not None and not alive(node.pid) and not node.running

    asyncio.run(main())


CHILD_OF_A_KILLED_NODE = """
import asyncio, sys
from pathlib import Path
from swarmnode.p2p.netproc import ProcessTransport
from tests.helpers import swarm_cfg

async def main():
    t = ProcessTransport(swarm_cfg(shutdown_timeout_s=2.0), Path(sys.argv[1]))
    await t.start()
    print(t.pid, flush=True)
    await asyncio.sleep(600)

asyncio.run(main())
"""


def test_the_child_does_not_outlive_a_node_killed_outright(tmp_path: Path) -> None:
    """SIGKILL gives the node no chance to stop its child: the child sees the link
    close and stops its host on its own, within its shutdown timeout."""
    node = subprocess.Popen(
        [sys.executable, "-c", CHILD_OF_A_KILLED_NODE, str(tmp_path / "node")],
        cwd=REPO,
        stdout=subprocess.PIPE,
    )
    try:
        assert node.stdout is not None
        child = int(node.stdout.readline())
        assert alive(child)
        node.kill()
        node.wait(10)
        deadline = time.monotonic() + 30
        while alive(child):
            assert time.monotonic() < deadline, "the network process outlived its node"
            time.sleep(0.1)
    finally:
        node.kill()


def test_two_real_nodes_one_with_its_host_in_a_child_train_on_each_others_groups(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    """``swarmnode start`` twice: A with ``net_process: true``, B as usual. Each trains
    on groups of the other; A reports its child; both exit 0 on SIGTERM and A's child
    is gone with it."""
    cfg_a = node_config(tmp_path, "a", tiny_model_dir)
    cfg_a.write_text(cfg_a.read_text().replace("swarm:\n", "swarm:\n  net_process: true\n", 1))
    a = Proc(cfg_a, tmp_path / "a")
    b = Proc(node_config(tmp_path, "b", tiny_model_dir, bootstrap=a.addr()), tmp_path / "b")
    try:
        child = a.swarm()["process"]["pid"]
        assert alive(child) and child != a.proc.pid
        # what a Ctrl-C or a service manager sends every process of the node: only the
        # node ends its child, so the node stops cleanly (exit 0 below), not as failed
        os.kill(child, signal.SIGINT)
        os.kill(child, signal.SIGTERM)
        wait_until(lambda: b.metrics_from().get(a.swarm()["peer_id"], 0) >= 2, "B trains on A")
        wait_until(lambda: a.metrics_from().get(b.swarm()["peer_id"], 0) >= 2, "A trains on B")
    finally:
        assert b.stop() == 0
        assert a.stop() == 0
    assert not alive(child)

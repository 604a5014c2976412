"""mDNS: two LAN-mode transports with no bootstrap find each other and exchange.

Multicast does not work on ``lo`` (no MULTICAST flag), so the test builds two
network namespaces joined by a veth pair, runs one node process in each, and
tears both down afterwards. It skips, saying why, only where the machine forbids
namespaces (not root, no ``ip``, or the kernel refuses).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

NODE = r"""
import asyncio, sys, time
from pathlib import Path
from swarmnode.config import SwarmConfig
from swarmnode.learn.groups import ItemRef, RolloutGroup
from swarmnode.p2p.transport import GossipTransport
from swarmnode.share.wire import encode_batch

async def main(ip: str, data_dir: str) -> int:
    cfg = SwarmConfig(enabled=True, name="lan", mdns=True, dht=False,
                      listen=[f"/ip4/{ip}/tcp/4001"], discovery_interval_s=0.5)
    t = GossipTransport(cfg, Path(data_dir))
    await t.start()
    g = RolloutGroup(ItemRef("basic_arithmetic", {}, 0, 1), "q", ["a", "b"], [1.0, 0.0])
    deadline = time.monotonic() + 45
    rnd = 0
    try:
        while time.monotonic() < deadline:
            if t.stats()["mesh_size"] >= 1:
                await t.publish(encode_batch("lan", rnd, [g]))
                rnd += 1
            got = await t.inbox.get(timeout=0.5)
            if got is not None:
                print("RECEIVED", got.peer_id, t.stats()["connected_peers"], flush=True)
                # keep publishing a little so the other side receives too
                for _ in range(6):
                    await t.publish(encode_batch("lan", rnd, [g])); rnd += 1
                    await asyncio.sleep(0.5)
                return 0
        print("TIMEOUT", t.stats(), flush=True)
        return 1
    finally:
        await t.stop()

sys.exit(asyncio.run(main(sys.argv[1], sys.argv[2])))
"""


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=10)


@pytest.fixture
def two_namespaces() -> Iterator[tuple[str, str]]:
    if os.geteuid() != 0:
        pytest.skip("needs root to create network namespaces (multicast is off on lo)")
    if shutil.which("ip") is None:
        pytest.skip("iproute2 'ip' command not installed")
    tag = uuid.uuid4().hex[:6]
    ns_a, ns_b, va, vb = f"snA{tag}", f"snB{tag}", f"sva{tag}", f"svb{tag}"
    try:
        _ip("netns", "add", ns_a)
        _ip("netns", "add", ns_b)
    except subprocess.CalledProcessError as err:
        subprocess.run(["ip", "netns", "del", ns_a], capture_output=True, timeout=10)
        pytest.skip(f"kernel refused network namespaces: {err.stderr.decode().strip()}")
    try:
        _ip("link", "add", va, "type", "veth", "peer", "name", vb)
        _ip("link", "set", va, "netns", ns_a)
        _ip("link", "set", vb, "netns", ns_b)
        for ns, dev, addr in ((ns_a, va, "10.231.0.1/24"), (ns_b, vb, "10.231.0.2/24")):
            _ip("-n", ns, "addr", "add", addr, "dev", dev)
            _ip("-n", ns, "link", "set", dev, "up", "multicast", "on")
            _ip("-n", ns, "link", "set", "lo", "up")
            _ip("-n", ns, "route", "add", "224.0.0.0/4", "dev", dev)
        yield ns_a, ns_b
    finally:
        for ns in (ns_a, ns_b):  # deleting a namespace also removes its veth end
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=10)


@pytest.mark.slow
def test_two_lan_nodes_find_each_other_by_mdns(
    two_namespaces: tuple[str, str], tmp_path: Path
) -> None:
    ns_a, ns_b = two_namespaces
    procs = [
        subprocess.Popen(
            ["ip", "netns", "exec", ns, sys.executable, "-c", NODE, ip, str(tmp_path / ns)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=Path(__file__).resolve().parents[1],
        )
        for ns, ip in ((ns_a, "10.231.0.1"), (ns_b, "10.231.0.2"))
    ]
    outputs = []
    for p in procs:
        try:
            out, _ = p.communicate(timeout=90)
        except subprocess.TimeoutExpired:
            p.kill()
            out, _ = p.communicate(timeout=10)
        outputs.append(out)
    for p, out in zip(procs, outputs, strict=True):
        assert p.returncode == 0, out[-3000:]
        assert "RECEIVED" in out

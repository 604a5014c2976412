"""The far link (swarmnode/lab/farlink.py): a real namespace, veth pair and RPS masks."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from swarmnode.lab.farlink import FarLink, cpu_mask, unavailable


def test_cpu_masks_are_the_hex_bitmasks_rps_takes() -> None:
    assert [cpu_mask({0}), cpu_mask({1}), cpu_mask({1, 2}), cpu_mask({0, 9})] == [
        "1",
        "2",
        "6",
        "201",
    ]


@pytest.mark.skipif(unavailable() is not None, reason=str(unavailable()))
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="one side's CPUs each: 2 CPUs")
def test_a_process_on_the_far_side_reaches_us_and_each_side_receives_on_its_cpus() -> None:
    with socket.socket() as server, FarLink({0}, {1}) as link:
        server.bind((link.near_ip, 0))
        server.listen(1)
        port = server.getsockname()[1]
        hello = (
            f"import socket; socket.create_connection(('{link.near_ip}', {port})).sendall(b'hi')"
        )
        client = subprocess.run(
            [*link.exec_prefix(), sys.executable, "-c", hello], timeout=30, capture_output=True
        )
        assert client.returncode == 0, client.stderr
        server.settimeout(10)
        conn, (peer_ip, _) = server.accept()
        with conn:
            assert conn.recv(2) == b"hi" and peer_ip == link.far_ip  # across the veth
        near = Path(f"/sys/class/net/{link.near_dev}/queues/rx-0/rps_cpus").read_text()
        assert int(near, 16) == 1
        far = subprocess.run(
            [*link.exec_prefix(), "cat", f"/sys/class/net/{link.far_dev}/queues/rx-0/rps_cpus"],
            timeout=30,
            capture_output=True,
            text=True,
        )
        assert int(far.stdout.replace(",", ""), 16) == 2
        ns = link.ns
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=30)
    assert ns not in listed.stdout  # closed: the namespace and its veth pair are gone
    assert not Path(f"/sys/class/net/{link.near_dev}").exists()

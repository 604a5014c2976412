"""Control endpoint and the keygen/id helpers; the bootstrap role daemon serving it."""

from __future__ import annotations

import asyncio
import stat
import time
from pathlib import Path

import pytest

from swarmnode.bootstrap import BootstrapNode
from swarmnode.config import parse_config
from swarmnode.ops.control import ControlError, ControlServer, query_status, socket_path
from swarmnode.ops.keys import keygen, node_id
from swarmnode.p2p.transport import GossipTransport


def cfg_for(data_dir: Path, **swarm: object):
    base = {"enabled": True, "listen": ["/ip4/127.0.0.1/tcp/0"], "discovery_interval_s": 0.5}
    base.update(swarm)
    return parse_config({"node": {"data_dir": str(data_dir)}, "swarm": base})


async def aquery(data_dir: Path) -> dict | None:
    """The CLI's blocking client, run off the loop that serves the socket."""
    loop = asyncio.get_running_loop()
    try:
        return await loop.run_in_executor(None, query_status, data_dir, 2.0)
    except ControlError:
        return None


async def poll(data_dir: Path, pred, what: str, timeout: float = 30.0) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        reply = await aquery(data_dir)
        if reply is not None and pred(reply):
            return reply
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}; last reply {reply}")
        await asyncio.sleep(0.1)


def test_bootstrap_role_serves_status_and_a_trainer_joins(tmp_path: Path) -> None:
    boot_dir = tmp_path / "boot"

    async def main() -> None:
        boot = BootstrapNode(cfg_for(boot_dir, role="bootstrap"))
        task = asyncio.create_task(boot.run())
        # The socket answers first (it guards the data_dir), the addresses follow.
        status = await poll(boot_dir, lambda r: r["swarm"]["listen_addrs"], "bootstrap addrs")
        assert stat.S_IMODE(socket_path(boot_dir).stat().st_mode) == 0o600
        assert status["node"]["role"] == "bootstrap"
        addr = status["swarm"]["listen_addrs"][0]
        trainer = GossipTransport(cfg_for(tmp_path / "t", bootstrap=[addr]).swarm, tmp_path / "t")
        await trainer.start()
        try:
            await poll(
                boot_dir,
                lambda r: trainer.peer_id in r["swarm"]["connected_peers"],
                "the trainer in the bootstrap's peers",
            )
        finally:
            await trainer.stop()
            boot.stop.set()
            await asyncio.wait_for(task, 30)
        assert not socket_path(boot_dir).exists()

    asyncio.run(main())
    with pytest.raises(ControlError, match="no node running"):
        query_status(boot_dir)


def test_status_callback_failure_is_reported_not_fatal(tmp_path: Path) -> None:
    def broken() -> dict:
        raise RuntimeError("node bug")

    async def main() -> dict:
        server = ControlServer(tmp_path, broken)
        await server.start()
        try:
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(None, query_status, tmp_path, 5.0)
        finally:
            await server.stop()

    reply = asyncio.run(main())
    assert reply["node_error"] == "RuntimeError: node bug" and reply["swarm"] is None


def test_keygen_and_id(tmp_path: Path) -> None:
    out = keygen(tmp_path, psk=False)
    assert out.startswith("created identity")
    pid = out.rsplit(" ", 1)[1]
    assert keygen(tmp_path, psk=False).startswith("kept existing")
    assert "swarm.key" in keygen(tmp_path, psk=True)
    text = node_id(cfg_for(tmp_path))
    assert f"peer id: {pid}" in text and f"/ip4/127.0.0.1/tcp/0/p2p/{pid}" in text

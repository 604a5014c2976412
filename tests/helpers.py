"""Helpers shared by the tests: configs for tiny nodes, node processes, swarm peers.

Tests import from here, never from each other (fixtures stay in ``conftest.py``).
Every wait polls with a deadline; nothing asserts on a fixed sleep.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any

import yaml

from swarmnode.config import DatasetSpec, SwarmConfig
from swarmnode.learn.groups import ItemRef, RolloutGroup
from swarmnode.learn.metrics import read_rounds
from swarmnode.learn.rewards import accuracy_reward
from swarmnode.learn.tasks import ref_config, regenerate
from swarmnode.ops.control import ControlError, query_status
from swarmnode.share.wire import encode_batch

REPO = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
TIMEOUT = 120.0  # a wait on node processes
P2P_TIMEOUT = 30.0  # a wait on in-process transports
SPEC = DatasetSpec(name="basic_arithmetic", size=1000, config={"min_terms": 2, "max_terms": 2})
CFG = ref_config(SPEC.config, SPEC.size)


def tiny_config(model_dir: Path, data_dir: Path, **sections: dict[str, Any]) -> dict[str, Any]:
    """A node config dict for a tiny model: 2 questions x 4 completions, short outputs."""
    cfg: dict[str, Any] = {
        "node": {"name": "tiny", "data_dir": str(data_dir)},
        "model": {"name": str(model_dir), "device": "cpu", "lora": {"rank": 4, "alpha": 8}},
        "tasks": {
            "datasets": [
                {
                    "name": "basic_arithmetic",
                    "config": {
                        "min_terms": 2,
                        "max_terms": 2,
                        "min_digits": 1,
                        "max_digits": 1,
                        "operators": ["+"],
                        "allow_parentheses": False,
                        "allow_negation": False,
                    },
                }
            ]
        },
        "rollout": {
            "questions_per_round": 2,
            "completions_per_question": 4,
            "max_new_tokens": 8,
            "dtype": "float32",
        },
        "train": {"learning_rate": 0.01},
        "checkpoint": {"every_rounds": 1},
    }
    for name, values in sections.items():
        cfg.setdefault(name, {}).update(values)
    return cfg


def write_config(path: Path, cfg: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(cfg), encoding="utf-8")
    return path


def start_node(config: Path, *args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "swarmnode.cli", "start", "--config", str(config), *args],
        cwd=REPO,
        env=ENV,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def wait_rounds(path: Path, n: int, proc: subprocess.Popen[bytes], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while len(read_rounds(path)) < n:
        assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
        assert time.monotonic() < deadline, f"fewer than {n} rounds within {timeout}s"
        time.sleep(0.2)


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "swarmnode.cli", *args],
        cwd=REPO,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=60,
    )


def cli(*args: str, timeout: float = 60) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "swarmnode.cli", *args],
        cwd=REPO,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def node_config(
    tmp: Path,
    name: str,
    model_dir: Path,
    bootstrap: str | None = None,
    role: str = "trainer",
    psk: Path | None = None,
    port: int = 0,
) -> Path:
    swarm: dict[str, Any] = {
        "enabled": True,
        "role": role,
        "listen": [f"/ip4/127.0.0.1/tcp/{port}"],
        "discovery_interval_s": 0.5,
        "bootstrap_backoff_max_s": 2.0,
        "min_round_s": 0.5,  # tiny rounds take ~0.1 s: do not flood the peers
        "bootstrap": [bootstrap] if bootstrap else [],
        "psk_file": str(psk) if psk else None,
    }
    cfg = tiny_config(
        model_dir,
        tmp / name,
        node={"name": name},
        model={"threads": 1},
        swarm=swarm,
        # Tiny models are rarely right, so most groups would carry no signal and be
        # dropped: the format reward (re-scored by each receiver too) gives most
        # groups a reward spread, and a low learning rate keeps that from drifting.
        train={"learning_rate": 0.001, "format_reward_weight": 0.5},
        sapo={"local_groups": 2, "external_groups": 2},
        checkpoint={"every_rounds": 50},
    )
    return write_config(tmp / f"{name}.yaml", cfg)


LIVE: list[Proc] = []  # for stack dumps when a wait times out


class Proc:
    """One ``swarmnode start`` process and its data directory."""

    def __init__(self, config: Path, data: Path, prefix: Sequence[str] = ()) -> None:
        """``prefix``: a command to run the node under, e.g. ``ip netns exec NAME``."""
        self.data = data
        self.log = data.parent / f"{data.name}.log"
        if self.log.exists():  # a restart: keep the earlier run's log
            self.log.rename(self.log.with_suffix(f".{time.monotonic_ns()}.log"))
        self.proc = subprocess.Popen(
            [*prefix, sys.executable, "-m", "swarmnode.cli", "start", "--config", str(config)],
            cwd=REPO,
            env=ENV,
            stdout=subprocess.DEVNULL,
            stderr=self.log.open("wb"),
        )
        LIVE.append(self)

    def status(self) -> dict[str, Any]:
        assert self.proc.poll() is None, f"{self.data.name} exited:\n{self.log.read_text()[-3000:]}"
        try:
            return query_status(self.data, timeout=5.0)
        except ControlError:
            return {}

    def node(self) -> dict[str, Any]:
        return self.status().get("node") or {}

    def swarm(self) -> dict[str, Any]:
        return self.status().get("swarm") or {}

    def addr(self) -> str:
        wait_until(lambda: bool(self.swarm().get("listen_addrs")), f"{self.data.name} listening")
        return str(self.swarm()["listen_addrs"][0])

    def metrics_from(self) -> Counter[str]:
        """External groups trained on, per sending peer, from metrics.jsonl."""
        out: Counter[str] = Counter()
        for rec in read_rounds(self.data / "metrics.jsonl"):
            out.update(rec.external_by_peer)
        return out

    def stop(self, sig: int = signal.SIGTERM) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.proc.wait(timeout=60)


def kill_live() -> None:
    """A test's teardown: kill every node process it started that still runs (each
    ``Proc`` is in ``LIVE``), then forget them all."""
    for p in LIVE:
        if p.proc.poll() is None:
            p.proc.kill()
            p.proc.wait(timeout=30)
    LIVE.clear()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def dump_stacks() -> str:
    """Ask every live node for its thread stacks (SIGUSR1, see cli.start); their log tails."""
    live = [p for p in LIVE if p.proc.poll() is None]
    for p in live:
        p.proc.send_signal(signal.SIGUSR1)
    time.sleep(2)
    return "\n".join(f"--- {p.data.name}:\n{p.log.read_text()[-6000:]}" for p in live)


def wait_until(pred: Callable[[], bool], what: str, timeout: float = TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}\n{dump_stacks()}")
        time.sleep(0.3)


def swarm_cfg(**kw: Any) -> SwarmConfig:
    base: dict[str, Any] = dict(
        enabled=True,
        listen=["/ip4/127.0.0.1/tcp/0"],
        discovery_interval_s=0.5,
        dial_timeout_s=5.0,
        mdns=False,
    )
    base.update(kw)
    return SwarmConfig(**base)


def batch(round_: int, swarm: str = "default") -> bytes:
    g = RolloutGroup(ItemRef("basic_arithmetic", {}, 0, round_), "2+2?", ["4", "5"], [1.0, 0.0])
    return encode_batch(swarm, round_, [g])


async def wait_for(pred: Callable[[], bool], what: str, timeout: float = P2P_TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.05)


def raw_peer(
    target_addr: str,
    sends: list[tuple[bytes, bool]],
    done: Callable[[], bool],
    garbage_frame: bytes | None = None,
) -> None:
    """A plain py-libp2p gossipsub peer (no swarmnode checks) that publishes ``sends``
    (payload, signed?) on the swarm topic, optionally writes one undecodable RPC
    frame on a fresh meshsub stream, then stays until ``done()`` or a timeout."""
    import trio
    from libp2p import new_host
    from libp2p.peer.peerinfo import info_from_p2p_addr
    from libp2p.pubsub.gossipsub import GossipSub
    from libp2p.pubsub.pubsub import Pubsub
    from libp2p.tools.anyio_service import background_trio_service
    from multiaddr import Multiaddr

    from swarmnode.p2p.gossip import GOSSIP_PROTOCOLS, topic_for

    topic = topic_for("default")

    async def main() -> None:
        host = new_host(listen_addrs=[Multiaddr("/ip4/127.0.0.1/tcp/0")])
        gossipsub = GossipSub(list(GOSSIP_PROTOCOLS), 6, 4, 12, heartbeat_interval=1)
        pubsub = Pubsub(host, gossipsub, strict_signing=True)
        info = info_from_p2p_addr(Multiaddr(target_addr))
        async with (
            host.run(listen_addrs=[Multiaddr("/ip4/127.0.0.1/tcp/0")]),
            background_trio_service(pubsub),
            background_trio_service(gossipsub),
        ):
            await pubsub.wait_until_ready()
            await pubsub.subscribe(topic)
            with trio.fail_after(P2P_TIMEOUT):
                await host.connect(info)
                while info.peer_id not in gossipsub.mesh.get(topic, set()):
                    await trio.sleep(0.05)
            for payload, signed in sends:
                pubsub.strict_signing = signed  # False = publish without a signature
                await pubsub.publish(topic, payload)
                pubsub.strict_signing = True
            if garbage_frame is not None:
                stream = await host.new_stream(info.peer_id, [GOSSIP_PROTOCOLS[1]])
                await stream.write(bytes([len(garbage_frame)]) + garbage_frame)
            with trio.move_on_after(P2P_TIMEOUT):
                while not done():
                    await trio.sleep(0.05)

    trio.run(main)


@contextlib.asynccontextmanager
async def hardened_and_stock(counters: Any) -> AsyncIterator[tuple[Any, Any, Any, Any]]:
    """In a trio run: two loopback hosts, the node's ``HardenedPubsub`` and a stock
    py-libp2p ``Pubsub`` (gossipsub heartbeat 0.2 s), both ready and subscribed to the
    swarm topic, not yet connected. Yields (node_host, node, peer_host, peer); each
    pubsub's router is its ``.router``."""
    from libp2p import new_host
    from libp2p.pubsub.gossipsub import GossipSub
    from libp2p.pubsub.pubsub import Pubsub
    from libp2p.tools.anyio_service import background_trio_service
    from multiaddr import Multiaddr

    from swarmnode.p2p.gossip import GOSSIP_PROTOCOLS, HardenedPubsub, topic_for

    loopback = Multiaddr("/ip4/127.0.0.1/tcp/0")
    node_host, peer_host = new_host(listen_addrs=[loopback]), new_host(listen_addrs=[loopback])
    node_gs = GossipSub(list(GOSSIP_PROTOCOLS), 6, 4, 12, heartbeat_interval=0.2)
    peer_gs = GossipSub(list(GOSSIP_PROTOCOLS), 6, 4, 12, heartbeat_interval=0.2)
    node = HardenedPubsub(node_host, node_gs, strict_signing=True, counters=counters)
    peer = Pubsub(peer_host, peer_gs, strict_signing=True)
    async with (
        node_host.run(listen_addrs=[loopback]),
        background_trio_service(node),
        background_trio_service(node_gs),
        peer_host.run(listen_addrs=[loopback]),
        background_trio_service(peer),
        background_trio_service(peer_gs),
    ):
        await node.wait_until_ready()
        await peer.wait_until_ready()
        await node.subscribe(topic_for("default"))
        await peer.subscribe(topic_for("default"))
        yield node_host, node, peer_host, peer


def score(completions: Any, entry: dict[str, Any]) -> tuple[list[float], list[float]]:
    return [accuracy_reward(c, entry) for c in completions], [0.0] * len(completions)


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def make_group(
    index: int,
    right: int = 1,
    wrong: int = 1,
    created: float = 1_000_000.0,
    seed: int = 7,
    claimed: list[float] | None = None,
) -> RolloutGroup:
    ref = ItemRef("basic_arithmetic", CFG, seed, index)
    entry = regenerate(ref)
    comps = [f"<answer>{entry['answer']}</answer>"] * right + [
        f"<answer>{int(entry['answer']) + k + 1}</answer>" for k in range(wrong)
    ]
    rewards = claimed if claimed is not None else [1.0] * right + [0.0] * wrong
    return RolloutGroup(ref, entry["question"], comps, rewards, created=created)

"""Chaos from outside: many raw libp2p peers against a real ``swarmnode start``.

N raw py-libp2p hosts (not swarmnode: their own minimal pubsub, or no pubsub at
all), each living a series of identities, do at random for the whole run what
peers can do: connect, subscribe, publish valid and invalid messages, write junk
frames, flood until graylisted (then come back as a new identity), disconnect and
reconnect, and open every protocol the node serves (identify, identify push,
ping, Kademlia, circuit relay hop and stop, AutoNAT, DCUtR, meshsub) to speak it
properly, send junk, or reset. The node runs on the tiny model throughout.

What must hold: the node never exits and keeps training and publishing; a fresh
peer can still connect at the end (the node is not shut out); every exception a peer
made a py-libp2p task raise was contained and counted (``errors.task.*``), none
ended a service (py-libp2p's "exited with error", our "libp2p thread ended");
its RSS and the libp2p thread's live trio tasks stay bounded (the last quarter of
the run against the second: no growth with churn).

In the slow pass: ``CHAOS_S`` seconds, ``CHAOS_PEERS`` peers. The long form, by hand:

    python -m tests.test_p2p_chaos --seconds 1800 --peers 40

(prints the same figures; exit status 1 if a check fails).
"""

from __future__ import annotations

import argparse
import logging
import random
import re
import sys
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import msgpack
import pytest
import trio
import yaml
from libp2p import new_host
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.host.autonat.autonat import AUTONAT_PROTOCOL_ID as AUTONAT
from libp2p.host.ping import ID as PING
from libp2p.host.ping import perform_ping_roundtrip
from libp2p.identity.identify.identify import ID as IDENTIFY
from libp2p.identity.identify_push.identify_push import ID_PUSH
from libp2p.kad_dht.common import PROTOCOL_ID as KAD
from libp2p.kad_dht.pb.kademlia_pb2 import Message as KadMessage
from libp2p.peer.peerinfo import PeerInfo, info_from_p2p_addr
from libp2p.pubsub.gossipsub import GossipSub
from libp2p.pubsub.pb import rpc_pb2
from libp2p.pubsub.pubsub import Pubsub
from libp2p.relay.circuit_v2.dcutr import PROTOCOL_ID as DCUTR
from libp2p.relay.circuit_v2.protocol import PROTOCOL_ID as HOP
from libp2p.relay.circuit_v2.protocol import STOP_PROTOCOL_ID as STOP
from libp2p.tools.anyio_service import background_trio_service
from libp2p.utils.varint import encode_uvarint
from multiaddr import Multiaddr

from swarmnode.learn.metrics import read_rounds
from swarmnode.p2p.gossip import GOSSIP_PROTOCOLS, topic_for
from tests.helpers import Proc, batch, free_port, node_config, wait_until

CHAOS_S = 180.0
CHAOS_PEERS = 20
LOOPBACK = Multiaddr("/ip4/127.0.0.1/tcp/0")
TOPIC = topic_for("default")
STEP_S = 10.0  # no single action of a peer runs longer
SERVED = [IDENTIFY, ID_PUSH, PING, KAD, HOP, STOP, AUTONAT, DCUTR, GOSSIP_PROTOCOLS[1]]


def _framed(data: bytes) -> bytes:
    return bytes(encode_uvarint(len(data))) + data


def _junk(rng: random.Random) -> bytes:
    return rng.randbytes(rng.choice([1, 3, 17, 200, 4000]))


def _junk_rpcs(rng: random.Random) -> list[bytes]:
    """Meshsub frames no honest peer sends: unsigned, forged, truncated, junk control."""
    unsigned = rpc_pb2.Message(
        data=batch(rng.randrange(10**6)), topicIDs=[TOPIC], from_id=b"junk", seqno=b"\x01"
    )
    rpc = rpc_pb2.RPC()
    rpc.publish.append(unsigned)
    return [
        _framed(rpc.SerializeToString()),
        _framed(b"\x0a\x05ab"),  # truncated protobuf
        _framed(b"\x1a\x03\x0a\x01\xff"),  # control field holding junk
        _framed(_junk(rng)),
    ]


def _invalid_payload(rng: random.Random) -> bytes:
    """Signed by the publisher (py-libp2p signs), refused by the node's wire decoder."""
    return rng.choice(
        [
            b"\xc1 not msgpack",
            bytes(msgpack.packb({"v": 2.0, "swarm": "default", "round": 1, "groups": []})),
            bytes(msgpack.packb({"v": 2, "swarm": "other", "round": 1, "groups": [1]})),
        ]
    )


class _NewLife(Exception):
    """Ends a peer's life early: it comes back as a new identity (a Sybil)."""


class ChaosPeer:
    """One raw peer: a series of lives (identities), each a random walk of actions."""

    def __init__(self, index: int, target: PeerInfo, stats: Counter[str], seed: int) -> None:
        self.index, self.target, self.stats = index, target, stats
        self.rng = random.Random(seed)
        self.node = target.peer_id

    async def run(self, until: float) -> None:
        while trio.current_time() < until:
            try:
                await self._life(min(until, trio.current_time() + self.rng.uniform(5, 40)))
            except Exception as err:  # the raw peer's own py-libp2p may break: a new life
                self.stats[f"peer_life_failed.{type(err).__name__}"] += 1
            self.stats["lives"] += 1

    async def _life(self, until: float) -> None:
        host = new_host(key_pair=create_new_key_pair(), listen_addrs=[LOOPBACK])
        gossipsub = GossipSub(list(GOSSIP_PROTOCOLS), 6, 4, 12, heartbeat_interval=1)
        pubsub = Pubsub(host, gossipsub, strict_signing=True)
        async with (
            host.run(listen_addrs=[LOOPBACK]),
            background_trio_service(pubsub),
            background_trio_service(gossipsub),
        ):
            await pubsub.wait_until_ready()
            if self.rng.random() < 0.8:
                await pubsub.subscribe(TOPIC)
            while trio.current_time() < until:
                name, action = self.rng.choice(ACTIONS)
                try:
                    with trio.move_on_after(STEP_S):
                        await action(self, host, pubsub)
                    self.stats[f"did.{name}"] += 1
                except _NewLife:
                    return
                except Exception as err:  # refused, reset, graylisted: the node's right
                    self.stats[f"refused.{name}"] += 1
                    self.stats[f"refused_by.{type(err).__name__}"] += 1
                    if name == "connect":  # why, in a word or four (ids and ports cut)
                        why = re.sub(r"12D3KooW\w+|\d+", "_", str(err))[:60]
                        self.stats[f"connect_refused: {why}"] += 1
                await trio.sleep(self.rng.uniform(0.05, 1.0))

    # ---- actions -----------------------------------------------------------------

    async def connect(self, host: Any, pubsub: Pubsub) -> None:
        if self.node not in host.get_connected_peers():
            # py-libp2p would refuse to redial for a minute after one refusal
            unblock = getattr(host.get_network(), "unblock_peer", None)
            if unblock is not None:
                unblock(self.node)
            try:
                await host.connect(self.target)
            except Exception:
                if self.rng.random() < 0.5:  # refused (graylisted?): a new identity
                    raise _NewLife from None
                raise

    async def disconnect(self, host: Any, pubsub: Pubsub) -> None:
        await host.disconnect(self.node)

    async def publish_valid(self, host: Any, pubsub: Pubsub) -> None:
        await self.connect(host, pubsub)
        for _ in range(self.rng.randint(1, 3)):
            await pubsub.publish(TOPIC, batch(self.rng.randrange(10**6)))

    async def publish_invalid(self, host: Any, pubsub: Pubsub) -> None:
        await self.connect(host, pubsub)
        await pubsub.publish(TOPIC, _invalid_payload(self.rng))

    async def flood(self, host: Any, pubsub: Pubsub) -> None:
        await self.connect(host, pubsub)
        for _ in range(self.rng.randint(50, 400)):
            await pubsub.publish(TOPIC, batch(self.rng.randrange(10**6)))
            await trio.sleep(0)

    async def junk_frames(self, host: Any, pubsub: Pubsub) -> None:
        await self.connect(host, pubsub)
        stream = await host.new_stream(self.node, [GOSSIP_PROTOCOLS[1]])
        for frame in self.rng.sample(_junk_rpcs(self.rng), 2):
            await stream.write(frame)

    async def identify(self, host: Any, pubsub: Pubsub) -> None:
        await self.connect(host, pubsub)
        stream = await host.new_stream(self.node, [IDENTIFY])
        await stream.read(4096)
        await stream.close()

    async def speak_junk(self, host: Any, pubsub: Pubsub) -> None:
        """Open one of the node's protocols and write junk (framed or not), maybe
        close half-way, maybe reset, maybe read what comes back."""
        await self.connect(host, pubsub)
        protocol = self.rng.choice(SERVED)
        stream = await host.new_stream(self.node, [protocol])
        self.stats[f"junk_on.{protocol}"] += 1
        data = _junk(self.rng)
        await stream.write(_framed(data) if self.rng.random() < 0.5 else data)
        ending = self.rng.choice(["close", "reset", "read"])
        if ending == "close":
            await stream.close()
        elif ending == "reset":
            await stream.reset()
        else:
            await stream.read(1024)

    async def open_and_reset(self, host: Any, pubsub: Pubsub) -> None:
        await self.connect(host, pubsub)
        stream = await host.new_stream(self.node, [self.rng.choice(SERVED)])
        await stream.reset()

    async def ping(self, host: Any, pubsub: Pubsub) -> None:
        await self.connect(host, pubsub)
        stream = await host.new_stream(self.node, [PING])
        await perform_ping_roundtrip(stream)
        await stream.close()

    async def kad_find_node(self, host: Any, pubsub: Pubsub) -> None:
        await self.connect(host, pubsub)
        stream = await host.new_stream(self.node, [KAD])
        msg = KadMessage(type=KadMessage.MessageType.FIND_NODE, key=self.rng.randbytes(32))
        await stream.write(_framed(msg.SerializeToString()))
        await stream.read(65536)
        await stream.close()

    async def new_identity(self, host: Any, pubsub: Pubsub) -> None:
        raise _NewLife


PeerAction = Callable[[ChaosPeer, Any, Pubsub], Awaitable[None]]
ACTIONS: list[tuple[str, PeerAction]] = [
    ("connect", ChaosPeer.connect),
    ("connect", ChaosPeer.connect),
    ("disconnect", ChaosPeer.disconnect),
    ("publish_valid", ChaosPeer.publish_valid),
    ("publish_valid", ChaosPeer.publish_valid),
    ("publish_invalid", ChaosPeer.publish_invalid),
    ("flood", ChaosPeer.flood),
    ("junk_frames", ChaosPeer.junk_frames),
    ("identify", ChaosPeer.identify),
    ("speak_junk", ChaosPeer.speak_junk),
    ("speak_junk", ChaosPeer.speak_junk),
    ("open_and_reset", ChaosPeer.open_and_reset),
    ("ping", ChaosPeer.ping),
    ("kad_find_node", ChaosPeer.kad_find_node),
    ("new_identity", ChaosPeer.new_identity),
]


def run_chaos(target: str, peers: int, seconds: float, stats: Counter[str], seed: int) -> None:
    """Run ``peers`` chaos peers against ``target`` for ``seconds`` (in this thread).
    A crash of the whole trio run (a raw peer's own py-libp2p) restarts it, counted."""
    info = info_from_p2p_addr(Multiaddr(target))
    deadline = time.monotonic() + seconds

    async def main() -> None:
        until = trio.current_time() + max(0.0, deadline - time.monotonic())
        async with trio.open_nursery() as nursery:
            for i in range(peers):
                chaos = ChaosPeer(i, info, stats, seed * 1000 + i + stats["driver_runs"])
                nursery.start_soon(chaos.run, until)
                await trio.sleep(0.1)

    # The raw peers' own py-libp2p complains loudly about what the node does to them
    # (rate limits, resets); none of it is the node's log, which is what is checked.
    quiet = logging.NullHandler()
    logging.getLogger("libp2p").addHandler(quiet)
    try:
        while time.monotonic() < deadline:
            stats["driver_runs"] += 1
            try:
                trio.run(main)
            except BaseException as err:  # counted; the peers start again
                stats[f"driver_crashed.{type(err).__name__}"] += 1
    finally:
        logging.getLogger("libp2p").removeHandler(quiet)


def probe_connect(target: str) -> bool:
    """Can a fresh peer still connect to the node (it is not shut out)?"""

    async def main() -> bool:
        host = new_host(listen_addrs=[LOOPBACK])
        info = info_from_p2p_addr(Multiaddr(target))
        async with host.run(listen_addrs=[LOOPBACK]):
            with trio.move_on_after(30):
                await host.connect(info)
                await trio.sleep(1.0)  # a node at its inbound cap resets at once
                return info.peer_id in host.get_connected_peers()
        return False

    try:
        return trio.run(main)
    except Exception:  # refused
        return False


class Sampler:
    """The node's figures every few seconds: rounds, RSS, live libp2p tasks, counters."""

    def __init__(self, node: Proc) -> None:
        self.node = node
        self.rows: list[dict[str, Any]] = []

    def sample(self) -> dict[str, Any]:
        swarm = self.node.swarm()
        rss_kb = 0
        for line in Path(f"/proc/{self.node.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                rss_kb = int(line.split()[1])
        row = {
            "t": time.monotonic(),
            "rounds": len(read_rounds(self.node.data / "metrics.jsonl")),
            "rss_mb": rss_kb / 1024,
            "tasks": int((swarm.get("reading") or {}).get("tasks", 0)),
            "peers": len(swarm.get("connected_peers", [])),
            "counters": dict(swarm.get("counters") or {}),
        }
        self.rows.append(row)
        return row

    def quarter(self, q: int, key: str) -> float:
        """The largest ``key`` in quarter ``q`` (0-3) of the samples."""
        n = len(self.rows)
        part = self.rows[q * n // 4 : max(q * n // 4 + 1, (q + 1) * n // 4)]
        return max(float(r[key]) for r in part)


def chaos_config(tmp: Path, model_dir: Path) -> Path:
    config = node_config(tmp, "victim", model_dir, port=free_port())
    cfg = yaml.safe_load(config.read_text())
    cfg["swarm"]["relay"] = {"serve": True}  # HOP served too: one more protocol to hit
    config.write_text(yaml.safe_dump(cfg))
    return config


def run_against_node(
    tmp: Path, model_dir: Path, peers: int, seconds: float, seed: int = 0
) -> tuple[Proc, Sampler, Counter[str]]:
    node = Proc(chaos_config(tmp, model_dir), tmp / "victim")
    target = node.addr()
    wait_until(lambda: len(read_rounds(node.data / "metrics.jsonl")) >= 2, "first rounds")
    sampler = Sampler(node)
    stats: Counter[str] = Counter()
    driver = threading.Thread(
        target=run_chaos, args=(target, peers, seconds, stats, seed), daemon=True
    )
    driver.start()
    while driver.is_alive():
        assert node.proc.poll() is None, f"the node exited:\n{node.log.read_text()[-4000:]}"
        sampler.sample()
        driver.join(5.0)
    sampler.sample()
    stats["fresh_peer_connected_after"] = int(probe_connect(target))
    return node, sampler, stats


def loud_libp2p_lines(log: str) -> list[str]:
    """py-libp2p's lines at WARNING or above in the node's log (its own loggers, or the
    root logger it sometimes uses)."""
    return [
        line
        for line in log.splitlines()
        if re.search(r" (WARNING|ERROR|CRITICAL) (libp2p[.:]|root:)", line)
    ]


def verdict(node: Proc, sampler: Sampler, stats: Counter[str]) -> list[str]:
    """The checks (module docstring), as failures: empty when all hold."""
    rows, failures = sampler.rows, []
    first, last = rows[0], rows[-1]
    counters = last["counters"]
    log = node.log.read_text(errors="replace")
    if node.proc.poll() is not None:
        failures.append(f"the node exited with {node.proc.returncode}")
    if last["rounds"] - first["rounds"] < 5:
        failures.append(f"training stalled: {first['rounds']} -> {last['rounds']} rounds")
    for text in ("exited with error", "libp2p thread ended", "swarm failure"):
        if text in log:
            failures.append(f"the log says {text!r}")
    loud = loud_libp2p_lines(log)
    if loud:
        failures.append(f"{len(loud)} py-libp2p lines at WARNING or above, e.g. {loud[0]}")
    if counters.get("thread_crashed", 0):
        failures.append("thread_crashed counted")
    if counters.get("publish_failed", 0):
        failures.append(f"{counters['publish_failed']} publishes failed (muted)")
    if counters.get("msgs_out", 0) <= rows[3 * len(rows) // 4]["counters"].get("msgs_out", 0):
        failures.append("the node published nothing in the last quarter (muted)")
    if sampler.quarter(3, "rss_mb") > 1.25 * sampler.quarter(1, "rss_mb") + 50:
        failures.append("RSS grew from the second quarter to the last")
    if sampler.quarter(3, "tasks") > 1.5 * sampler.quarter(1, "tasks") + 100:
        failures.append("live libp2p tasks grew from the second quarter to the last")
    if not stats["fresh_peer_connected_after"]:
        failures.append("a fresh peer could not connect after the chaos (shut out)")
    if stats["did.flood"] == 0 or stats["lives"] < len(rows) // 10:
        failures.append("the chaos did not happen (no flood, too few lives)")
    return failures


def report(node: Proc, sampler: Sampler, stats: Counter[str]) -> str:
    last = sampler.rows[-1]
    c = last["counters"]
    keys = ["errors.task", "errors.task_peer_dropped", "peers_graylisted", "ping_missed"]
    keys += ["msgs_out", "publish_failed", "peerstore.evicted", "dial.addrs_expired"]
    errors = {k: v for k, v in sorted(c.items()) if k.startswith("errors.task.")}
    rejected = sum(v for k, v in c.items() if k.startswith("rejected."))
    return "\n".join(
        [
            f"rounds {sampler.rows[0]['rounds']} -> {last['rounds']}, samples {len(sampler.rows)}",
            "rss_mb by quarter: "
            + " ".join(f"{sampler.quarter(q, 'rss_mb'):.0f}" for q in range(4)),
            "tasks by quarter: " + " ".join(f"{sampler.quarter(q, 'tasks'):.0f}" for q in range(4)),
            "node: " + ", ".join(f"{k} {c.get(k, 0)}" for k in keys) + f", rejected {rejected}",
            f"contained by class: {errors}",
            "peers: " + ", ".join(f"{k} {v}" for k, v in sorted(stats.items())),
        ]
    )


@pytest.mark.slow
def test_raw_peers_at_random_cannot_stop_or_bloat_a_node(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    node, sampler, stats = run_against_node(tmp_path, tiny_model_dir, CHAOS_PEERS, CHAOS_S)
    try:
        print(report(node, sampler, stats))
        assert verdict(node, sampler, stats) == [], node.log.read_text()[-4000:]
    finally:
        node.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=1800.0)
    parser.add_argument("--peers", type=int, default=40)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("/tmp/swarmnode-chaos"))
    parser.add_argument("--model", type=Path, help="a tiny model folder (default: made)")
    args = parser.parse_args(argv)
    from swarmnode.lab.tiny import make_tiny_model

    args.out.mkdir(parents=True, exist_ok=True)
    model = args.model or make_tiny_model(args.out / "tiny-llama", "llama")
    node, sampler, stats = run_against_node(args.out, model, args.peers, args.seconds, args.seed)
    try:
        print(report(node, sampler, stats))
        failures = verdict(node, sampler, stats)
        print("\n".join(failures) or "all checks hold")
        return 1 if failures else 0
    finally:
        node.stop()


if __name__ == "__main__":
    sys.exit(main())

"""Fuzz the whole inbound path of a real swarmnode libp2p host: RPC frames, envelopes, payloads.

Builds a ``P2PHost`` (HardenedPubsub + GossipSub + swarmnode's validator and inbox)
inside trio, then feeds it hostile input through the same entry points py-libp2p
uses: ``push_msg`` for gossip messages (forged ``from``, junk or ECDSA-typed
``key``, bad signatures, odd seqnos and topics, mutated msgpack payloads built by
hand, never with swarmnode's encoder) and ``stream_handler`` for whole RPC frames
(random bytes, truncated frames, junk control messages and sender records).
Interleaved honest messages (fresh keys, valid payloads) must all arrive.

Reports: messages and frames sent, exceptions that escaped (crashes), whether the
pubsub service is still running, hostile messages that reached the inbox
(poisoned), honest messages delivered. Exit status 1 on any crash or poison.

Run: python scripts/fuzz_wire.py [--messages 100000] [--seed 0]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgpack
import trio
from libp2p.crypto.ed25519 import create_new_key_pair
from libp2p.crypto.pb import crypto_pb2
from libp2p.peer.id import ID
from libp2p.pubsub.pb import rpc_pb2
from libp2p.pubsub.validators import PUBSUB_SIGNING_PREFIX
from libp2p.tools.anyio_service import background_trio_service
from multiaddr import Multiaddr

from swarmnode.config import SwarmConfig
from swarmnode.p2p.bridge import Outbox
from swarmnode.p2p.gossip import topic_for
from swarmnode.p2p.host import P2PHost
from swarmnode.share.inbox import Counters, Inbox
from swarmnode.share.wire import WireError, decode_batch

TOPIC = topic_for("default")


def valid_payload(rng: random.Random) -> dict[str, Any]:
    n = rng.randint(2, 4)
    return {
        "v": 2,
        "swarm": "default",
        "round": rng.randint(0, 1000),
        "groups": [
            {
                "ref": {"dataset": "basic_arithmetic", "config": {}, "seed": 0, "index": 1},
                "question": "2+2?",
                "completions": [f"c{rng.random()}" for _ in range(n)],
                "rewards": [1.0] + [0.0] * (n - 1),
                "model": "m",
                "created": time.time(),
                "finished": [True] * n,
            }
        ],
    }


_JUNK_VALUES: list[Any] = [
    None, True, 2.0, -1, 2**64 - 1, "", "x" * 300, [], {}, [1, [2, [3, [4, [5]]]]],
    {"a": {"b": {"c": {"d": {"e": 1}}}}}, float("nan"), float("inf"), b"bytes",
]  # fmt: skip


def _mutate(obj: Any, rng: random.Random, depth: int = 0) -> Any:
    """Replace, drop or add one field somewhere in a payload tree."""
    if isinstance(obj, dict) and obj and depth < 4:
        key = rng.choice(list(obj))
        choice = rng.random()
        out = dict(obj)
        if choice < 0.2:
            del out[key]
        elif choice < 0.3:
            out[rng.choice(["extra", "v2", ""])] = rng.choice(_JUNK_VALUES)
        elif choice < 0.7:
            out[key] = rng.choice(_JUNK_VALUES)
        else:
            out[key] = _mutate(obj[key], rng, depth + 1)
        return out
    if isinstance(obj, list) and obj and depth < 4:
        out_list = list(obj)
        i = rng.randrange(len(out_list))
        if rng.random() < 0.3:
            out_list.append(rng.choice(_JUNK_VALUES))
        else:
            out_list[i] = _mutate(out_list[i], rng, depth + 1)
        return out_list
    return rng.choice(_JUNK_VALUES)


def hostile_payload(rng: random.Random) -> bytes:
    kind = rng.random()
    if kind < 0.1:
        return rng.randbytes(rng.randint(0, 64))
    if kind < 0.15:
        data = msgpack.packb(valid_payload(rng))
        cut = rng.randrange(len(data))
        return data[:cut]  # truncated
    if kind < 0.2:
        obj = valid_payload(rng)
        obj["v"] = rng.choice([2.0, 1.0, True, "2", 3, -2, None])
        return bytes(msgpack.packb(obj))
    if kind < 0.23:
        obj = valid_payload(rng)
        obj["groups"] = obj["groups"] * rng.choice([65, 300])  # over MAX_GROUPS
        return bytes(msgpack.packb(obj))
    try:
        return bytes(msgpack.packb(_mutate(valid_payload(rng), rng), use_bin_type=True))
    except (TypeError, ValueError, OverflowError):
        return b"\xc1"


class Forger:
    """Builds gossip messages with any envelope field wrong, signed or not."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.attacker = create_new_key_pair()
        self.victim = create_new_key_pair()  # an identity the attacker pretends to be
        self.attacker_id = ID.from_pubkey(self.attacker.public_key)
        self.seq = 0
        self.signed_by_attacker: set[bytes] = set()  # payloads it signed correctly

    def _seqno(self) -> bytes:
        self.seq += 1
        return self.seq.to_bytes(8, "big")

    @staticmethod
    def sign(msg: rpc_pb2.Message, key: Any) -> bytes:
        bare = rpc_pb2.Message(
            data=msg.data, topicIDs=msg.topicIDs, from_id=msg.from_id, seqno=msg.seqno
        )
        return bytes(key.sign(PUBSUB_SIGNING_PREFIX.encode() + bare.SerializeToString()))

    def honest(self) -> rpc_pb2.Message:
        kp = create_new_key_pair()  # a fresh honest originator: its own rate bucket
        data = bytes(msgpack.packb(valid_payload(self.rng)))
        msg = rpc_pb2.Message(
            data=data,
            topicIDs=[TOPIC],
            from_id=ID.from_pubkey(kp.public_key).to_bytes(),
            seqno=self._seqno(),
        )
        msg.signature = self.sign(msg, kp.private_key)
        return msg

    def hostile(self) -> rpc_pb2.Message:
        rng = self.rng
        validly_signed_payload = rng.random() < 0.4
        data = hostile_payload(rng)
        if rng.random() < 0.05:
            data = b"\x00" * rng.choice([1024 * 1024 - 4000, 1024 * 1024 + 10])  # oversized
        from_choices = [
            self.attacker_id.to_bytes(),
            ID.from_pubkey(self.victim.public_key).to_bytes(),
            rng.randbytes(rng.randint(0, 40)),  # not a multihash
            b"\x12\x20" + rng.randbytes(32),  # sha256 multihash: embeds no key
            b"",
        ]
        from_id = (
            self.attacker_id.to_bytes() if validly_signed_payload else rng.choice(from_choices)
        )
        topics = rng.choice([[TOPIC], [TOPIC, TOPIC], [], ["/other"], [TOPIC, "/other"]])
        if validly_signed_payload:
            topics = [TOPIC]
        seqno = self._seqno() if rng.random() < 0.9 else rng.randbytes(rng.randint(0, 20))
        msg = rpc_pb2.Message(data=data, topicIDs=topics, from_id=from_id, seqno=seqno)
        if validly_signed_payload:
            msg.signature = self.sign(msg, self.attacker.private_key)
            self.signed_by_attacker.add(msg.data)
            return msg
        k = rng.random()
        if k < 0.2:
            msg.key = crypto_pb2.PublicKey(
                key_type=crypto_pb2.ECDSA, data=rng.randbytes(65)
            ).SerializeToString()
        elif k < 0.3:
            msg.key = crypto_pb2.PublicKey(
                key_type=rng.choice(
                    [crypto_pb2.RSA, crypto_pb2.Ed25519, crypto_pb2.Secp256k1, crypto_pb2.ECC_P256]
                ),
                data=rng.randbytes(rng.randint(0, 80)),
            ).SerializeToString()
        elif k < 0.45:
            msg.key = rng.randbytes(rng.randint(1, 40))  # junk protobuf
        elif k < 0.55:
            msg.key = self.attacker.public_key.serialize()  # a real key, not from_id's
        s = rng.random()
        if s < 0.5:
            msg.signature = self.sign(msg, self.attacker.private_key)
            if from_id == self.attacker_id.to_bytes():  # really the attacker's, if its
                self.signed_by_attacker.add(msg.data)  # key field doesn't spoil it
        elif s < 0.8:
            msg.signature = rng.randbytes(rng.choice([1, 64, 200]))
        # else: unsigned
        return msg

    def frame(self) -> bytes:
        """One whole RPC frame (without its length prefix)."""
        rng = self.rng
        k = rng.random()
        if k < 0.3:
            return rng.randbytes(rng.randint(1, 200))
        rpc = rpc_pb2.RPC()
        if k < 0.5:
            rpc.publish.extend([self.hostile() for _ in range(rng.randint(1, 5))])
        if k < 0.7:
            rpc.senderRecord = rng.randbytes(rng.randint(1, 100))
        ctl = rpc.control
        c = rng.random()
        if c < 0.25:
            ctl.ihave.add(topicID=rng.choice([TOPIC, "x"]), messageIDs=[rng.randbytes(20)] * 50)
        elif c < 0.5:
            ctl.iwant.add(messageIDs=[rng.randbytes(rng.randint(0, 30)) for _ in range(20)])
        elif c < 0.75:
            ctl.graft.add(topicID=rng.choice([TOPIC, "", "y" * 300]))
        else:
            ctl.prune.add(
                topicID=TOPIC,
                peers=[
                    rpc_pb2.PeerInfo(peerID=rng.randbytes(30), signedPeerRecord=rng.randbytes(50))
                ],
                backoff=rng.randint(0, 2**40),
            )
        if rng.random() < 0.3:
            rpc.subscriptions.add(subscribe=True, topicid=rng.choice([TOPIC, "z" * 500]))
        data = rpc.SerializeToString()
        if rng.random() < 0.2:
            data = data[: rng.randrange(max(1, len(data)))]  # truncated
        return data


class _Conn:
    def __init__(self, peer_id: ID) -> None:
        self.peer_id = peer_id


class FakeStream:
    """A meshsub stream that yields one length-prefixed frame, then EOF."""

    metric_send_channel = None

    def __init__(self, peer_id: ID, frame: bytes) -> None:
        from libp2p.utils.varint import encode_uvarint

        self.muxed_conn = _Conn(peer_id)
        self._buf = bytes(encode_uvarint(len(frame))) + frame

    async def read(self, n: int | None = None) -> bytes:
        n = len(self._buf) if n is None else n
        out, self._buf = self._buf[:n], self._buf[n:]
        return out

    async def reset(self) -> None:
        return None

    async def close(self) -> None:
        return None


def fuzz_config() -> SwarmConfig:
    # Rates and graylisting off: every hostile input must reach the deepest checks.
    return SwarmConfig(
        enabled=True,
        listen=["/ip4/127.0.0.1/tcp/0"],
        mdns=False,
        dht=False,
        forwarder_msgs_per_s=1e12,
        origin_msgs_per_s=1e12,
        origin_msgs_burst=1e12,
        origin_groups_per_s=1e12,
        graylist_score=-1e300,
    )


@dataclass
class Tally:
    """What a fuzz run sent: counts by kind, exceptions that escaped (by class), and
    the payloads of the honest messages (all must be delivered)."""

    sent: Counter[str] = field(default_factory=Counter)
    escaped: Counter[str] = field(default_factory=Counter)
    honest: set[bytes] = field(default_factory=set)


async def feed_host(
    forger: Forger,
    inbox: Inbox,
    counters: Counters,
    plan: tuple[int, int, int],
    tally: Tally,
) -> bool:
    """Build a real host on ``inbox`` and feed it ``plan`` = (messages, frame_every,
    honest_every); whether its pubsub and gossipsub services still run at the end."""
    messages, frame_every, honest_every = plan
    host_obj = P2PHost(
        fuzz_config(), create_new_key_pair(), None, inbox, Outbox(8, counters), counters
    )
    host, pubsub, gossipsub = host_obj._build()
    host_obj.host, host_obj.gossipsub = host, gossipsub
    listen = [Multiaddr("/ip4/127.0.0.1/tcp/0")]
    async with (
        host.run(listen_addrs=listen),
        background_trio_service(pubsub),
        background_trio_service(gossipsub),
    ):
        await pubsub.wait_until_ready()
        pubsub.set_topic_validator(TOPIC, host_obj._validate, is_async_validator=False)
        pubsub.set_deliver(TOPIC, host_obj._deliver)
        await pubsub.subscribe(TOPIC)
        for i in range(messages):
            try:
                if i % honest_every == 0:
                    msg = forger.honest()
                    tally.honest.add(msg.data)
                    await pubsub.push_msg(forger.attacker_id, msg)
                    tally.sent["honest"] += 1
                await pubsub.push_msg(forger.attacker_id, forger.hostile())
                tally.sent["messages"] += 1
                if i % frame_every == 0:
                    await pubsub.stream_handler(FakeStream(forger.attacker_id, forger.frame()))
                    tally.sent["frames"] += 1
            except Exception as err:  # what escaped would have killed a service task
                tally.escaped[err.__class__.__name__] += 1
            if i % 200 == 0:
                await trio.sleep(0)  # let spawned tasks run
        await trio.sleep(0.2)
        return bool(pubsub.manager.is_running and gossipsub.manager.is_running)


def find_poisoned(delivered: list[Any], honest: set[bytes], forger: Forger) -> list[dict[str, Any]]:
    """Poisoned: a delivered message the wire rules refuse, or one that did not come,
    correctly signed, from the identity it names (a forged or unverifiable envelope)."""
    attacker = forger.attacker_id.to_base58()
    poisoned: list[dict[str, Any]] = []
    for r in delivered:
        try:
            decode_batch(r.payload)
        except WireError as err:
            poisoned.append(poison(r, f"wire refuses it: {err.reason}"))
            continue
        if r.payload in honest:
            continue
        if r.peer_id != attacker:
            poisoned.append(poison(r, "delivered under another identity than the attacker's"))
        elif r.payload not in forger.signed_by_attacker:
            poisoned.append(poison(r, "the attacker never signed this payload"))
    return poisoned


def run_fuzz(
    messages: int, seed: int = 0, frame_every: int = 10, honest_every: int = 50
) -> dict[str, Any]:
    """Feed ``messages`` hostile messages (plus frames and honest ones) to a real host."""
    rng = random.Random(seed)
    forger = Forger(rng)
    counters = Counters()
    inbox = Inbox(1_000_000, counters)
    tally = Tally()
    t0 = time.monotonic()
    plan = (messages, frame_every, honest_every)
    running = trio.run(feed_host, forger, inbox, counters, plan, tally)
    delivered = inbox.drain()
    poisoned = find_poisoned(delivered, tally.honest, forger)
    honest_delivered = sum(1 for r in delivered if r.payload in tally.honest)
    return {
        "messages": tally.sent["messages"],
        "frames": tally.sent["frames"],
        "honest_sent": tally.sent["honest"],
        "honest_delivered": honest_delivered,
        "hostile_but_wire_valid": len(delivered) - len(poisoned) - honest_delivered,
        "poisoned": len(poisoned),
        "poisoned_messages": poisoned,
        "crashes": sum(tally.escaped.values()) + (0 if running else 1),
        "escaped": dict(tally.escaped),
        "still_running": running,
        "seconds": round(time.monotonic() - t0, 1),
        "counters": {k: v for k, v in sorted(counters.snapshot().items())},
    }


def poison(r: Any, why: str) -> dict[str, Any]:
    """A delivered message that should not have been, as a reproducible record."""
    return {"why": why, "peer_id": r.peer_id, "payload_hex": bytes(r.payload).hex()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=100_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dump", type=Path, help="write poisoned messages here (JSON, payload hex)")
    args = ap.parse_args()
    out = run_fuzz(args.messages, args.seed)
    poisoned = out.pop("poisoned_messages")
    if poisoned and args.dump:
        args.dump.write_text(json.dumps(poisoned, indent=1))
        print(f"{len(poisoned)} poisoned messages written to {args.dump}")
    for p in poisoned[:5]:
        print(f"poisoned: {p['why']} (peer {p['peer_id']}, {len(p['payload_hex']) // 2} bytes)")
    print(json.dumps(out, indent=1))
    print(
        f"fuzzed {out['messages']} messages + {out['frames']} frames in {out['seconds']}s: "
        f"crashes {out['crashes']}, poisoned {out['poisoned']}, honest "
        f"{out['honest_delivered']}/{out['honest_sent']}"
    )
    return 1 if out["crashes"] or out["poisoned"] else 0


if __name__ == "__main__":
    sys.exit(main())

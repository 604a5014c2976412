"""The libp2p side of the transport: one host, gossipsub, DHT and dialers, all trio.

Role: everything here runs inside the dedicated trio thread that ``GossipTransport``
starts. It talks to the asyncio node only through ``bridge`` (bounded queues and
counters) and a stats snapshot.

Invariants:
- Security is Noise only (py-libp2p also offers plaintext, secio and TLS by default;
  they are switched off), muxer yamux, optional PSK private network.
- Gossipsub speaks the standard /meshsub/1.1.0 and 1.0.0 ids (and 1.2.0 with
  ``idontwant``) with strict signing: our messages are signed; unsigned or badly
  signed ones are counted (``rejected.signature``) and dropped before anything
  else looks at them.
- Cheap before expensive, every drop counted: graylisted peer, forwarder rate,
  signature (``HardenedPubsub``), then the topic validator: the originator's message
  rate, ``decode_batch``, the originator's group rate, the swarm name. Rejects are
  ``rejected.<reason>``, rate drops ``dropped.<which>_rate``.
- A peer's bytes can cost it its stream or its message, never our host
  (``HardenedPubsub``; py-libp2p 0.8.1 would crash the whole node), and no task
  py-libp2p runs on a peer's behalf can stop a service: the swarm, pubsub,
  gossipsub, the DHT, relay and DCUtR run under ``contain.ContainedManager``, every
  inbound stream handler under ``contain.TaskGuard`` (``errors.task.<Class>``).
- Every verdict moves the peer's score (``PeerScores``, also gossipsub's P6); a peer
  below ``graylist_score`` is disconnected and blacklisted for ``graylist_s``.
- Validated messages go straight into the bounded inbox (drop-oldest, counted):
  no unbounded or silently-dropping queue in between.
- A peer that stops answering (a path cut without a reset) is disconnected within
  about half a minute (``liveness``), and so redialled once reachable; a peer that
  serves no ping is asked through its yamux connection instead, never cut for it.
- Every wait has a timeout. Peers are found and dialled by ``discovery.Discovery``
  (bootstrap redialled forever with capped backoff; DHT, peer exchange and mDNS
  until ``target_peers``; relayed dials), so the mesh survives a bootstrap node
  going away.
- py-libp2p's yamux returns receive credit in half-window steps, as go-yamux does
  (``yamux_window``), and one write's frames never interleave with another's
  (``yamux_write``); both installed at import.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Any

import multiaddr
import trio
from libp2p import new_host
from libp2p.crypto.keys import KeyPair
from libp2p.crypto.x25519 import create_new_key_pair as new_x25519_key_pair
from libp2p.kad_dht.kad_dht import DHTMode, KadDHT
from libp2p.peer.id import ID
from libp2p.pubsub.gossipsub import GossipSub
from libp2p.pubsub.pb import rpc_pb2
from libp2p.pubsub.pubsub import Pubsub
from libp2p.security.noise.transport import PROTOCOL_ID as NOISE_PROTOCOL_ID
from libp2p.security.noise.transport import Transport as NoiseTransport

from swarmnode.config import SwarmConfig
from swarmnode.p2p.bridge import Outbox
from swarmnode.p2p.contain import TaskGuard, contained_service, live_tasks, run_host
from swarmnode.p2p.discovery import Discovery
from swarmnode.p2p.gossip import (
    MAX_RPC_BYTES,
    HardenedPubsub,
    QuietGossipSub,
    gossipsub_score_params,
    node_protocols,
    topic_for,
)
from swarmnode.p2p.liveness import Liveness
from swarmnode.p2p.nat import NatTraversal
from swarmnode.p2p.quiet import install as demote_peer_caused_logs
from swarmnode.p2p.yamux_window import install as half_window_credit
from swarmnode.p2p.yamux_write import install as whole_writes
from swarmnode.share.inbox import Counters, Inbox
from swarmnode.share.peerscore import PeerScores
from swarmnode.share.ratelimit import PeerBuckets, Tenure, quiet_network_logs
from swarmnode.share.transport import Received
from swarmnode.share.wire import MAX_GROUPS, MAX_MESSAGE_BYTES, Batch, WireError, decode_batch

log = logging.getLogger("swarmnode.p2p")
half_window_credit()  # yamux credit in half-window steps, as go-yamux (yamux_window)
whole_writes()  # one write's frames contiguous on the stream, as go-yamux (yamux_write)
# py-libp2p's DHT server warns "Failed to read DHT message" every time a client
# closes its query stream (a normal end); keep its real errors, drop that noise.
logging.getLogger("libp2p.kad_dht.kad_dht").setLevel(logging.ERROR)
# Under a flood py-libp2p repeats the same warnings per message (~1 MB/min of log):
# each template passes a few times a minute, then only a count of what was hidden.
quiet_network_logs()
# What a peer causes at will (refusing ping or kad) is no ERROR line (quiet).
demote_peer_caused_logs()

_EQUIVOCATION_KEEP = 256  # see _trim_router_state


@dataclass
class HostInfo:
    """What the trio side reports back once it is listening."""

    peer_id: str
    listen_addrs: list[str]


class P2PHost:
    """One running libp2p node; ``run`` lives for the life of the trio thread."""

    def __init__(
        self,
        cfg: SwarmConfig,
        key_pair: KeyPair,
        psk: str | None,
        inbox: Inbox,
        outbox: Outbox,
        counters: Counters,
        scores: PeerScores | None = None,
    ) -> None:
        self.cfg = cfg
        self.key_pair = key_pair
        self.psk = psk
        self.inbox = inbox
        self.outbox = outbox
        self.counters = counters
        self.scores = scores or PeerScores(cfg.graylist_score, cfg.graylist_s)
        self.guard = TaskGuard(counters)  # contains py-libp2p's peer tasks
        self._origin_msgs = PeerBuckets(cfg.origin_msgs_per_s, cfg.origin_msgs_burst)
        self._origin_groups = PeerBuckets(
            cfg.origin_groups_per_s, max(MAX_GROUPS, cfg.origin_groups_per_s)
        )
        self._blacklisted: dict[ID, float] = {}  # peer -> when to lift (trio clock)
        # id(msg) -> (msg, its decoded batch): from the validator to _deliver (the msg
        # is held, so its id is not reused while it is here); bounded
        self._decoded: OrderedDict[int, tuple[rpc_pb2.Message, Batch]] = OrderedDict()
        # originators of a batch we accepted (bounded): members, to the relay's slots
        self._authors = Tenure(0.0)
        self.topic = topic_for(cfg.name)
        self.stop_event = trio.Event()
        self._wake_send, self._wake_recv = trio.open_memory_channel[None](1)
        self._snapshot: dict[str, Any] = {}
        self.peer_id = ID.from_pubkey(key_pair.public_key)
        self.host: Any = None
        self.gossipsub: GossipSub | None = None
        self.dht: KadDHT | None = None
        self.nat = NatTraversal(cfg, counters, psk)
        self.discovery = Discovery(
            cfg,
            counters,
            self.nat,
            self.peer_id,
            blacklisted=lambda p: p in self._blacklisted,
            on_tick=self._trim_router_state,
        )

    # ---- thread-safe entry points (called via TrioToken.run_sync_soon) ----------

    def wake_publisher(self) -> None:
        # WouldBlock = a wake-up is already pending; the pump drains the whole outbox.
        with contextlib.suppress(trio.WouldBlock):
            self._wake_send.send_nowait(None)

    def snapshot(self) -> dict[str, Any]:
        return dict(self._snapshot)

    # ---- lifecycle ------------------------------------------------------------

    def _build(self) -> tuple[Any, HardenedPubsub, GossipSub]:
        cfg = self.cfg
        noise = NoiseTransport(self.key_pair, noise_privkey=new_x25519_key_pair().private_key)
        host = new_host(
            key_pair=self.key_pair,
            sec_opt={NOISE_PROTOCOL_ID: noise},
            muxer_preference="YAMUX",
            listen_addrs=[multiaddr.Multiaddr(a) for a in cfg.listen],
            enable_mDNS=cfg.mdns,
            psk=self.psk,
            announce_addrs=[multiaddr.Multiaddr(a) for a in cfg.announce] or None,
            negotiate_timeout=int(max(1, cfg.dial_timeout_s)),
        )
        self.nat.attach(host)  # circuit addresses join what the host advertises
        gossipsub = QuietGossipSub(
            protocols=node_protocols(cfg.idontwant),
            degree=cfg.mesh_degree,
            degree_low=max(1, cfg.mesh_degree - 2),
            degree_high=cfg.mesh_degree_high or cfg.mesh_degree + 2,
            heartbeat_interval=cfg.heartbeat_s,
            heartbeat_initial_delay=0.1,
            do_px=True,
            max_messages_per_topic_per_second=cfg.max_msgs_per_s_per_peer,
            score_params=gossipsub_score_params(self.scores),
        )
        pubsub = HardenedPubsub(
            host,
            gossipsub,
            strict_signing=True,
            max_inbound_rpc_size=MAX_RPC_BYTES,
            counters=self.counters,
            scores=self.scores,
            forwarder_msgs_per_s=cfg.forwarder_msgs_per_s,
            forwarder_frames_per_s=cfg.forwarder_frames_per_s,
            newcomer_s=cfg.newcomer_s,
            newcomer_pool_peers=cfg.newcomer_pool_peers,
            forwarder_bytes_per_s=cfg.forwarder_bytes_per_s,
            # it protects training: a bootstrap node routes with all the CPU it has
            max_net_share=cfg.max_net_share if cfg.role == "trainer" else None,
        )
        return host, pubsub, gossipsub

    async def run(self, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Start, report ``HostInfo`` through ``task_status``, run until ``stop_event``."""
        host, pubsub, gossipsub = self._build()
        self.host, self.gossipsub = host, gossipsub
        self.nat.is_member = self.is_member  # a relay's slots: members first
        listen = [multiaddr.Multiaddr(a) for a in self.cfg.listen]
        with trio.CancelScope() as outer:
            async with AsyncExitStack() as stack:
                guard = self.guard
                await stack.enter_async_context(run_host(host, listen, guard))
                await stack.enter_async_context(contained_service(pubsub, guard))
                await stack.enter_async_context(contained_service(gossipsub, guard))
                with trio.fail_after(self.cfg.dial_timeout_s):
                    await pubsub.wait_until_ready()
                await self.nat.start(stack, guard)
                if self.cfg.dht:
                    self.dht = KadDHT(host, DHTMode.SERVER)
                    await stack.enter_async_context(contained_service(self.dht, guard))
                self.discovery.attach(host, self.dht)
                pubsub.set_admit(self.topic, self._admit)
                pubsub.set_topic_validator(self.topic, self._validate, is_async_validator=False)
                pubsub.set_deliver(self.topic, self._deliver)
                await pubsub.subscribe(self.topic)
                c = self.cfg
                live = Liveness(
                    host, self.counters, c.dial_timeout_s, c.ping_interval_s, c.ping_misses
                )
                loops: list[tuple[str, Any, tuple[Any, ...]]] = [
                    ("liveness", live.run, ()),
                    ("enforce", self._enforce_loop, (pubsub,)),
                    ("publish", self._publish_loop, (pubsub,)),
                    ("discovery", self.discovery.run, ()),
                    ("snapshot", self._snapshot_loop, (pubsub,)),
                    ("nat", self.nat.run, ()),
                    *[
                        ("bootstrap", self.discovery.keep_bootstrap, (t,))
                        for t in self.cfg.bootstrap
                    ],
                ]
                async with trio.open_nursery() as nursery:
                    for name, loop, args in loops:
                        nursery.start_soon(guard.supervised, name, loop, *args)
                    self._refresh_snapshot(pubsub)
                    task_status.started(HostInfo(self.peer_id.to_base58(), self.listen_addrs()))
                    await self.stop_event.wait()
                    # From here the graceful close has shutdown_timeout_s, then it is cut.
                    outer.deadline = trio.current_time() + self.cfg.shutdown_timeout_s
                    nursery.cancel_scope.cancel()
                # Close connections while pubsub still runs: py-libp2p's pubsub spawns a
                # task per incoming message and crashes the swarm ("Nursery is closed")
                # if one arrives after the pubsub service has stopped.
                await self._disconnect_all()
        if outer.cancelled_caught:
            self.counters.add("shutdown_timeout")
            log.warning("libp2p shutdown took over %.1fs; cut short", self.cfg.shutdown_timeout_s)

    async def _disconnect_all(self) -> None:
        with trio.move_on_after(self.cfg.shutdown_timeout_s / 2):
            for peer in list(self.host.get_connected_peers()):
                try:
                    await self.host.disconnect(peer)
                # closing an already-broken connection raises transport-specific errors
                except Exception as err:
                    self.counters.add("disconnect_failed")
                    log.debug("disconnect %s at shutdown: %r", peer, err)

    def listen_addrs(self) -> list[str]:
        """Our dialable addresses, each with /p2p/<id> appended."""
        if self.host is None:
            return []
        pid = self.peer_id.to_base58()
        out = []
        for a in self.host.get_addrs():
            text = str(a)
            out.append(text if "/p2p/" in text else f"{text}/p2p/{pid}")
        return out

    # ---- gossip -----------------------------------------------------------------

    def _admit(self, forwarder: ID, msg: rpc_pb2.Message) -> bool:
        """Admit hook: the originator's rates (messages, then groups). A drop here is
        the originator's doing, charged to it, and no fault of a forwarder that
        relayed it (``HardenedPubsub.set_admit``). Runs after the signature check, so the
        originator is authentic; total: it returns, whatever the bytes."""
        return self._total("admit", self._within_origin_rates, forwarder, msg)

    def _total(
        self,
        step: str,
        check: Callable[[rpc_pb2.Message], bool],
        forwarder: ID,
        msg: rpc_pb2.Message,
    ) -> bool:
        """``check(msg)``, or False if it raises: a bug there must cost one message, not
        the node (counted as ``errors.<step>``, logged)."""
        try:
            return check(msg)
        except Exception as err:
            self.counters.add(f"errors.{step}")
            log.warning("%s raised %r on a message via %s", step, err, forwarder)
            return False

    def _within_origin_rates(self, msg: rpc_pb2.Message) -> bool:
        origin = ID(msg.from_id)
        if origin == self.peer_id:
            return True  # our own publish
        peer = origin.to_base58()
        if not self._origin_msgs.take(peer):
            self.counters.add("dropped.origin_msg_rate")
            self.scores.report(peer, "rate_limited")
            return False
        try:
            batch = decode_batch(msg.data)
        except WireError:
            return True  # the validator refuses it, as invalid
        self._hold_decoded(msg, batch)
        if not self._origin_groups.take(peer, len(batch.groups)):
            self.counters.add("dropped.origin_group_rate")
            self.counters.add("dropped.origin_group_rate_groups", len(batch.groups))
            self.scores.report(peer, "rate_limited")
            return False
        return True

    def _validate(self, forwarder: ID, msg: rpc_pb2.Message) -> bool:
        """Topic validator: only messages decode_batch accepts, for this swarm, are
        delivered or forwarded; a refusal is gossipsub's REJECT (P4 against the
        forwarder: an honest one validates before it relays). Total: it returns,
        whatever the bytes."""
        return self._total("validator", self._check_message, forwarder, msg)

    def _check_message(self, msg: rpc_pb2.Message) -> bool:
        origin = ID(msg.from_id)
        if origin == self.peer_id:
            return True  # our own publish
        peer = origin.to_base58()
        held = self._decoded.get(id(msg))
        if held is not None and held[0] is msg:
            batch = held[1]
        else:
            try:
                batch = decode_batch(msg.data)
            except WireError as err:
                self.counters.add(f"rejected.{err.reason}")
                self.scores.report(peer, "invalid")
                log.debug("rejected a message from %s: %s", peer, err)
                return False
            self._hold_decoded(msg, batch)
        if batch.swarm != self.cfg.name:
            self.counters.add("rejected.wrong_swarm")
            self.scores.report(peer, "wrong_swarm")
            return False
        return True

    def _hold_decoded(self, msg: rpc_pb2.Message, batch: Batch) -> None:
        """Keep a message's decoded batch for the steps after (bounded: 256)."""
        self._decoded[id(msg)] = (msg, batch)
        while len(self._decoded) > 256:
            self._decoded.popitem(last=False)

    def is_member(self, peer: ID) -> bool:
        """Whether ``peer`` authored a batch this node accepted (decoded, for this
        swarm): a swarm member, whose relay slot goes before a stranger's."""
        return peer.to_base58() in self._authors

    def _deliver(self, msg: rpc_pb2.Message) -> None:
        """A validated message on our topic: straight into the bounded inbox."""
        origin = ID(msg.from_id)
        if origin == self.peer_id:
            return  # our own publish, echoed to our own subscription
        self.counters.add("msgs_in")
        self.counters.add("bytes_in", len(msg.data))
        author = origin.to_base58()
        self._authors.note(author)
        held = self._decoded.pop(id(msg), None)
        batch = held[1] if held is not None and held[0] is msg else None
        self.inbox.put(Received(author, bytes(msg.data), time.time(), batch))

    async def _enforce_loop(self, pubsub: Pubsub) -> None:
        """Disconnect and blacklist graylisted peers; lift the blacklist when it expires."""
        while True:
            await trio.sleep(0.5)
            now = trio.current_time()
            for peer, until in list(self._blacklisted.items()):
                if until <= now:
                    del self._blacklisted[peer]
                    pubsub.remove_from_blacklist(peer)
            for text in self.scores.graylisted():
                try:
                    peer = ID.from_base58(text)
                except Exception:  # a junk from-id that scored itself out: nothing to cut
                    continue
                if peer in self._blacklisted or peer == self.peer_id:
                    continue
                self._blacklisted[peer] = now + self.cfg.graylist_s
                self.counters.add("peers_graylisted")
                log.warning(
                    "peer %s scored %.0f: disconnected for %.0fs",
                    text,
                    self.scores.score(text),
                    self.cfg.graylist_s,
                )
                pubsub.add_to_blacklist(peer)  # also drops its stream and subscriptions
            # Every tick, not once: a disconnect that timed out (a loaded machine) or a
            # peer that dialled back in must not leave a graylisted peer connected.
            connected = set(self.host.get_connected_peers())
            for peer in [p for p in self._blacklisted if p in connected]:
                self.counters.add("graylisted_disconnects")
                with trio.move_on_after(self.cfg.dial_timeout_s):
                    try:
                        await self.host.disconnect(peer)
                    except Exception as err:  # already half-closed: it is gone anyway
                        log.debug("disconnect %s: %r", peer, err)

    async def _publish_loop(self, pubsub: Pubsub) -> None:
        while True:
            payload = self.outbox.get_nowait()
            if payload is None:
                await self._wake_recv.receive()
                continue
            if len(payload) > MAX_MESSAGE_BYTES:
                self.counters.add("publish_too_large")
                continue
            try:
                with trio.fail_after(self.cfg.dial_timeout_s):
                    await pubsub.publish(self.topic, payload)
            except trio.TooSlowError:
                self.counters.add("publish_timeout")
                log.warning("publishing a %d-byte batch timed out", len(payload))
            # libp2p's publish path can raise many unrelated types (stream, protobuf,
            # router errors); one failed publish must not stop the pump.
            except Exception:
                self.counters.add("publish_failed")
                log.exception("publishing a %d-byte batch failed", len(payload))
            else:
                self.counters.add("msgs_out")
                self.counters.add("bytes_out", len(payload))

    # ---- housekeeping -----------------------------------------------------------

    def _trim_router_state(self) -> None:
        """Bound gossipsub's equivocation map: py-libp2p keeps up to 1000 full messages
        (up to 1 MiB each) there; the last few hundred suffice to catch equivocation."""
        gs = self.gossipsub
        if gs is not None and len(gs.equivocation_detection) > _EQUIVOCATION_KEEP:
            keys = list(gs.equivocation_detection)
            for key in keys[: len(keys) - _EQUIVOCATION_KEEP]:
                del gs.equivocation_detection[key]

    # ---- stats ------------------------------------------------------------------

    def _refresh_snapshot(self, pubsub: Pubsub) -> None:
        gs = self.gossipsub
        tasks = live_tasks()  # trio tasks alive in the libp2p thread: leaks show here
        reading = pubsub.reading() if isinstance(pubsub, HardenedPubsub) else {}
        if reading:  # a trainer's CPU outside training; the thread's tasks beside it
            reading["tasks"] = tasks
        peers = sorted(p.to_base58() for p in self.host.get_connected_peers())
        self._snapshot = {
            "peer_id": self.peer_id.to_base58(),
            "listen_addrs": self.listen_addrs(),
            "topic": self.topic,
            "connected_peers": peers,
            "topic_peers": len(pubsub.peer_topics.get(self.topic, ())),
            "mesh_size": len(gs.mesh.get(self.topic, ())) if gs is not None else 0,
            "dht_routing_table": self.dht.get_routing_table_size() if self.dht else 0,
            "dht_lookups_deferred": self.discovery.lookups.skipped,  # discovery ticks it backed off
            "peer_scores": self.scores.snapshot(),
            "graylisted": sorted(p.to_base58() for p in self._blacklisted),
            "nat": self.nat.snapshot(),
            "reading": reading,
            "tasks": tasks,
            "updated_at": time.time(),
        }

    async def _snapshot_loop(self, pubsub: Pubsub) -> None:
        while True:
            await trio.sleep(0.5)
            self._refresh_snapshot(pubsub)

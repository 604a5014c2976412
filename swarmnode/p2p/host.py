"""The libp2p side of the transport: one host, gossipsub, DHT and dialers, all trio.

Role: everything here runs inside the dedicated trio thread that ``GossipTransport``
starts. It talks to the asyncio node only through ``bridge`` (bounded queues and
counters) and a stats snapshot.

Invariants:
- Security is Noise only (py-libp2p also offers plaintext, secio and TLS by default;
  they are switched off), muxer yamux, optional PSK private network.
- Gossipsub speaks the standard /meshsub/1.2.0, 1.1.0, 1.0.0 ids with strict
  signing: our messages are signed; unsigned or badly signed ones are counted
  (``rejected.signature``) and dropped before anything else looks at them.
- Cheap before expensive, every drop counted: graylisted peer, forwarder rate,
  signature (``HardenedPubsub``), then the topic validator: the originator's message
  rate, ``decode_batch``, the originator's group rate, the swarm name. Rejects are
  ``rejected.<reason>``, rate drops ``dropped.<which>_rate``.
- A peer's bytes can cost it its stream or its message, never our host
  (``HardenedPubsub``; py-libp2p 0.8.1 would crash the whole node).
- Every verdict moves the peer's score (``PeerScores``, also gossipsub's P6); a peer
  below ``graylist_score`` is disconnected and blacklisted for ``graylist_s``.
- Validated messages go straight into the bounded inbox (drop-oldest, counted):
  no unbounded or silently-dropping queue in between.
- A peer that stops answering pings (a path cut without a reset) is disconnected
  within about half a minute (``liveness``), and so redialled once reachable.
- Every dial and every wait has a timeout; an unreachable bootstrap node is retried
  with capped exponential backoff forever and never stalls anything else.
- Peers are learned from the DHT (lookups through whoever we are connected to,
  backing off while they learn nothing: ``lookup_pacer``), gossipsub peer
  exchange and mDNS, and dialled until ``target_peers`` are connected,
  so the mesh survives a bootstrap node going away. A peer that cannot be dialled
  directly is dialled through a relay it advertises (``nat.NatTraversal``).
- py-libp2p's yamux returns receive credit in half-window steps, as go-yamux does
  (``yamux_window``, installed at import).
"""

from __future__ import annotations

import contextlib
import logging
import random
import time
from collections import OrderedDict
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
from libp2p.peer.peerinfo import PeerInfo, info_from_p2p_addr
from libp2p.pubsub.gossipsub import GossipSub
from libp2p.pubsub.pb import rpc_pb2
from libp2p.pubsub.pubsub import Pubsub
from libp2p.security.noise.transport import PROTOCOL_ID as NOISE_PROTOCOL_ID
from libp2p.security.noise.transport import Transport as NoiseTransport
from libp2p.tools.anyio_service import background_trio_service

from swarmnode.config import SwarmConfig
from swarmnode.p2p.bridge import Counters, Inbox, Outbox, Received
from swarmnode.p2p.gossip import (
    GOSSIP_PROTOCOLS,
    MAX_RPC_BYTES,
    HardenedPubsub,
    QuietGossipSub,
    topic_for,
)
from swarmnode.p2p.liveness import Liveness
from swarmnode.p2p.lookup_pacer import LookupPacer
from swarmnode.p2p.nat import NatTraversal
from swarmnode.p2p.peerscore import PeerScores, gossipsub_score_params
from swarmnode.p2p.wire import MAX_GROUPS, MAX_MESSAGE_BYTES, Batch, WireError, decode_batch
from swarmnode.p2p.yamux_window import install as half_window_credit
from swarmnode.ratelimit import PeerBuckets, quiet_network_logs

log = logging.getLogger("swarmnode.p2p")
half_window_credit()  # yamux credit in half-window steps, as go-yamux (yamux_window)
# py-libp2p's DHT server warns "Failed to read DHT message" every time a client
# closes its query stream (a normal end); keep its real errors, drop that noise.
logging.getLogger("libp2p.kad_dht.kad_dht").setLevel(logging.ERROR)
# Under a flood py-libp2p repeats the same warnings per message (~1 MB/min of log):
# each template passes a few times a minute, then only a count of what was hidden.
quiet_network_logs()

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
        self._origin_msgs = PeerBuckets(cfg.origin_msgs_per_s, cfg.origin_msgs_burst)
        self._origin_groups = PeerBuckets(
            cfg.origin_groups_per_s, max(MAX_GROUPS, cfg.origin_groups_per_s)
        )
        self._blacklisted: dict[ID, float] = {}  # peer -> when to lift (trio clock)
        # id(msg) -> (msg, its decoded batch): from the validator to _deliver (the msg
        # is held, so its id is not reused while it is here); bounded
        self._decoded: OrderedDict[int, tuple[rpc_pb2.Message, Batch]] = OrderedDict()
        self.topic = topic_for(cfg.name)
        self.stop_event = trio.Event()
        self._wake_send, self._wake_recv = trio.open_memory_channel[None](1)
        self._snapshot: dict[str, Any] = {}
        self._dial_backoff: dict[ID, tuple[float, float]] = {}  # peer -> (next try, delay)
        self._lookups = LookupPacer(cfg.discovery_interval_s)
        self.peer_id = ID.from_pubkey(key_pair.public_key)
        self.host: Any = None
        self.gossipsub: GossipSub | None = None
        self.dht: KadDHT | None = None
        self.nat = NatTraversal(cfg, counters, psk)

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
            protocols=list(GOSSIP_PROTOCOLS),
            degree=cfg.mesh_degree,
            degree_low=max(1, cfg.mesh_degree - 2),
            degree_high=2 * cfg.mesh_degree,
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
            forwarder_bytes_per_s=cfg.forwarder_bytes_per_s,
        )
        return host, pubsub, gossipsub

    async def run(self, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        """Start, report ``HostInfo`` through ``task_status``, run until ``stop_event``."""
        host, pubsub, gossipsub = self._build()
        self.host, self.gossipsub = host, gossipsub
        listen = [multiaddr.Multiaddr(a) for a in self.cfg.listen]
        with trio.CancelScope() as outer:
            async with AsyncExitStack() as stack:
                await stack.enter_async_context(host.run(listen_addrs=listen))
                await stack.enter_async_context(background_trio_service(pubsub))
                await stack.enter_async_context(background_trio_service(gossipsub))
                with trio.fail_after(self.cfg.dial_timeout_s):
                    await pubsub.wait_until_ready()
                await self.nat.start(stack)
                if self.cfg.dht:
                    self.dht = KadDHT(host, DHTMode.SERVER)
                    await stack.enter_async_context(background_trio_service(self.dht))
                pubsub.set_topic_validator(self.topic, self._validate, is_async_validator=False)
                pubsub.set_deliver(self.topic, self._deliver)
                await pubsub.subscribe(self.topic)
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(Liveness(host, self.counters, self.cfg.dial_timeout_s).run)
                    nursery.start_soon(self._enforce_loop, pubsub)
                    nursery.start_soon(self._publish_loop, pubsub)
                    nursery.start_soon(self._discovery_loop)
                    nursery.start_soon(self._snapshot_loop, pubsub)
                    nursery.start_soon(self.nat.run)
                    for text in self.cfg.bootstrap:
                        nursery.start_soon(self._keep_bootstrap, text)
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

    def _validate(self, forwarder: ID, msg: rpc_pb2.Message) -> bool:
        """Topic validator: only messages decode_batch accepts, within the originator's
        rates, are delivered or forwarded. Runs after the signature check, so the
        originator is authentic; total: it returns, whatever the bytes."""
        try:
            return self._check_message(msg)
        except Exception as err:  # a bug here must cost one message, not the node
            self.counters.add("errors.validator")
            log.warning("validator raised %r on a message via %s", err, forwarder)
            return False

    def _check_message(self, msg: rpc_pb2.Message) -> bool:
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
        except WireError as err:
            self.counters.add(f"rejected.{err.reason}")
            self.scores.report(peer, "invalid")
            log.debug("rejected a message from %s: %s", peer, err)
            return False
        if not self._origin_groups.take(peer, len(batch.groups)):
            self.counters.add("dropped.origin_group_rate")
            self.counters.add("dropped.origin_group_rate_groups", len(batch.groups))
            self.scores.report(peer, "rate_limited")
            return False
        if batch.swarm != self.cfg.name:
            self.counters.add("rejected.wrong_swarm")
            self.scores.report(peer, "wrong_swarm")
            return False
        self._decoded[id(msg)] = (msg, batch)
        while len(self._decoded) > 256:
            self._decoded.popitem(last=False)
        return True

    def _deliver(self, msg: rpc_pb2.Message) -> None:
        """A validated message on our topic: straight into the bounded inbox."""
        origin = ID(msg.from_id)
        if origin == self.peer_id:
            return  # our own publish, echoed to our own subscription
        self.counters.add("msgs_in")
        self.counters.add("bytes_in", len(msg.data))
        held = self._decoded.pop(id(msg), None)
        batch = held[1] if held is not None and held[0] is msg else None
        self.inbox.put(Received(origin.to_base58(), bytes(msg.data), time.time(), batch))

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
                if self._connected(peer):
                    with trio.move_on_after(self.cfg.dial_timeout_s):
                        try:
                            await self.host.disconnect(peer)
                        except Exception as err:  # already half-closed: it is gone anyway
                            log.debug("disconnect %s: %r", text, err)

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

    # ---- peers ------------------------------------------------------------------

    def _connected(self, peer: ID) -> bool:
        return bool(self.host is not None and peer in set(self.host.get_connected_peers()))

    async def _dial(self, info: PeerInfo, counter: str) -> bool:
        """One dial with a timeout; True if connected. Failures are counted, not raised."""
        try:
            with trio.fail_after(self.cfg.dial_timeout_s):
                await self.host.connect(info)
        except trio.TooSlowError:
            self.counters.add(f"{counter}_timeout")
            return False
        # Dial failures surface as SwarmException, OSError, multiselect, noise or
        # PSK decryption errors depending on where the handshake broke.
        except Exception as err:
            self.counters.add(f"{counter}_failed")
            log.debug("dial %s failed: %s: %s", info.peer_id, err.__class__.__name__, err)
            return False
        self.counters.add(f"{counter}_ok")
        return True

    async def _keep_bootstrap(self, text: str) -> None:
        """Stay connected to one bootstrap peer: redial with capped backoff when it drops."""
        info = info_from_p2p_addr(multiaddr.Multiaddr(text))
        delay = 1.0
        while True:
            if self._connected(info.peer_id):
                delay = 1.0
                await trio.sleep(self.cfg.discovery_interval_s)
                continue
            # py-libp2p refuses to redial a peer whose addresses all failed recently (a
            # negative cache of tens of seconds); for a configured bootstrap peer our own
            # capped backoff paces the dials, so a restarted bootstrap is found at once.
            unblock = getattr(self.host.get_network(), "unblock_peer", None)
            if unblock is not None:
                unblock(info.peer_id)
            if await self._dial(info, "bootstrap_dial"):
                delay = 1.0
                continue
            log.info("bootstrap %s unreachable; retrying in %.0fs", text, delay)
            await trio.sleep(delay * random.uniform(0.8, 1.2))
            delay = min(delay * 2, self.cfg.bootstrap_backoff_max_s)

    async def _discovery_loop(self) -> None:
        """Learn peers (DHT lookups; PX and mDNS fill the peerstore) and dial them."""
        while True:
            await trio.sleep(self.cfg.discovery_interval_s)
            self._trim_router_state()
            connected = set(self.host.get_connected_peers())
            if len(connected) >= self.cfg.target_peers:
                continue
            if (
                self.dht is not None
                and connected
                and self._lookups.due(trio.current_time(), len(connected))
            ):
                await self._dht_lookup()
            await self._dial_candidates(connected)

    async def _dht_lookup(self) -> None:
        """One lookup of our own ID; the pacer backs off while they learn nothing."""
        assert self.dht is not None
        store = self.host.get_peerstore()
        known = set(store.peers_with_addrs())
        self.counters.add("dht_lookups")
        with trio.move_on_after(self.cfg.dial_timeout_s):
            try:
                await self.dht.peer_routing.find_closest_peers_network(self.peer_id.to_bytes())
            # a lookup fails per queried peer in many ways; a later tick retries
            except Exception as err:
                self.counters.add("dht_lookup_failed")
                log.debug("DHT lookup failed: %s", err)
        learned = bool(set(store.peers_with_addrs()) - known)
        self._lookups.done(trio.current_time(), learned)

    async def _dial_candidates(self, connected: set[ID]) -> None:
        store = self.host.get_peerstore()
        now = trio.current_time()
        want = self.cfg.target_peers - len(connected)
        candidates = [
            p
            for p in store.peers_with_addrs()
            if p != self.peer_id
            and p not in connected
            and p not in self._blacklisted
            and self._dial_backoff.get(p, (0.0, 0.0))[0] <= now
        ]
        random.shuffle(candidates)
        for peer in candidates[: max(0, want)]:
            if await self._dial_peer(peer, store.addrs(peer)):
                self._dial_backoff.pop(peer, None)
            else:
                delay = min(self._dial_backoff.get(peer, (0.0, 1.0))[1] * 2, 300.0)
                self._dial_backoff[peer] = (trio.current_time() + delay, delay)
        if len(self._dial_backoff) > 4096:  # forget the stalest entries; bounded memory
            for peer in sorted(self._dial_backoff, key=lambda p: self._dial_backoff[p][0])[:2048]:
                del self._dial_backoff[peer]

    async def _dial_peer(self, peer: ID, addrs: list[multiaddr.Multiaddr]) -> bool:
        """Directly if it has direct addresses, else (or if that fails) through a relay."""
        direct = [a for a in addrs if "/p2p-circuit" not in str(a)]
        if direct and await self._dial(PeerInfo(peer, direct), "peer_dial"):
            return True
        return len(direct) < len(addrs) and await self.nat.dial_relayed(peer, addrs)

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
        peers = sorted(p.to_base58() for p in self.host.get_connected_peers())
        self._snapshot = {
            "peer_id": self.peer_id.to_base58(),
            "listen_addrs": self.listen_addrs(),
            "topic": self.topic,
            "connected_peers": peers,
            "topic_peers": len(pubsub.peer_topics.get(self.topic, ())),
            "mesh_size": len(gs.mesh.get(self.topic, ())) if gs is not None else 0,
            "dht_routing_table": self.dht.get_routing_table_size() if self.dht else 0,
            "dht_lookups_deferred": self._lookups.skipped,  # discovery ticks it backed off
            "peer_scores": self.scores.snapshot(),
            "graylisted": sorted(p.to_base58() for p in self._blacklisted),
            "nat": self.nat.snapshot(),
            "updated_at": time.time(),
        }

    async def _snapshot_loop(self, pubsub: Pubsub) -> None:
        while True:
            await trio.sleep(0.5)
            self._refresh_snapshot(pubsub)

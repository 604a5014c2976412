"""Gossipsub pieces: the topic name, protocol ids, and a hardened py-libp2p Pubsub.

Role: everything about *how* swarmnode uses py-libp2p's pubsub that is not the
host's lifecycle (see ``host``).

Invariants:
- Only the standard /meshsub/1.2.0, 1.1.0 and 1.0.0 protocol ids are spoken; the
  node offers 1.2.0 only with ``swarm.idontwant`` (``node_protocols``): in v1.2 a
  stock peer sends an IDONTWANT frame for every message it passes on, which cost
  more to read than the duplicates it saves for messages of a few KiB.
- No bytes a peer sends can take the host down: any exception raised while reading,
  parsing or handling a peer's RPC frame resets that peer's stream only, and any
  exception while handling one of its messages drops that message only. Each is
  counted (``rejected.rpc_decode``, ``rejected.rpc_error``, ``errors.push``) and
  charged to the peer's score. (py-libp2p 0.8.1 runs both in service tasks: an
  uncaught exception there stopped the pubsub service and the whole node.)
- Reading is priced before anything else (``framing``): each peer's stream is read
  in chunks and paced to ``forwarder_frames_per_s`` frames and
  ``forwarder_bytes_per_s`` bytes; past that it is not read at all until its debt
  is paid (flow control stops its writes), so a flood costs its sender, not us.
  Past ``max_net_share`` of a core spent outside training, the peers sending most are
  held to a fair share of it, whatever their number (``netshare``).
  A signed peer record is verified only when it changes (py-libp2p senders attach
  it to every frame), and only here: gossipsub's ``handle_rpc`` verified it again
  for every control frame.
- Then cheap checks in the read loop, each counted (``msgs_read``, then
  ``dropped.*``): graylisted forwarder or originator, seen before, the forwarder's
  message rate, gossipsub's publish-score gate; only then, in the message's task,
  the signature (Ed25519 verify), then the topic's admit hook (the host's: the
  originator's rates), then the topic validator (the host's: ``decode_batch``).
- What the admit hook refuses from a relay is gossipsub's IGNORE, not REJECT: no P4
  against the forwarder. An honest node relays a valid message its own budget for
  the originator allowed; ours may not (a burst the forwarder's reading paced into
  ours). Refused by the validator, five Sybils each under the originator rates
  made a node relaying them score below its honest peer's publish threshold, and
  that peer stopped sending to it (bench_flood, tiny model, 2026-12-06). A peer's
  own excess (originator = forwarder) stays a REJECT (P4): it puts a flooder under
  the publish gate, where its messages stop before the signature check. The
  originator's score (P6) is charged either way.
- A message's signature is verified once: py-libp2p's ``push_msg`` verifies it again
  under strict signing, so its module's ``signature_validator`` is replaced by one
  that passes the message object ``_signed`` verified last (its call follows ours
  with no await between) and verifies anything else.
- A restarted node's seqnos never repeat its earlier life's (they start at the start
  time in nanoseconds), so peers' seen caches do not drop its new messages.
- Validated messages on a topic with a ``deliver`` hook go straight to it (the
  host's bounded inbox): py-libp2p's 32-slot subscription channel, which overflowed
  silently under a flood, is bypassed. Any other subscription's overflow is counted
  (``dropped.subscription_full``).
- The first copy of a message read from a stream over a relayed connection is
  counted (``msgs_in_via_relay``): what the swarm owes to circuit relays.
- A peer that opens a pubsub stream to us while ours to it is registered gets our
  subscriptions again (``pubsub.resubscribed``); an older stream of its still open is
  reset (``pubsub.inbound_replaced``). py-libp2p gives up a stream whose write waited
  5 s for credit (we held its reads) and forgets our subscriptions with it; it then
  went silent towards us for as long as the connection lasted.
- A peer is handed a topic's recent messages on subscribing (py-libp2p's replay) at
  most once per ``REPLAY_EVERY_S``, however often it redials or re-announces.
- Blacklisting a peer tears down only the stream it reset, with its send queue and
  router state, and never a peer that is already gone or back
  (``_teardown_if_connected``: py-libp2p's raised KeyError there and stopped the
  node, issue 28). Whatever else a per-peer task raises is contained by the
  manager it runs under (``contain``).
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import trio
from google.protobuf.message import DecodeError
from libp2p.custom_types import TProtocol
from libp2p.io.exceptions import IncompleteReadError, IOException, MessageTooLarge
from libp2p.network.connection.exceptions import RawConnError
from libp2p.network.stream.exceptions import StreamError
from libp2p.peer.id import ID
from libp2p.pubsub import pubsub as libp2p_pubsub
from libp2p.pubsub.gossipsub import PROTOCOL_ID, PROTOCOL_ID_V11, PROTOCOL_ID_V12, GossipSub
from libp2p.pubsub.pb import rpc_pb2
from libp2p.pubsub.pubsub import Pubsub
from libp2p.pubsub.score import ScoreParams, TopicScoreParams
from libp2p.pubsub.utils import maybe_consume_signed_record
from libp2p.pubsub.validators import signature_validator

from swarmnode.p2p.autonat import is_relayed
from swarmnode.p2p.framing import FrameReader, ReadBudget
from swarmnode.share.inbox import Counters
from swarmnode.share.peerscore import PeerScores
from swarmnode.share.ratelimit import PeerBuckets

log = logging.getLogger("swarmnode.p2p")

GOSSIP_PROTOCOLS = (PROTOCOL_ID_V12, PROTOCOL_ID_V11, PROTOCOL_ID)  # what stock peers offer


def node_protocols(idontwant: bool) -> list[TProtocol]:
    """The meshsub ids the node serves and offers, most preferred first. Without
    1.2.0 a v1.2 peer negotiates 1.1.0 with us and sends no IDONTWANT (it sends them
    only to v1.2 peers): five stock py-libp2p Sybils at 20 messages a second sent 5
    IDONTWANT frames per message heard, and a message heard cost the node 3.99 ms of
    CPU with them, 2.01 ms without (bench_flood --idontwant, 2026-12-07)."""
    return list(GOSSIP_PROTOCOLS if idontwant else GOSSIP_PROTOCOLS[1:])


# pubsub caps whole RPC frames; one message plus its signed envelope must fit.
MAX_RPC_BYTES = 1024 * 1024
_RESET_TIMEOUT_S = 1.0  # a stream reset waits at most this long
REPLAY_EVERY_S = 300.0  # a peer is handed a topic's recent messages at most this often
MAX_REPLAYS_KEPT = 4096

Deliver = Callable[[rpc_pb2.Message], None]
Admit = Callable[[ID, rpc_pb2.Message], bool]


# IDONTWANT (gossipsub v1.2) saves a peer from sending us a copy we already have. It
# pays for large messages; py-libp2p sent one, as its own frame, to every mesh peer
# for every message of any size: most of the 7 frames per message a node read at 200
# peers, and writes the libp2p thread spent its time on (docs/reliability.md, Scale).
IDONTWANT_MIN_BYTES = 16 * 1024


class QuietGossipSub(GossipSub):
    """py-libp2p's GossipSub, sending IDONTWANT only for messages of at least
    ``IDONTWANT_MIN_BYTES`` (go-libp2p also has a size threshold). A message not
    found in the message cache keeps py-libp2p's behaviour."""

    async def _emit_idontwant_for_message(self, msg_id: bytes, topic_ids: Any) -> None:
        msg = self.mcache.get(msg_id)
        if msg is not None and len(msg.data) < IDONTWANT_MIN_BYTES:
            return
        await super()._emit_idontwant_for_message(msg_id, topic_ids)


class _Verified:
    """The message object whose signature ``HardenedPubsub._signed`` verified last."""

    last: rpc_pb2.Message | None = None


def _verified_or_check(msg: rpc_pb2.Message) -> bool:
    """py-libp2p's strict-signing check, minus the second Ed25519 verify of a message
    we just verified (about 0.1-1 ms each on a CPU)."""
    return msg is _Verified.last or bool(signature_validator(msg))


libp2p_pubsub.signature_validator = _verified_or_check


def topic_for(swarm_name: str) -> str:
    return f"/swarmnode/{swarm_name}/rollouts/1"


def _alive(stream: Any) -> bool:
    """An open stream on an open connection."""
    try:
        return not stream.is_closed and not stream.muxed_conn.is_closed
    except Exception:  # a half-built or foreign stream object: treat as gone
        return False


def _b58(raw: bytes) -> str:
    try:
        return ID(raw).to_base58()
    except Exception:  # any bytes base58-encode; this is belt and braces for odd types
        return "<invalid>"


async def _reset(stream: Any, what: str) -> None:
    """Reset ``stream``, waiting at most ``_RESET_TIMEOUT_S`` (behind a full send
    buffer, a peer that does not read); one that raises is already broken, as good
    as reset (logged at debug)."""
    with trio.move_on_after(_RESET_TIMEOUT_S):
        try:
            await stream.reset()
        except Exception as err:
            log.debug("reset of %s: %r", what, err)


class HardenedPubsub(Pubsub):
    """py-libp2p Pubsub where a peer's bytes can cost it, never us (module docstring)."""

    def __init__(
        self,
        *args: Any,
        counters: Counters,
        scores: PeerScores | None = None,
        forwarder_msgs_per_s: float = 100.0,
        forwarder_frames_per_s: float = 50.0,
        forwarder_bytes_per_s: float = 1024 * 1024,
        newcomer_s: float = 0.0,
        max_net_share: float | None = None,
        newcomer_pool_peers: int = 1,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        # Seqnos count up from the start time: py-libp2p starts at int(time.time()), so a
        # node that published over one message a second and restarted with the same
        # key reused seqnos its peers still held as seen (120 s) and was not heard.
        # Nanoseconds stay ahead of any earlier life (uint64 lasts until 2554).
        self.counter = time.time_ns()
        self._counters = counters
        self.scores = scores or PeerScores()
        self._forwarders = PeerBuckets(forwarder_msgs_per_s, 2 * forwarder_msgs_per_s)
        self._reads = ReadBudget(
            forwarder_frames_per_s,
            forwarder_bytes_per_s,
            counters,
            newcomer_s,
            max_net_share,
            pool_peers=newcomer_pool_peers,
        )
        # peer -> the signed peer record it last sent that verified (py-libp2p senders
        # attach it to every RPC; verifying it each time was a third of a flood's cost)
        self._records: OrderedDict[ID, bytes] = OrderedDict()
        self._deliver: dict[str, Deliver] = {}
        self._admit: dict[str, Admit] = {}
        # peer -> (its current inbound stream, whether that stream rides a relay)
        self._inbound: dict[ID, tuple[Any, bool]] = {}
        # (peer, topic) -> when py-libp2p last replayed the topic's recent messages to it
        self._replays: OrderedDict[tuple[ID, str], float] = OrderedDict()

    def reading(self) -> dict[str, Any]:
        """The CPU share outside training, its cap, and the level heavy peers are held to."""
        return self._reads.net.report() if self._reads.net is not None else {}

    def set_admit(self, topic: str, admit: Admit) -> None:
        """Run ``admit(forwarder, msg)`` on a signed message on ``topic`` before its
        validators (sync, must not block, must not raise); False drops it uncharged
        to the forwarder (gossipsub's IGNORE). The hook counts and charges its drops."""
        self._admit[topic] = admit

    def set_deliver(self, topic: str, deliver: Deliver) -> None:
        """Hand validated messages on ``topic`` to ``deliver`` (sync, must not block)."""
        self._deliver[topic] = deliver

    # ---- streams: a frame that breaks parsing or handling costs its stream ----------

    async def stream_handler(self, stream: Any) -> None:
        peer_id = stream.muxed_conn.peer_id
        mine = (stream, is_relayed(getattr(stream, "swarm_conn", None)))
        older = self._inbound.get(peer_id)
        self._inbound[peer_id] = mine
        if older is not None and older[0] is not stream:
            await self._replaced(peer_id, older[0])
        self._resubscribe(peer_id)
        try:
            await self._read_stream(stream, peer_id)
        finally:
            if self._inbound.get(peer_id) is mine:
                del self._inbound[peer_id]

    async def _replaced(self, peer_id: ID, older: Any) -> None:
        """A peer opened a new pubsub stream while its older one is still open: it gave
        that one up without a reset (``pubsub.inbound_replaced``). The older stream is
        reset, as go-libp2p-pubsub does with a duplicate."""
        self._counters.add("pubsub.inbound_replaced")
        await _reset(older, f"{peer_id}'s older pubsub stream")

    def _resubscribe(self, peer_id: ID) -> None:
        """Send our subscriptions again to a peer that opened a pubsub stream to us
        while ours to it is registered (``pubsub.resubscribed``). A py-libp2p peer
        whose write waited 5 s for flow-control credit (we held its reads: the pacing,
        the CPU cap) gives its stream up (stock: silently; with our write wrapper, with
        a reset), forgets our subscriptions and opens a new stream with its own; but
        nothing of ours changed, so it never heard ours again, never grafted us and
        never published to us while the connection lasted. Its new stream comes after
        it forgot them, so what we send now lands. At a first contact this repeats the
        hello our own stream opened with, when that came first: a subscription the
        peer already holds is a no-op to it."""
        queue = self.peer_queues.get(peer_id)
        if queue is None or not self.topic_ids:
            return
        if queue.push(self.get_hello_packet(), True):
            self._counters.add("pubsub.resubscribed")
        else:
            self._counters.add("pubsub.resubscribe_dropped")  # its queue is full

    async def _read_stream(self, stream: Any, peer_id: ID) -> None:
        try:
            await super().stream_handler(stream)
        # Everything a peer's frame can make py-libp2p raise (protobuf DecodeError,
        # key deserialisation, router errors on control messages...) is contained here.
        # trio.Cancelled is a BaseException and passes through, as it must.
        except Exception as err:
            kind = (
                "rpc_decode"
                if isinstance(err, DecodeError)
                else "rpc_too_large"
                if isinstance(err, MessageTooLarge)
                else "rpc_error"
            )
            self._counters.add(f"rejected.{kind}")
            self.scores.report(peer_id.to_base58(), "protocol")
            log.info(
                "peer %s sent a pubsub RPC that raised %s; closing its stream",
                peer_id,
                err.__class__.__name__,
            )
            await _reset(stream, f"{peer_id}'s stream after a bad RPC")
            self._handle_dead_peer(peer_id)

    async def continuously_read_stream(self, stream: Any) -> None:
        """py-libp2p's read loop, priced (``framing``): frames come from a buffered
        reader, each peer's reading is paced by its frames and bytes a second, a
        signed peer record is verified only when it changes, and a message is only
        handed to a ``push_msg`` task after the cheap gates (``_gate``). Subscriptions
        and control go to py-libp2p as before. EOF, reset and a closed connection end
        the loop quietly; anything else propagates to ``_read_stream``."""
        peer_id = stream.muxed_conn.peer_id
        key = peer_id.to_base58()
        reader = FrameReader(stream, self.max_inbound_rpc_size)
        # a paced read ends when the connection does (ReadBudget.pace)
        closed = getattr(stream.muxed_conn, "event_closed", None)
        closed = closed if isinstance(closed, trio.Event) else None

        async def before_read(nbytes: int) -> None:
            await self._reads.pace(key, 0, nbytes, until=closed)

        try:
            while self.manager.is_running:
                frame = await reader.next(before_read)
                self._counters.add("frames_in")
                rpc = rpc_pb2.RPC()
                rpc.ParseFromString(frame)
                await self._reads.pace(key, 1, 0, len(rpc.publish), until=closed)
                if rpc.HasField("senderRecord"):
                    if not self._record_ok(rpc, peer_id):
                        self._counters.add("rejected.peer_record")
                        continue
                    # verified (or unchanged): gossipsub's handle_rpc would verify it
                    # again for every control frame
                    rpc.ClearField("senderRecord")
                if rpc.publish:
                    self._counters.add("msgs_read", len(rpc.publish))
                for msg in rpc.publish:
                    if not self._is_subscribed_to_msg(msg):
                        self._counters.add("dropped.not_subscribed")
                    elif self._gate(peer_id, msg):
                        self.manager.run_task(self._push, peer_id, msg, True)
                if rpc.subscriptions:
                    if len(rpc.subscriptions) > self.max_subscriptions_per_rpc:
                        self._counters.add("rejected.subscriptions")
                    else:
                        for sub in rpc.subscriptions:
                            self.handle_subscription(peer_id, sub)
                if rpc.HasField("control"):
                    self._count_control(rpc.control)
                    await self.router.handle_rpc(rpc, peer_id)
        except MessageTooLarge:
            raise  # a protocol error: counted, stream reset (``_read_stream``)
        except (StreamError, IOException, RawConnError) as err:
            if isinstance(err, IncompleteReadError) and reader.buf:
                raise  # cut inside a frame: a protocol error, as above
            log.debug("pubsub stream from %s ended: %r", peer_id, err)

    def _count_control(self, control: rpc_pb2.ControlMessage) -> None:
        """``control.<kind>``: the control entries read, by kind (IHAVE, IWANT, GRAFT,
        PRUNE, IDONTWANT), what a peer's frames without a message are made of."""
        for kind in ("ihave", "iwant", "graft", "prune", "idontwant"):
            n = len(getattr(control, kind))
            if n:
                self._counters.add(f"control.{kind}", n)

    def _record_ok(self, rpc: rpc_pb2.RPC, peer_id: ID) -> bool:
        raw = rpc.senderRecord
        if self._records.get(peer_id) == raw:
            self._records.move_to_end(peer_id)
            return True
        if not maybe_consume_signed_record(rpc, self.host, peer_id):
            return False
        self._records[peer_id] = raw
        while len(self._records) > 4096:
            self._records.popitem(last=False)
        return True

    def _handle_dead_peer(self, peer_id: ID) -> None:
        """py-libp2p calls this whenever *a* pubsub stream of the peer ends, and then
        forgets the peer's subscriptions and drops our stream to it. With two
        connections to a peer (a relayed one that DCUtR replaces by a direct one, or
        both dialled through a relay) a stream ending with the old connection wiped
        the subscriptions the peer had just re-announced on the new one, and it
        never announces them again: our rollouts stopped reaching it. So: while our
        own stream to the peer is alive, a stream ending elsewhere changes nothing;
        otherwise py-libp2p's cleanup runs, keeping the subscriptions if the peer's
        latest stream to us is still alive."""
        ours = self.peers.get(peer_id)
        if ours is not None and _alive(ours) and self._peer_is_connected(peer_id):
            self._counters.add("pubsub.old_stream_ended")
            return
        theirs = self._inbound.get(peer_id)
        keep = [
            topic
            for topic, peers in self.peer_topics.items()
            if peer_id in peers and theirs is not None and _alive(theirs[0])
        ]
        super()._handle_dead_peer(peer_id)
        for topic in keep:
            self.handle_subscription(peer_id, rpc_pb2.RPC.SubOpts(subscribe=True, topicid=topic))

    async def handle_dead_peer_queue(self) -> None:
        """py-libp2p's consumer of "a connection to this peer closed", minus its rule
        "the peer has another open connection: nothing to do". A peer that was cut and
        dialled straight back has a new connection by the time the old one is reported,
        while our stream to it still rides the old one: py-libp2p kept that dead stream
        as the peer's, so the peer, finding our stream registered, opened none on the
        new connection and we never heard its subscriptions again (seen after a
        graylist lift and a contained task's drop). ``_handle_dead_peer`` already keeps
        a stream that is alive, so every report goes to it."""
        async with self.dead_peer_receive_channel:
            self.event_handle_dead_peer_queue_started.set()
            async for peer_id in self.dead_peer_receive_channel:
                self._handle_dead_peer(peer_id)

    async def _handle_new_peer(self, peer_id: ID) -> None:
        """A new connection's peer: a registered stream of ours that rides a closed
        connection is dropped first (``handle_dead_peer_queue``), or py-libp2p would
        skip the peer as already registered."""
        ours = self.peers.get(peer_id)
        if ours is not None and not _alive(ours):
            self._counters.add("pubsub.stale_stream_replaced")
            self._handle_dead_peer(peer_id)
        await super()._handle_new_peer(peer_id)

    async def _replay_recent_messages(self, peer_id: ID, topic: str) -> None:
        """py-libp2p hands a newly subscribed peer the message cache's window for the
        topic (not gossipsub's spec: it covers a publish racing the peer's stream
        set-up), once per subscription, and forgets that on disconnect: a peer that
        redials gets the whole window again, every time, and so does each fresh
        identity. Here a peer gets it at most once per ``REPLAY_EVERY_S`` (bounded
        memory, least recently replayed forgotten); a skipped one is counted
        (``pubsub.replay_skipped``). IHAVE gossip still offers it what it missed."""
        if peer_id in self.peers and topic not in self._replayed_recent_topics.get(
            peer_id, ()
        ):  # py-libp2p would replay now
            now = trio.current_time()
            last = self._replays.get((peer_id, topic))
            if last is not None and now - last < REPLAY_EVERY_S:
                self._counters.add("pubsub.replay_skipped")
                return
            self._replays[(peer_id, topic)] = now
            self._replays.move_to_end((peer_id, topic))
            while len(self._replays) > MAX_REPLAYS_KEPT:
                self._replays.popitem(last=False)
        await super()._replay_recent_messages(peer_id, topic)

    async def _teardown_if_connected(self, peer_id: ID) -> None:
        """What ``add_to_blacklist`` spawns: reset our stream to the peer and forget it.

        py-libp2p awaits the reset and then deletes ``peers[peer_id]`` blindly. While
        the reset waits (behind a full send buffer, a flooder that does not read),
        the graylist's own disconnect ends the peer (``_handle_dead_peer``) and the
        delete raised KeyError, which stopped the pubsub service and the node; or the
        peer, unblocked and back, had a new stream there, which the delete dropped
        silently. It also left the peer's send queue, its sending task and the
        router's state behind. Here: after the reset, only the stream this teardown
        reset is removed, with its queue and router state, and only while the peer
        is still blacklisted; a peer already gone or back is left as it is
        (``pubsub.teardown_raced``)."""
        stream = self.peers.get(peer_id)
        if stream is not None:
            await _reset(stream, f"{peer_id}'s stream on blacklisting")
        if not self.is_peer_blacklisted(peer_id):
            self._counters.add("pubsub.teardown_raced")  # lifted meanwhile: it may be back
            return
        if stream is not None and self.peers.get(peer_id) is stream:
            del self.peers[peer_id]
            queue = self.peer_queues.pop(peer_id, None)
            if queue is not None:
                queue.close()  # its sending task ends
            self.router.remove_peer(peer_id)
        elif stream is not None:
            self._counters.add("pubsub.teardown_raced")  # ended by its disconnect first
        self._forget_all_subscriptions(peer_id)

    # ---- messages: cheap gates, signature, then py-libp2p's path --------------------

    async def push_msg(self, msg_forwarder: ID, msg: rpc_pb2.Message) -> None:
        """py-libp2p's entry for a message: our own publishes (and tests)."""
        await self._push(msg_forwarder, msg, False)

    async def _push(self, msg_forwarder: ID, msg: rpc_pb2.Message, gated: bool) -> None:
        """A peer's message: the cheap gates (unless the read loop ran them: ``gated``),
        the signature, then py-libp2p's path. Our own messages skip the checks."""
        try:
            if msg_forwarder != self.my_id and not (
                (gated or self._gate(msg_forwarder, msg))
                and (not gated or self._score_gate(msg_forwarder, msg))
                and self._signed(msg_forwarder, msg)
                and self._admitted(msg_forwarder, msg)
            ):
                return
            if self._inbound.get(msg_forwarder, (0, False))[1] and not self._is_msg_seen(msg):
                self._counters.add("msgs_in_via_relay")  # first copy, over a relayed conn
            await super().push_msg(msg_forwarder, msg)
        # py-libp2p runs push_msg as a service task: an exception here would stop the
        # pubsub service (and the node). Whatever a message makes it raise drops that
        # message only, counted by class and logged (rate-limited: see ratelimit).
        except Exception as err:
            self._counters.add("errors.push")
            self._counters.add(f"errors.push.{err.__class__.__name__}")
            log.warning("handling a message via %s raised %r; dropped", msg_forwarder, err)

    def _gate(self, forwarder: ID, msg: rpc_pb2.Message) -> bool:
        """The cheap checks, in the read loop: graylisted, seen, forwarder's rate."""
        fwd = forwarder.to_base58()
        if self.scores.is_graylisted(fwd) or self.scores.is_graylisted(_b58(msg.from_id)):
            self._counters.add("dropped.graylisted")
            return False
        if self._is_msg_seen(msg):  # a copy via another mesh peer (or a replay)
            self._counters.add("dropped.seen")
            # a copy of a message that passed every check (py-libp2p marks a message
            # seen only then) is a valid act: in a mesh, a peer that always came second
            # never started its tenure and read from the newcomers' pool for ever
            self._reads.tenure.note(fwd)
            return False
        if not self._forwarders.take(fwd):
            self._counters.add("dropped.forwarder_rate")
            self.scores.report(fwd, "rate_limited")
            return False
        return self._score_gate(forwarder, msg)

    def _score_gate(self, forwarder: ID, msg: rpc_pb2.Message) -> bool:
        """Gossipsub's own score (P4 invalid messages, P6 ours...) under its publish
        threshold: py-libp2p would drop the message silently (its ``push_msg`` checks
        again, so this runs in the read loop and again in the message's task, where
        the score may have fallen meanwhile). A peer still sending past it is flooding
        (P4 grows from our refusals of its excess): each drop costs it as a
        rate-limited one would, or its valid groups' credit would hold it above the
        graylist while the gate shielded it."""
        scorer = getattr(self.router, "scorer", None)
        if scorer is not None and not scorer.allow_publish(forwarder, list(msg.topicIDs)):
            self._counters.add("dropped.score_gate")
            self.scores.report(forwarder.to_base58(), "rate_limited")
            return False
        return True

    def _signed(self, forwarder: ID, msg: rpc_pb2.Message) -> bool:
        """The signature (Ed25519 verify), in the message's task."""
        if self._is_msg_seen(msg):  # another copy got here first
            return False
        if not self._signature_ok(msg):
            fwd = forwarder.to_base58()
            self._counters.add("rejected.signature")
            self.scores.report(fwd, "signature")
            log.debug("dropped a message with a missing or bad signature via %s", fwd)
            return False
        _Verified.last = msg
        self._reads.tenure.note(forwarder.to_base58())  # its tenure starts
        return True

    def _admitted(self, forwarder: ID, msg: rpc_pb2.Message) -> bool:
        """Every admit hook of the message's topics agrees (no await: ``_signed``'s
        message is still the one py-libp2p's signature check sees next)."""
        for topic in msg.topicIDs:
            admit = self._admit.get(topic)
            if admit is not None and not admit(forwarder, msg):
                scorer = getattr(self.router, "scorer", None)
                if scorer is not None and msg.from_id == forwarder.to_bytes():
                    scorer.on_invalid_message(forwarder, topic)  # its own excess: REJECT
                return False
        return True

    @staticmethod
    def _signature_ok(msg: rpc_pb2.Message) -> bool:
        try:
            return bool(signature_validator(msg))
        # A junk key, an unknown key type (ECDSA without a deserializer), a from-id
        # that is not a multihash: the verifier raises DecodeError,
        # MissingDeserializerError, ValueError... All of it means "not verifiable".
        except Exception:
            return False

    def notify_subscriptions(self, publish_message: rpc_pb2.Message) -> None:
        for topic in set(publish_message.topicIDs):
            deliver = self._deliver.get(topic)
            if deliver is not None:
                deliver(publish_message)
                continue
            send = self.subscribed_topics_send.get(topic)
            if send is None:
                continue
            try:
                send.send_nowait(publish_message)
            except trio.WouldBlock:
                self._counters.add("dropped.subscription_full")


def gossipsub_score_params(scores: PeerScores) -> ScoreParams:
    """py-libp2p ``ScoreParams`` with our scores as P6 and its own P4 (invalid messages).

    Thresholds sit at ``graylist_score``: a peer below it is refused GRAFTs, gets no
    gossip and is not chosen for the mesh by gossipsub itself."""

    def app_score(peer: ID) -> float:
        return scores.score(peer.to_base58())

    return ScoreParams(
        # py-libp2p calls on_invalid_message when our topic validator refuses one;
        # decay is per heartbeat (1 s): 0.99 is a ~70 s half-life.
        p4_invalid_messages=TopicScoreParams(weight=1.0, cap=1000.0, decay=0.99),
        p6_appl_slack_weight=1.0,
        p6_appl_slack_decay=1.0,
        publish_threshold=scores.graylist_score,
        gossip_threshold=scores.graylist_score,
        graylist_threshold=scores.graylist_score,
        accept_px_threshold=scores.graylist_score / 10,
        app_specific_score_fn=app_score,
    )

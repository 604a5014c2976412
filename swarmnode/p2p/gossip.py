"""Gossipsub pieces: the topic name, protocol ids, and a hardened py-libp2p Pubsub.

Role: everything about *how* swarmnode uses py-libp2p's pubsub that is not the
host's lifecycle (see ``host``).

Invariants:
- Only the standard /meshsub/1.2.0, 1.1.0 and 1.0.0 protocol ids are spoken.
- No frame a peer sends can take the host down; every drop is counted.
"""

from __future__ import annotations

import logging
from typing import Any

import trio
from google.protobuf.message import DecodeError
from libp2p.peer.id import ID
from libp2p.pubsub.gossipsub import PROTOCOL_ID, PROTOCOL_ID_V11, PROTOCOL_ID_V12
from libp2p.pubsub.pb import rpc_pb2
from libp2p.pubsub.pubsub import Pubsub
from libp2p.pubsub.validators import signature_validator

from swarmnode.p2p.bridge import Counters

log = logging.getLogger("swarmnode.p2p")

GOSSIP_PROTOCOLS = (PROTOCOL_ID_V12, PROTOCOL_ID_V11, PROTOCOL_ID)
# pubsub caps whole RPC frames; one message plus its signed envelope must fit.
MAX_RPC_BYTES = 1024 * 1024


def topic_for(swarm_name: str) -> str:
    return f"/swarmnode/{swarm_name}/rollouts/1"


class HardenedPubsub(Pubsub):
    """py-libp2p Pubsub with two holes closed.

    - An undecodable RPC frame (protobuf ``DecodeError``) escapes py-libp2p 0.8.1's
      stream handler, tears down the connection's nursery and takes the whole host
      down with it: one malicious peer could kill any node. Here it resets that
      stream only, drops the peer from pubsub, and counts ``rejected.rpc_decode``.
    - Strict signing drops unsigned or badly signed messages silently; we check
      first (the same verifier) so operators see them as ``rejected.signature``.
    """

    def __init__(self, *args: Any, counters: Counters, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._counters = counters

    async def stream_handler(self, stream: Any) -> None:
        peer_id = stream.muxed_conn.peer_id
        try:
            await super().stream_handler(stream)
        except DecodeError:
            self._counters.add("rejected.rpc_decode")
            log.info("peer %s sent an undecodable pubsub RPC; closing its stream", peer_id)
            with trio.move_on_after(1.0):
                try:
                    await stream.reset()
                except Exception as err:  # the stream may already be broken; noted only
                    log.debug("reset after a bad RPC failed: %r", err)
            self._handle_dead_peer(peer_id)

    async def push_msg(self, msg_forwarder: ID, msg: rpc_pb2.Message) -> None:
        if msg_forwarder != self.my_id and not self._signature_ok(msg):
            self._counters.add("rejected.signature")
            log.debug("dropped a message with a missing or bad signature via %s", msg_forwarder)
            return
        await super().push_msg(msg_forwarder, msg)

    @staticmethod
    def _signature_ok(msg: rpc_pb2.Message) -> bool:
        try:
            return bool(signature_validator(msg))
        # A malformed key or from-id makes the verifier raise instead of return False.
        except (ValueError, TypeError, KeyError, IndexError):
            return False

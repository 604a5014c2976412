"""An in-process ``Transport``: nodes of one ``MemoryNetwork`` hear each other's publishes.

Role: run everything above the wire (publishing, the ingestion pump, fail-stop, whole
nodes exchanging groups) in one process and one event loop, in milliseconds, with
no sockets and no libp2p. The real swarm is tested separately (tests marked slow).

Invariants (those of ``transport.Transport``, kept the same way):
- A publish reaches every other running member of the network, never the sender
  (gossipsub does not echo our own messages to us either).
- Delivery applies the validator the gossip host applies (``wire.decode_batch`` and
  the swarm name); a refused message is counted under ``rejected`` by reason.
- Each inbox is the same ``share.inbox.Inbox`` the gossip transport uses: at most ``inbox_size``
  messages, the oldest dropped and counted (``inbox_dropped``) when full.
- ``crash()`` makes a member die as the libp2p thread can: ``running`` turns False,
  and ``stop`` raises ``TransportError``.
- Single event loop: all members must be used from the loop that started them.
"""

from __future__ import annotations

import asyncio
import time

from swarmnode.share.inbox import Counters, Inbox
from swarmnode.share.peerscore import PeerScores
from swarmnode.share.transport import Received, Transport, TransportError, TransportStats
from swarmnode.share.wire import MAX_MESSAGE_BYTES, WireError, decode_batch


class MemoryNetwork:
    """The members that hear each other."""

    def __init__(self) -> None:
        self.members: dict[str, MemoryTransport] = {}

    def transport(
        self, peer_id: str, swarm: str = "default", inbox_size: int = 64
    ) -> MemoryTransport:
        """A new member (joins when started)."""
        return MemoryTransport(self, peer_id, swarm, inbox_size)

    def deliver(self, sender: str, payload: bytes) -> None:
        for member in list(self.members.values()):
            if member.peer_id != sender and member.running:
                member.offer(sender, payload)


class MemoryTransport(Transport):
    """One member of a ``MemoryNetwork``."""

    def __init__(self, network: MemoryNetwork, peer_id: str, swarm: str, inbox_size: int) -> None:
        self.network = network
        self._peer_id = peer_id
        self.swarm = swarm
        self.counters = Counters()
        self.inbox = Inbox(inbox_size, self.counters)  # the gossip transport's own queue
        self.scores = PeerScores()  # verdicts only: nothing here graylists
        self._running = False
        self._crashed: str | None = None

    @property
    def peer_id(self) -> str:
        return self._peer_id

    @property
    def running(self) -> bool:
        return self._running

    @property
    def peer_scores(self) -> PeerScores:
        return self.scores

    async def start(self) -> None:
        if self._running:
            raise TransportError("already started")
        self.inbox.bind(asyncio.get_running_loop())
        self._running = True
        self.network.members[self.peer_id] = self

    async def stop(self) -> None:
        self._running = False
        self.network.members.pop(self.peer_id, None)
        if self._crashed is not None:
            crashed, self._crashed = self._crashed, None
            raise TransportError(f"transport failed: {crashed}")

    def crash(self, why: str = "simulated crash") -> None:
        """Die as a libp2p thread can: silently, noticed only through ``running``."""
        self._running = False
        self._crashed = why
        self.network.members.pop(self.peer_id, None)

    async def publish(self, payload: bytes) -> None:
        if not self._running:
            raise TransportError("transport not running")
        if len(payload) > MAX_MESSAGE_BYTES:
            raise WireError("too_large", f"{len(payload)} bytes > {MAX_MESSAGE_BYTES}")
        self.counters.add("msgs_out")
        self.network.deliver(self.peer_id, bytes(payload))

    def offer(self, sender: str, payload: bytes) -> None:
        """Deliver one message from ``sender`` (the gossip validator, then the inbox)."""
        try:
            batch = decode_batch(payload)
        except WireError as err:
            self.counters.add(f"rejected.{err.reason}")
            return
        if batch.swarm != self.swarm:
            self.counters.add("rejected.wrong_swarm")
            return
        self.counters.add("msgs_in")
        self.inbox.put(Received(sender, payload, time.time()))

    async def receive(self, timeout: float) -> Received | None:
        return await self.inbox.get(timeout)  # after a crash: None at the timeout

    def stats(self) -> TransportStats:
        counters = self.counters.snapshot()
        rejected = {
            k.removeprefix("rejected."): v for k, v in counters.items() if k.startswith("rejected.")
        }
        peers = sorted(p for p in self.network.members if p != self.peer_id) if self.running else []
        return {
            "running": self.running,
            "peer_id": self.peer_id,
            "listen_addrs": [f"/memory/{self.peer_id}"],
            "connected_peers": peers,
            "num_peers": len(peers),
            "mesh_size": len(peers),
            "msgs_in": counters.get("msgs_in", 0),
            "msgs_out": counters.get("msgs_out", 0),
            "rejected": rejected,
            "rejected_total": sum(rejected.values()),
            "inbox_len": len(self.inbox),
            "inbox_dropped": counters.get("inbox_dropped", 0),
            "peer_scores": self.scores.snapshot(),
            "graylisted": sorted(self.scores.graylisted()),
        }

"""An in-process ``Transport``: nodes of one ``MemoryNetwork`` hear each other's publishes.

Role: run everything above the wire (publishing, the ingestion pump, fail-stop, whole
nodes exchanging groups) in one process and one event loop, in milliseconds, with
no sockets and no libp2p. The real swarm is tested separately (tests marked slow).

Invariants (those of ``transport.Transport``, kept the same way):
- A publish reaches every other running member of the network, never the sender
  (gossipsub does not echo our own messages to us either).
- Delivery applies the validator the gossip host applies (``wire.decode_batch`` and
  the swarm name); a refused message is counted under ``rejected`` by reason.
- Each inbox holds at most ``inbox_size`` messages; when full the oldest is dropped
  and counted (``inbox_dropped``).
- ``crash()`` makes a member die as the libp2p thread can: ``running`` turns False,
  and ``stop`` raises ``TransportError``.
- Single event loop: all members must be used from the loop that started them.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter, deque
from typing import Any

from swarmnode.p2p.wire import MAX_MESSAGE_BYTES, WireError, decode_batch
from swarmnode.transport import Received, Transport, TransportError


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
        self.counters: Counter[str] = Counter()
        self._inbox: deque[Received] = deque()
        self._inbox_size = inbox_size
        self._event: asyncio.Event | None = None
        self._running = False
        self._crashed: str | None = None

    @property
    def peer_id(self) -> str:
        return self._peer_id

    @property
    def running(self) -> bool:
        return self._running

    async def start(self) -> None:
        if self._running:
            raise TransportError("already started")
        self._event = asyncio.Event()
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
        self.counters["msgs_out"] += 1
        self.network.deliver(self.peer_id, bytes(payload))

    def offer(self, sender: str, payload: bytes) -> None:
        """Deliver one message from ``sender`` (the gossip validator, then the inbox)."""
        try:
            batch = decode_batch(payload)
        except WireError as err:
            self.counters[f"rejected.{err.reason}"] += 1
            return
        if batch.swarm != self.swarm:
            self.counters["rejected.wrong_swarm"] += 1
            return
        self.counters["msgs_in"] += 1
        if len(self._inbox) >= self._inbox_size:
            self._inbox.popleft()
            self.counters["inbox_dropped"] += 1
        self._inbox.append(Received(sender, payload, time.time()))
        if self._event is not None:
            self._event.set()

    async def receive(self, timeout: float) -> Received | None:
        if self._event is None:
            raise TransportError("transport not started")
        deadline = time.monotonic() + timeout
        while not self._inbox:
            self._event.clear()
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            try:
                await asyncio.wait_for(self._event.wait(), left)
            except TimeoutError:
                return None
        return self._inbox.popleft()

    def drain(self) -> list[Received]:
        out = list(self._inbox)
        self._inbox.clear()
        return out

    def stats(self) -> dict[str, Any]:
        rejected = {
            k.removeprefix("rejected."): v
            for k, v in self.counters.items()
            if k.startswith("rejected.")
        }
        peers = sorted(p for p in self.network.members if p != self.peer_id)
        return {
            "running": self.running,
            "peer_id": self.peer_id,
            "listen_addrs": [f"/memory/{self.peer_id}"],
            "connected_peers": peers if self.running else [],
            "num_peers": len(peers) if self.running else 0,
            "mesh_size": len(peers) if self.running else 0,
            "msgs_in": self.counters["msgs_in"],
            "msgs_out": self.counters["msgs_out"],
            "rejected": rejected,
            "rejected_total": sum(rejected.values()),
            "inbox_len": len(self._inbox),
            "inbox_dropped": self.counters["inbox_dropped"],
        }

"""The transport interface: how a node's rollout messages leave it and arrive from peers.

Role: the contract ``exchange.RolloutExchange`` (the node's network side) and the
bootstrap role rely on. Three implementations: ``p2p.transport.GossipTransport``
(libp2p gossipsub in its own thread), ``p2p.netproc.ProcessTransport`` (the same in a
child process) and ``memory_transport.MemoryTransport`` (in-process, for fast tests
of everything above the wire).

Invariants every implementation keeps:
- ``publish`` never blocks on the network: it queues one encoded message (at most
  ``wire.MAX_MESSAGE_BYTES``) or raises ``TransportError``.
- What ``receive`` returns has passed the wire validator and names its signed
  originator; the receive side is bounded, drops the oldest when full and counts
  the drop.
- ``receive`` waits at most ``timeout`` seconds.
- ``running`` turns False when the transport dies on its own; ``stop`` then raises
  ``TransportError`` saying why (a failure is never swallowed).
- ``stats`` is one ``TransportStats``: the keys every implementation gives, typed,
  plus what one adds (documented there); JSON-able as it is, so ``swarmnode
  status`` shows it unchanged.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, NamedTuple, NotRequired, Protocol, TypedDict

from swarmnode.errors import SwarmnodeError

if TYPE_CHECKING:
    from swarmnode.share.wire import Batch


class TransportError(SwarmnodeError):
    """The transport could not start or failed while running."""

    exit_code = 1
    label = "network"


class Received(NamedTuple):
    """One validated message, as the node's ingestion reads it."""

    peer_id: str  # the signed originator (not the forwarder)
    payload: bytes  # a message decode_batch accepted
    received_at: float  # unix seconds, stamped on arrival
    # what our own decode_batch made of ``payload`` in the transport's validator, so
    # ingestion does not decode it twice (None: ingestion decodes it)
    batch: Batch | None = None


class TransportStats(TypedDict):
    """A transport's figures at one moment (``Transport.stats``), JSON-able."""

    running: bool
    peer_id: str | None  # None before start
    listen_addrs: list[str]
    connected_peers: list[str]
    num_peers: int
    mesh_size: int  # peers this node forwards the topic to
    msgs_in: int  # messages the validator accepted
    msgs_out: int  # messages published
    rejected: dict[str, int]  # reason -> messages the validator refused
    rejected_total: int
    inbox_len: int
    inbox_dropped: int  # dropped oldest-first from a full inbox
    peer_scores: dict[str, Any]  # peer -> {score, graylisted, verdicts}, lowest first
    graylisted: list[str]
    # What the libp2p transport adds (absent from the in-memory one):
    topic: NotRequired[str | None]
    topic_peers: NotRequired[int]
    dht_routing_table: NotRequired[int]
    dht_lookups_deferred: NotRequired[int]
    nat: NotRequired[dict[str, Any]]  # reachability, relay slots, direct vs relayed peers
    reading: NotRequired[dict[str, Any]]  # CPU outside training (net_share), its cap, level
    bytes_in: NotRequired[int]
    bytes_out: NotRequired[int]
    outbox_dropped: NotRequired[int]
    counters: NotRequired[dict[str, int]]  # every counter, by name
    uptime_s: NotRequired[float]
    process: NotRequired[dict[str, Any]]  # the network process's pid, CPU, RSS (net_process)


NO_STATS: TransportStats = {  # a transport that says nothing yet
    "running": False,
    "peer_id": None,
    "listen_addrs": [],
    "connected_peers": [],
    "num_peers": 0,
    "mesh_size": 0,
    "msgs_in": 0,
    "msgs_out": 0,
    "rejected": {},
    "rejected_total": 0,
    "inbox_len": 0,
    "inbox_dropped": 0,
    "peer_scores": {},
    "graylisted": [],
}


class Verdicts(Protocol):
    """Where ingestion's verdicts on a peer go (``share.peerscore.PeerScores`` is one);
    callable from any thread."""

    def report(self, peer: str, verdict: str, n: int = 1) -> None: ...


class Transport(ABC):
    """Publish and receive encoded rollout batches on the swarm's topic."""

    @property
    @abstractmethod
    def peer_id(self) -> str:
        """This node's peer ID (raises TransportError before ``start``)."""

    @property
    @abstractmethod
    def running(self) -> bool:
        """True between a successful ``start`` and ``stop`` (or a crash)."""

    @property
    def peer_scores(self) -> Verdicts | None:
        """Where the per-peer scores this transport acts on (graylisting) take verdicts,
        or None if it keeps none. Ingestion reports its verdicts (verified, failed,
        false claims) here."""
        return None

    @abstractmethod
    async def start(self) -> None:
        """Come up (listening, subscribed); raise TransportError if that fails."""

    @abstractmethod
    async def stop(self) -> None:
        """Go down within a bounded time; raise TransportError if it had crashed."""

    @abstractmethod
    async def publish(self, payload: bytes) -> None:
        """Queue one encoded batch for the swarm; returns at once."""

    @abstractmethod
    async def receive(self, timeout: float) -> Received | None:
        """The next validated message, or None after ``timeout`` seconds."""

    @abstractmethod
    def stats(self) -> TransportStats:
        """This transport's figures now (``swarmnode status``, the round records)."""

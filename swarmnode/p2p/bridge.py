"""The asyncio -> trio half of the hand-off between the node and the libp2p thread.

Role: with ``share.inbox`` (``Counters``, and ``Inbox`` for trio -> asyncio), the only
objects both threads touch. Neither side ever blocks on the other: producers append
without waiting, consumers wait on their own loop's primitive.

Invariants:
- ``Outbox`` has a fixed bound; when full the *oldest* payload is dropped and counted.
- ``Outbox`` wakes the trio pump through a ``TrioToken``; the payload stays in the
  bounded deque, never in trio's callback queue.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from swarmnode.share.inbox import Counters, DropOldest

T = TypeVar("T")


class Outbox(DropOldest[bytes]):
    """Payloads waiting to be published (asyncio side writes, trio pump reads)."""

    def __init__(self, maxlen: int, counters: Counters) -> None:
        super().__init__(maxlen, counters, "outbox_dropped")
        self._wake: Callable[[], None] | None = None

    def bind(self, wake: Callable[[], None]) -> None:
        """Set the thread-safe wake-up (``TrioToken.run_sync_soon`` of an event.set)."""
        self._wake = wake

    def put(self, payload: bytes) -> None:
        """Called from the asyncio loop; never blocks."""
        self._append(payload)
        if self._wake is not None:
            self._wake()

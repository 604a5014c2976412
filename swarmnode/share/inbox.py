"""Bounded, thread-safe hand-off from a transport's own thread to the asyncio node.

Role: the neutral half of every transport's delivery path: ``Counters`` (the
lock-protected name -> int map a transport's ``stats()`` reads) and ``Inbox`` (received
messages waiting for the node). The libp2p transport fills it from its trio thread,
``memory_transport`` from the sender's loop; neither depends on the other.

Invariants:
- Every queue has a fixed bound; when full the *oldest* item is dropped (newer
  rollouts are fresher and worth more) and the drop is counted.
- ``Inbox`` wakes the asyncio consumer with ``loop.call_soon_threadsafe`` carrying no
  payload, so a stalled asyncio loop can never make the hand-off grow past its bound.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter, deque
from typing import Generic, TypeVar

from swarmnode.share.transport import Received

T = TypeVar("T")


class Counters:
    """Thread-safe counters keyed by name (``msgs_in``, ``rejected.schema``...)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._c: Counter[str] = Counter()

    def add(self, name: str, n: int = 1) -> None:
        with self._lock:
            self._c[name] += n

    def get(self, name: str) -> int:
        with self._lock:
            return self._c[name]

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self._c)


class DropOldest(Generic[T]):
    def __init__(self, maxlen: int, counters: Counters, drop_counter: str) -> None:
        if maxlen < 1:
            raise ValueError("maxlen must be >= 1")
        self._lock = threading.Lock()
        self._items: deque[T] = deque()
        self._maxlen = maxlen
        self._counters = counters
        self._drop_counter = drop_counter

    def _append(self, item: T) -> bool:
        """Append; return True if the queue was empty before (a wake-up is due)."""
        with self._lock:
            was_empty = not self._items
            if len(self._items) >= self._maxlen:
                self._items.popleft()
                self._counters.add(self._drop_counter)
            self._items.append(item)
            return was_empty

    def get_nowait(self) -> T | None:
        with self._lock:
            return self._items.popleft() if self._items else None

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)


class Inbox(DropOldest[Received]):
    """Received messages waiting for the node (asyncio side reads)."""

    def __init__(self, maxlen: int, counters: Counters) -> None:
        super().__init__(maxlen, counters, "inbox_dropped")
        self._loop: asyncio.AbstractEventLoop | None = None
        self._event: asyncio.Event | None = None

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        """Attach the asyncio loop that consumes; call from that loop."""
        self._loop = loop
        self._event = asyncio.Event()

    def put(self, item: Received) -> None:
        """Called from the libp2p thread; never blocks."""
        self._append(item)
        loop, event = self._loop, self._event
        # An already-set event needs no wake-up (a syscall each; 7% of the libp2p
        # thread at 20 messages a second). Safe: ``get`` clears the event and only then
        # looks at the queue, and the item was appended before this check.
        if loop is not None and event is not None and not event.is_set() and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(event.set)
            except RuntimeError:  # loop closed between the check and the call
                self._counters.add("inbox_wake_failed")

    async def get(self, timeout: float) -> Received | None:
        """Next message, or None after ``timeout`` seconds."""
        if self._event is None:
            raise RuntimeError("Inbox.bind() was not called")
        deadline = time.monotonic() + timeout
        while True:
            item = self.get_nowait()
            if item is not None:
                return item
            self._event.clear()
            if len(self):  # raced with a put between get_nowait and clear
                continue
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            try:
                await asyncio.wait_for(self._event.wait(), left)
            except TimeoutError:
                return None

    def drain(self) -> list[Received]:
        """Everything waiting, oldest first, without waiting."""
        out: list[Received] = []
        while True:
            item = self.get_nowait()
            if item is None:
                break
            out.append(item)
        return out

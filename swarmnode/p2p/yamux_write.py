"""Whole-message yamux writes: one ``write`` never interleaves with another.

Role: one override of py-libp2p's yamux stream: how a write is serialised.

py-libp2p 0.8's ``YamuxStream.write`` cuts a write into frames of at most the send
window (and 64 KiB) and takes the stream's write lock for each frame, not for the
write. When the window runs out in the middle of a message, the writer waits for
credit and any other task writing to the same stream can slip its frame in between:
the reader then gets the first part of one message followed by another, and parses
garbage. Gossipsub writes to a peer from more than one task (the per-peer send loop,
and the catch-up of recent messages a newly subscribed peer is sent), so a node that
had to wait for a slow reader's credit sent its peers corrupt RPCs: a stock py-libp2p
peer's host died on the DecodeError (``bench_scale.py`` forwarders, 2026-12-01), a
swarmnode peer resets the stream and charges the honest sender a protocol fault.
go-yamux holds its write lock for the whole ``Write``; this module does the same.

Invariants:
- The bytes of one ``write`` reach the peer contiguous on the stream, whatever other
  tasks write to it meanwhile: writes to one stream are serialised by a per-stream
  ``trio.Lock`` held for the whole call (py-libp2p's frame-level locking and window
  accounting inside it are unchanged, so any yamux peer reads the frames as before).
- A write that fails or is cancelled after it may have sent part of its bytes resets
  the stream (bounded by ``RESET_TIMEOUT_S``, shielded from the cancellation), so the
  peer sees a reset instead of a message spliced with the next one; the error still
  reaches the caller.
- Installed by ``swarmnode.p2p.host`` at its import, for every yamux stream in the
  process; ``install`` is idempotent and ``uninstall`` restores py-libp2p's rule.
"""

from __future__ import annotations

import logging
from typing import Any

import trio
from libp2p.stream_muxer.yamux.yamux import YamuxStream

log = logging.getLogger(__name__)

RESET_TIMEOUT_S = 1.0
_ORIGINAL = YamuxStream.write
_LOCK = "_swarmnode_write_lock"


async def _whole_write(self: Any, data: bytes) -> None:
    """py-libp2p's write, under a lock held until the last frame of ``data`` is out."""
    lock = self.__dict__.get(_LOCK)
    if lock is None:
        lock = self.__dict__[_LOCK] = trio.Lock()
    async with lock:
        try:
            await _ORIGINAL(self, data)
        except BaseException:
            if data and not (self.send_closed or self.closed):
                with trio.CancelScope(shield=True), trio.move_on_after(RESET_TIMEOUT_S):
                    try:
                        await self.reset()
                    except Exception as err:  # already broken: the caller sees the first error
                        log.debug("reset after a failed write failed: %r", err)
            raise


def install() -> bool:
    """Serialise whole writes on every yamux stream (idempotent)."""
    if YamuxStream.write is _whole_write:
        return False
    YamuxStream.write = _whole_write  # type: ignore[method-assign]
    return True


def uninstall() -> None:
    """py-libp2p's frame-level locking again (for the before/after test)."""
    YamuxStream.write = _ORIGINAL  # type: ignore[method-assign]

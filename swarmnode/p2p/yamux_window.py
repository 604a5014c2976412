"""Yamux receive-window credit, returned in half-window steps (go-yamux's rule).

Role: one override of py-libp2p's yamux stream: when a read gives window credit
back to the sender.

py-libp2p 0.8's ``YamuxStream`` sends a WINDOW_UPDATE frame after every read that
consumed any bytes (its "partial slack" and "release on read" branches). For
gossip, where each message is one small read, that doubles the frames on a
connection: every message read costs a frame written back (Noise-encrypted, one
socket write), and every message forwarded to a mesh peer costs a frame read back.
go-yamux (and rust's yamux) return credit only once the consumed bytes reach half
the window, and that is what this module installs.

Invariants:
- Credit is never lost or doubled: ``recv_window + buffered + pending credit`` stays
  equal to the stream's target window, and an update is sent, for all the pending
  credit at once, as soon as that credit reaches half the target window
  (``target // 2``, 128 KiB at py-libp2p's 256 KiB default).
- So a sender always has at least half a window in flight and never stalls on a
  reader that keeps reading: a 1 MiB message (the pubsub cap) arrives in steps of
  half a window, as with a go peer.
- Only when credit is returned changes; the frames themselves are yamux's standard
  WINDOW_UPDATE, so any yamux peer (go, rust, js, py) reads them as before.
  py-libp2p's window auto-tuning lived in the replaced method, so the target window
  stays at its 256 KiB default (ample for gossip messages of at most 1 MiB).
- Installed by ``swarmnode.p2p.host`` at its import, for every yamux stream in the
  process; ``install`` is idempotent and ``uninstall`` restores py-libp2p's rule
  (``scripts/bench_gossip.py --compare`` measures them side by side).
"""

from __future__ import annotations

from typing import Any

from libp2p.stream_muxer.yamux.yamux import YamuxStream

_ORIGINAL = YamuxStream._auto_tune_and_send_window_update


async def _credit_in_half_windows(self: Any, *, bytes_read: int = 0) -> None:
    """Send a WINDOW_UPDATE once the consumed bytes reach half the target window."""
    async with self.window_lock:
        buffered = len(self.conn.stream_buffers.get(self.stream_id, b""))
        delta = self.target_recv_window - (self.recv_window + buffered)
        if delta < self.target_recv_window // 2:
            return
        self.recv_window += delta
    await self.send_window_update(delta, skip_lock=True)


def install() -> bool:
    """Replace py-libp2p's per-read credit with half-window steps (idempotent)."""
    if YamuxStream._auto_tune_and_send_window_update is _credit_in_half_windows:
        return False
    YamuxStream._auto_tune_and_send_window_update = _credit_in_half_windows  # type: ignore[method-assign]
    return True


def uninstall() -> None:
    """py-libp2p's own behaviour again (for the before/after bench and tests)."""
    YamuxStream._auto_tune_and_send_window_update = _ORIGINAL  # type: ignore[method-assign]

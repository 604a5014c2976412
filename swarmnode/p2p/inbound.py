"""Inbound connections hold their listener slot only while they are open.

Role: one override of py-libp2p 0.8.1's swarm, for the TCP listener's handler of
an accepted connection. py-libp2p caps inbound connections at
``max_connections - min_connections`` (250 by default) with a capacity limiter,
held by the handler for as long as it runs; and after a successful upgrade the
handler waits for the whole swarm to finish ("keep handler alive so the
connection stays open"), not for the connection to close. So every inbound
connection ever made kept one slot and one task: after 250 of them, in a
node's life, every later one was accepted and reset at once. Any stranger could
shut a node out of its swarm by connecting 250 times (the chaos test did, within
minutes; a fresh peer then could not connect).

Invariants:
- The handler lives exactly as long as its connection: it returns when the
  connection's muxer reports it closed (``event_closed``; polled once a second
  for a muxer without one), or when the swarm stops (cancellation). trio's
  ``serve_tcp`` closes the socket when the handler returns, so it must not
  return earlier.
- Everything before the barrier is py-libp2p's own: the connection gate, then the
  security and muxer upgrade (``upgrade_inbound_raw_conn``, which registers the
  connection with the swarm). A failed upgrade closes the socket, logged at debug.
- Only TCP-style raw connections are handled here; an already-multiplexed one
  (QUIC, not configured by swarmnode) goes to py-libp2p's own handler.
- ``install`` replaces the handler on one swarm instance, never the class.
"""

from __future__ import annotations

import logging
from typing import Any

import trio
from libp2p.abc import IMuxedConn
from libp2p.network.connection.raw_connection import RawConnection

log = logging.getLogger("swarmnode.p2p")

POLL_S = 1.0  # for a muxer without a close event


async def until_closed(muxed: Any) -> None:
    """Return once ``muxed`` (a muxed connection) is closed."""
    event = getattr(muxed, "event_closed", None)
    if isinstance(event, trio.Event):
        await event.wait()
        return
    while not getattr(muxed, "is_closed", True):
        await trio.sleep(POLL_S)


def install(swarm: Any) -> None:
    """Replace ``swarm``'s inbound handler body (module docstring)."""
    original = swarm._do_handle_inbound_connection

    async def handle(read_write_closer: Any, maddr: Any, failure_event: Any) -> None:
        if isinstance(read_write_closer, IMuxedConn):
            await original(read_write_closer, maddr, failure_event)
            return
        remote = swarm._build_remote_multiaddr(read_write_closer)
        if remote is not None and not await swarm.connection_gate.is_allowed(remote):
            log.debug("inbound connection from %s refused by the connection gate", remote)
            await _close(read_write_closer)
            return
        raw_conn = RawConnection(read_write_closer, False)
        try:
            muxed = await swarm.upgrade_inbound_raw_conn(raw_conn, maddr)
        # handshake junk, a PSK mismatch, a peer that hung up: its connection only
        except Exception as err:
            log.debug("inbound connection on %s not upgraded: %r", maddr, err)
            await _close(raw_conn)
            return
        await until_closed(muxed)

    swarm._do_handle_inbound_connection = handle


async def _close(conn: Any) -> None:
    try:
        await conn.close()
    except Exception as err:  # already closed by the peer or the upgrade
        log.debug("closing an inbound connection: %r", err)

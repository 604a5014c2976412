"""Containment: no exception a peer can cause in a py-libp2p task ends the node.

Role: the services the host starts (the swarm itself, pubsub and gossipsub, the
DHT, circuit relay, DCUtR) run under ``ContainedManager`` instead of py-libp2p's
``TrioManager``, and every inbound stream handler (identify, ping, Kademlia, relay
hop/stop, AutoNAT, DCUtR, meshsub) runs under ``TaskGuard.stream_handler``.
py-libp2p 0.8.1's manager cancels the whole service at the first exception of any
task it spawned, and a handler's exception ends its connection's nursery and then
the swarm: one ``KeyError`` in a per-peer teardown task stopped pubsub and the node
(issue 28).

What is contained, and what is not:
- A non-daemon task spawned by a service's manager runs on behalf of one message,
  peer, connection or stream (``push_msg``, ``_teardown_if_connected``,
  ``handle_sending_messages``, a connection's muxer and stream loops...). An
  ``Exception`` it raises is counted (``errors.task`` and
  ``errors.task.<ExceptionClass>`` in the transport's Counters), logged at warning
  once per exception class with the task and the peer (later ones at debug), and
  the peer it ran for, when one is known, is disconnected (its state is rebuilt on
  a fresh connection); the service keeps running.
- An exception from an inbound stream handler is counted the same way and the
  stream is reset. Its peer is not charged: whether the peer's bytes or the node's
  own state made the handler raise cannot be told here (pubsub, which can tell,
  charges protocol faults itself).
- A connection shutdown py-libp2p itself treats as expected (EOF, reset, closed)
  is not an error: logged at debug, not counted.
- The host's own loops (discovery, graylist enforcement, liveness, NAT, publishing,
  the snapshot) run under ``TaskGuard.supervised``: an exception is recorded
  (``errors.loop.<name>``) and the loop restarts after a backoff.
- The node's own machinery stays fail-stop: a service's ``run``, its daemon tasks
  (heartbeat, peer queues), the listener and the lifecycle of the services. So
  does every ``BaseException`` (``trio.Cancelled``, ``KeyboardInterrupt``).
- Memory: one set of logged exception classes, at most ``_LOGGED_KEEP``.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import trio
from libp2p.peer.id import ID
from libp2p.tools.anyio_service import TrioManager
from libp2p.tools.anyio_service.utils import get_task_name
from libp2p.utils.connection_shutdown import is_expected_connection_shutdown

from swarmnode.p2p import inbound, peerbook
from swarmnode.share.inbox import Counters

log = logging.getLogger("swarmnode.p2p")

_LOGGED_KEEP = 256
DROP_TIMEOUT_S = 5.0  # disconnecting the peer of a failed task
LOOP_BACKOFF_MAX_S = 60.0  # the longest wait before one of the host's loops restarts


def _leaf(err: BaseException) -> BaseException:
    """The first exception inside nested exception groups (what actually raised)."""
    while isinstance(err, BaseExceptionGroup) and err.exceptions:
        err = err.exceptions[0]
    return err


def peer_of(async_fn: Any, args: tuple[Any, ...]) -> ID | None:
    """The peer a task runs for: an ``ID`` argument, or the peer of a stream or
    connection among its arguments or the object its method is bound to."""
    for value in (*args, getattr(async_fn, "__self__", None)):
        if isinstance(value, ID):
            return value
        for holder in (value, getattr(value, "muxed_conn", None)):
            peer = getattr(holder, "peer_id", None)
            if isinstance(peer, ID):
                return peer
    return None


class TaskGuard:
    """Counts, logs and answers for contained failures of one host's tasks."""

    def __init__(self, counters: Counters) -> None:
        self.counters = counters
        self.host: Any = None  # set by ``attach``: whom to disconnect a failed peer from
        self._logged: set[str] = set()

    def attach(self, host: Any) -> None:
        self.host = host

    def _record(self, where: str, err: BaseException, peer: ID | None) -> None:
        leaf = _leaf(err)
        name = leaf.__class__.__name__
        self.counters.add("errors.task")
        self.counters.add(f"errors.task.{name}")
        if name not in self._logged and len(self._logged) < _LOGGED_KEEP:
            self._logged.add(name)
            log.warning(
                "a py-libp2p task raised, contained (the node keeps running; later %s "
                "at debug): %s for peer %s: %r",
                name,
                where,
                peer,
                leaf,
                exc_info=err,
            )
        else:
            log.debug("contained %s in %s for peer %s: %r", name, where, peer, leaf)

    async def task_failed(self, where: str, err: Exception, peer: ID | None) -> None:
        """A service task raised: record it, then drop the peer it ran for."""
        if is_expected_connection_shutdown(err):
            log.debug("%s for peer %s ended with its connection: %r", where, peer, err)
            return
        self._record(where, err, peer)
        if peer is None or self.host is None:
            return
        self.counters.add("errors.task_peer_dropped")
        with trio.move_on_after(DROP_TIMEOUT_S):
            try:
                await self.host.disconnect(peer)
            except Exception as drop_err:  # a half-closed connection: it is going anyway
                log.debug("disconnect %s after a failed task: %r", peer, drop_err)

    def contained(
        self, async_fn: Callable[..., Awaitable[Any]], where: str
    ) -> Callable[..., Awaitable[None]]:
        """``async_fn`` with its exceptions contained (``task_failed``)."""

        async def run(*args: Any) -> None:
            try:
                await async_fn(*args)
            except Exception as err:
                await self.task_failed(where, err, peer_of(async_fn, args))

        return run

    async def supervised(self, name: str, loop: Callable[..., Awaitable[Any]], *args: Any) -> None:
        """Run one of the host's own loops (discovery, graylist enforcement, liveness,
        NAT, publishing): an ``Exception`` from it is recorded (``errors.loop.<name>``
        too) and the loop restarts after a backoff (1 s, doubling to
        ``LOOP_BACKOFF_MAX_S``; back to 1 s after a long healthy run). These loops read
        what peers put in the peerstore and the connection table, and a peer that
        left at the wrong moment once ended the node from one of them."""
        delay = 1.0
        while True:
            started = trio.current_time()
            try:
                await loop(*args)
                return
            except Exception as err:
                self.counters.add(f"errors.loop.{name}")
                self._record(f"the {name} loop", err, None)
            if trio.current_time() - started > LOOP_BACKOFF_MAX_S:
                delay = 1.0
            await trio.sleep(delay)
            delay = min(2 * delay, LOOP_BACKOFF_MAX_S)

    def stream_handler(
        self, handler: Callable[[Any], Awaitable[None]]
    ) -> Callable[[Any], Awaitable[None]]:
        """The swarm's handler of every inbound stream (protocol negotiation, then the
        protocol's handler), contained: an exception resets the stream. The peer is
        not charged: a handler can raise on the node's own state too (the chaos test
        saw identify raise for every peer once the node's own peerstore entry was
        gone), and charging then graylisted honest peers."""

        async def handle(stream: Any) -> None:
            try:
                await handler(stream)
            except Exception as err:
                peer = peer_of(None, (stream,))
                if is_expected_connection_shutdown(err):
                    log.debug("a stream from %s ended with its connection: %r", peer, err)
                    return
                protocol = _protocol_of(stream)
                self._record(f"the {protocol} stream handler", err, peer)
                with trio.move_on_after(DROP_TIMEOUT_S):
                    try:
                        await stream.reset()
                    except Exception as reset_err:  # already broken
                        log.debug("reset after a failed handler: %r", reset_err)

        return handle


def _protocol_of(stream: Any) -> str:
    try:
        return str(stream.get_protocol())
    except Exception:  # not negotiated yet: the failure was in multiselect
        return "unnegotiated"


def live_tasks() -> int:
    """The tasks alive in the current trio run (the task tree from its root): what a
    flood or churn would grow if anything leaked a task per peer or message."""
    todo = [trio.lowlevel.current_root_task()]
    n = 0
    while todo:
        task = todo.pop()
        if task is None:
            continue
        n += 1
        for nursery in task.child_nurseries:
            todo.extend(nursery.child_tasks)
    return n


class ContainedManager(TrioManager):
    """py-libp2p's service manager, with every non-daemon task contained (module
    docstring); daemon tasks and the service's own ``run`` stay fail-stop."""

    def __init__(self, service: Any, guard: TaskGuard) -> None:
        super().__init__(service)
        self._guard = guard
        self._where = service.__class__.__name__

    def run_task(
        self,
        async_fn: Any,
        *args: Any,
        daemon: bool = False,
        name: str | None = None,
        _internal: bool = False,
    ) -> None:
        if not daemon and not _internal:
            name = get_task_name(async_fn, name)
            async_fn = self._guard.contained(async_fn, f"{self._where}.{name}")
        super().run_task(async_fn, *args, daemon=daemon, name=name, _internal=_internal)


@asynccontextmanager
async def contained_service(service: Any, guard: TaskGuard) -> AsyncIterator[ContainedManager]:
    """py-libp2p's ``background_trio_service``, under a ``ContainedManager``."""
    async with trio.open_nursery() as nursery:
        manager = ContainedManager(service, guard)
        service._manager = manager
        nursery.start_soon(manager.run)
        await manager.wait_started()
        try:
            yield manager
        finally:
            await manager.stop()


@asynccontextmanager
async def run_host(host: Any, listen: list[Any], guard: TaskGuard) -> AsyncIterator[None]:
    """py-libp2p's ``BasicHost.run`` (the swarm service, listening, mDNS), with the
    swarm under a ``ContainedManager``, every inbound stream handler contained, and
    inbound connections that give their listener slot back when they close
    (``inbound``).
    UPnP and bootstrap discovery are never configured here (discovery does it). The
    peerstore never evicts the node itself (``peerbook``)."""
    if getattr(host, "upnp", None) is not None or getattr(host, "bootstrap", None) is not None:
        raise ValueError("run_host: py-libp2p UPnP and bootstrap are not used by swarmnode")
    network = host.get_network()
    network.set_stream_handler(guard.stream_handler(network.common_stream_handler))
    inbound.install(network)  # an inbound connection's slot lasts as long as it does
    peerbook.protect(host, guard.counters)  # the peerstore never evicts the node itself
    guard.attach(host)
    async with contained_service(network, guard):
        await network.listen(*listen)
        if host.mDNS is not None:
            host.mDNS.start()
        try:
            yield
        finally:
            await host._shutdown_background_services()

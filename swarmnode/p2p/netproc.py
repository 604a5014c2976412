"""The libp2p host in a process of its own (``swarm.net_process``).

Role: ``ProcessTransport``, a ``Transport`` that runs ``GossipTransport`` (the libp2p
host and its trio thread) in a child process, ``python -m swarmnode.p2p.netproc``,
and speaks to it over a socket pair. The node's side keeps only what ingestion
reads: validated payloads, a stats snapshot, and the verdicts it sends back.

Why: in one process, py-libp2p's Python code (reading, parsing, relaying each message
to the mesh: several ms of CPU a message heard) shares the GIL with the trainer
thread, and under five Sybils the trainer spent 9-11% more CPU a round on the same
work, for a cause the thread-level fixes did not find (docs/reliability.md). In its
own process the host shares nothing with the trainer but the CPU, which the kernel
shares, and a fault in it (an abort in a C extension, a leak) ends the child, not
the node: the node then stops with a TransportError, as when the thread dies.

Invariants:
- A frame is a 4-byte big-endian length and a msgpack map ``{"v": VERSION, "t":
  kind, ...}`` of at most ``MAX_FRAME`` bytes. Either side treats a frame it cannot
  read as the end of the link (both ends are this module: a bad frame is a bug, and
  it is surfaced, not skipped).
- Parent to child: ``start`` (the swarm config, data dir, log level), ``pub`` (one
  payload), ``verdicts`` (``items``: peer, verdict, count triples), ``stop``. Child to parent:
  ``up`` (peer id, addresses), ``msg`` (one validated message), ``stats`` (the host's
  ``TransportStats`` every ``STATS_S``), ``fail`` (why it could not start or died),
  ``bye`` (stopped; the stop's error, if any).
- Every queue is bounded: received messages wait in the node's ``Inbox``
  (``inbox_size``, drop-oldest, counted); a publish is dropped and counted
  (``outbox_dropped``) while the socket's write buffer holds ``WRITE_HIGH`` bytes;
  verdicts are summed per (peer, verdict) between flushes, at most ``MAX_VERDICT_KEYS``
  keys (the rest dropped, counted). In the child, messages the node has not taken
  wait in the host's own bounded inbox: the child writes only as fast as the node
  reads (``drain``).
- Every wait has a timeout: start-up (``startup_timeout``), stop
  (``shutdown_timeout_s`` + ``STOP_MARGIN_S``, then the child is killed). The child
  stops its host when the node's end of the socket closes (the node died), within
  its own ``shutdown_timeout_s``, and leaves with ``os._exit``. It ignores SIGINT and
  SIGTERM: only its node ends it (a Ctrl-C or a service manager's SIGTERM to every
  process of the node would otherwise end it first, and the node would stop as if
  its network had failed).
- A child that dies or reports a failure turns ``running`` False; ``stop`` then
  raises ``TransportError`` with its exit code and reason.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any, cast

import msgpack

from swarmnode.config import SwarmConfig
from swarmnode.share.inbox import Counters, Inbox
from swarmnode.share.transport import (
    NO_STATS,
    Received,
    Transport,
    TransportError,
    TransportStats,
)
from swarmnode.share.wire import MAX_MESSAGE_BYTES, WireError

log = logging.getLogger("swarmnode.p2p")

VERSION = 1
MAX_FRAME = 4 * 1024 * 1024  # a payload (< 1 MiB) or a stats snapshot, with room
WRITE_HIGH = 8 * 1024 * 1024  # bytes waiting for the child beyond which a publish drops
MAX_VERDICT_KEYS = 4096  # (peer, verdict) sums held between two flushes
FLUSH_S = 0.1  # verdicts go to the child this often
STATS_S = 1.0  # the child sends its stats this often
FORWARD_BATCH = 32  # messages the child writes before it waits for the socket
STOP_MARGIN_S = 5.0  # beyond the child's own shutdown_timeout_s


class LinkError(Exception):
    """A frame that is not this module's (too large, not msgpack, not a versioned map)."""


def encode_frame(kind: str, **fields: Any) -> bytes:
    """One frame of ``kind`` carrying ``fields`` (never named "v" or "t")."""
    if "v" in fields or "t" in fields:
        raise LinkError("a frame's fields cannot be named 'v' or 't'")
    body = msgpack.packb({"v": VERSION, "t": kind, **fields}, use_bin_type=True)
    if len(body) > MAX_FRAME:
        raise LinkError(f"{kind} frame of {len(body)} bytes > {MAX_FRAME}")
    return len(body).to_bytes(4, "big") + body


async def read_frame(reader: asyncio.StreamReader) -> dict[str, Any] | None:
    """The next frame, or None at a clean end of the stream (EOF between frames)."""
    try:
        head = await reader.readexactly(4)
    except asyncio.IncompleteReadError as err:
        if not err.partial:
            return None
        raise LinkError("stream ended inside a frame header") from None
    n = int.from_bytes(head, "big")
    if n > MAX_FRAME:
        raise LinkError(f"frame of {n} bytes > {MAX_FRAME}")
    try:
        frame = msgpack.unpackb(await reader.readexactly(n), raw=False)
    except asyncio.IncompleteReadError:
        raise LinkError("stream ended inside a frame") from None
    except (ValueError, msgpack.UnpackException) as err:
        raise LinkError(f"not msgpack: {err}") from None
    if (
        not isinstance(frame, dict)
        or frame.get("v") != VERSION
        or not isinstance(frame.get("t"), str)
    ):
        raise LinkError("not a version-1 frame")
    return frame


class _Verdicts:
    """Ingestion's verdicts on peers, summed until the next flush to the child.

    ``report`` is called from the ingestion worker thread, ``take`` from the loop."""

    def __init__(self, counters: Counters) -> None:
        self._lock = threading.Lock()
        self._sums: Counter[tuple[str, str]] = Counter()
        self._counters = counters

    def report(self, peer: str, verdict: str, n: int = 1) -> None:
        with self._lock:
            key = (peer, verdict)
            if key not in self._sums and len(self._sums) >= MAX_VERDICT_KEYS:
                self._counters.add("netproc.verdicts_dropped", n)
                return
            self._sums[key] += n

    def take(self) -> list[tuple[str, str, int]]:
        with self._lock:
            out = [(p, v, n) for (p, v), n in self._sums.items()]
            self._sums.clear()
        return out


class ProcessTransport(Transport):
    """``GossipTransport`` in a child process; see the module docstring."""

    def __init__(self, cfg: SwarmConfig, data_dir: Path, startup_timeout: float = 30.0) -> None:
        self.cfg = cfg
        self.data_dir = Path(data_dir)
        self.startup_timeout = startup_timeout
        self.counters = Counters()
        self.inbox = Inbox(cfg.inbox_size, self.counters)
        self.verdicts = _Verdicts(self.counters)
        self.info: dict[str, Any] | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._up: asyncio.Future[dict[str, Any]] | None = None
        self._bye: asyncio.Event | None = None
        self._stats: dict[str, Any] = {}
        self._failure: str | None = None  # why the child failed, if it did
        self._ended = False  # the link is closed (EOF, a bad frame, or stop)
        self._stopping = False
        self._started_at = 0.0

    @property
    def peer_id(self) -> str:
        if self.info is None:
            raise TransportError("transport not started")
        return str(self.info["peer_id"])

    @property
    def pid(self) -> int | None:
        """The child's process id while it runs."""
        return self._proc.pid if self._proc is not None else None

    @property
    def running(self) -> bool:
        proc = self._proc
        return (
            proc is not None
            and proc.poll() is None
            and not self._ended
            and self._failure is None
            and self.info is not None
        )

    @property
    def peer_scores(self) -> _Verdicts:
        return self.verdicts

    async def start(self) -> None:
        """Start the child and wait (``startup_timeout``) until its host is listening."""
        if self._proc is not None:
            raise TransportError("already started")
        ours, theirs = socket.socketpair()
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "swarmnode.p2p.netproc", str(theirs.fileno())],
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
            )
        except OSError as err:
            ours.close()
            raise TransportError(f"could not start the network process: {err}") from err
        finally:
            theirs.close()
        loop = asyncio.get_running_loop()
        self.inbox.bind(loop)
        self._up, self._bye = loop.create_future(), asyncio.Event()
        reader, self._writer = await asyncio.open_connection(sock=ours)
        self._send(
            "start",
            cfg=self.cfg.model_dump(mode="json"),
            data_dir=str(self.data_dir),
            log_level=logging.getLogger("swarmnode").getEffectiveLevel(),
            startup_timeout=self.startup_timeout,
        )
        self._tasks = [
            asyncio.create_task(self._read(reader), name="netproc-read"),
            asyncio.create_task(self._flush_verdicts(), name="netproc-verdicts"),
        ]
        try:
            self.info = await asyncio.wait_for(self._up, self.startup_timeout + STOP_MARGIN_S)
        except TimeoutError:
            await self._shutdown()
            raise TransportError(
                f"network process did not start in {self.startup_timeout}s"
            ) from None
        except TransportError:
            await self._shutdown()
            raise
        self._started_at = time.time()
        log.info(
            "libp2p up in process %d as %s on %s",
            self._proc.pid,
            self.info["peer_id"],
            ", ".join(self.info["listen_addrs"]),
        )

    def _send(self, kind: str, **fields: Any) -> bool:
        """Write one frame (loop thread); False if the link is gone."""
        writer = self._writer
        if writer is None or writer.is_closing():
            return False
        writer.write(encode_frame(kind, **fields))
        return True

    def _fail(self, why: str) -> None:
        if self._failure is None:
            self._failure = why
            self.counters.add("thread_crashed")
            log.error("network process failed: %s", why)
        if self._up is not None and not self._up.done():
            self._up.set_exception(TransportError(f"network process failed to start: {why}"))

    async def _read(self, reader: asyncio.StreamReader) -> None:
        """The child's frames until the link ends; a link that ends unasked is a failure."""
        assert self._bye is not None and self._up is not None
        try:
            while (frame := await read_frame(reader)) is not None:
                kind = frame["t"]
                if kind == "msg":
                    self.inbox.put(Received(frame["p"], frame["d"], frame["at"]))
                elif kind == "stats":
                    self._stats = frame["s"]
                elif kind == "up":
                    if not self._up.done():
                        self._up.set_result(frame["info"])
                elif kind == "fail":
                    self._fail(str(frame["e"]))
                elif kind == "bye":
                    if frame.get("e"):
                        self._fail(f"while stopping: {frame['e']}")
                    self._bye.set()
                    return
                else:
                    raise LinkError(f"unknown frame {kind!r}")
        except (LinkError, KeyError, TypeError, ConnectionError) as err:
            self.counters.add("netproc.bad_link")
            self._fail(f"link to the network process broke: {err!r}")
        finally:
            self._ended = True
            self._bye.set()
        if not self._stopping:
            code = await self._exit_code(1.0)  # the link closes just before the exit
            self._fail(f"the network process ended unasked (exit code {code})")

    async def _exit_code(self, within: float) -> int | None:
        """The child's exit code once it has exited, polling for ``within`` seconds."""
        deadline = time.monotonic() + within
        while self._proc is not None and self._proc.poll() is None:
            if time.monotonic() > deadline:
                return None
            await asyncio.sleep(0.05)
        return None if self._proc is None else self._proc.returncode

    async def _flush_verdicts(self) -> None:
        while True:
            await asyncio.sleep(FLUSH_S)
            if taken := self.verdicts.take():
                self._send("verdicts", items=taken)

    async def publish(self, payload: bytes) -> None:
        """Queue one encoded batch for the child; returns at once (bounded buffer)."""
        if not self.running:
            raise TransportError("transport not running")
        if len(payload) > MAX_MESSAGE_BYTES:
            raise WireError("too_large", f"{len(payload)} bytes > {MAX_MESSAGE_BYTES}")
        writer = self._writer
        if writer is not None and writer.transport.get_write_buffer_size() > WRITE_HIGH:
            self.counters.add("outbox_dropped")
            return
        self._send("pub", d=bytes(payload))

    async def receive(self, timeout: float) -> Received | None:
        """The next validated message, or None after ``timeout`` seconds."""
        return await self.inbox.get(timeout=timeout)

    def stats(self) -> TransportStats:
        """The child's last ``TransportStats`` (at most ``STATS_S`` old), with this side's
        inbox and counters, and the child's pid, CPU and RSS (``process``)."""
        snap = dict(self._stats)
        mine = self.counters.snapshot()
        counters = {**snap.get("counters", {})}
        for k, v in mine.items():
            counters[k] = counters.get(k, 0) + v
        pid = self.pid
        out: dict[str, Any] = {
            **NO_STATS,
            **snap,
            "running": self.running,
            "peer_id": self.info["peer_id"] if self.info else None,
            "inbox_len": len(self.inbox) + int(snap.get("inbox_len", 0)),
            "inbox_dropped": int(snap.get("inbox_dropped", 0)) + mine.get("inbox_dropped", 0),
            "outbox_dropped": int(snap.get("outbox_dropped", 0)) + mine.get("outbox_dropped", 0),
            "counters": counters,
            "process": {"pid": pid, "cpu_s": process_cpu_s(pid), "rss_mb": process_rss_mb(pid)},
            "uptime_s": time.time() - self._started_at if self._started_at else 0.0,
        }
        return cast(TransportStats, out)

    async def stop(self) -> None:
        """Stop the child (bounded by ``shutdown_timeout_s`` + ``STOP_MARGIN_S``, then
        killed). Raises TransportError if it had failed."""
        await self._shutdown()
        if self._failure is not None:
            raise TransportError(f"network process failed: {self._failure}")

    async def _shutdown(self) -> None:
        proc = self._proc
        if proc is None:
            return
        self._stopping = True
        if taken := self.verdicts.take():
            self._send("verdicts", items=taken)
        self._send("stop")
        timeout = self.cfg.shutdown_timeout_s + STOP_MARGIN_S
        if self._bye is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._bye.wait(), timeout)
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(None, proc.wait, STOP_MARGIN_S)
        except subprocess.TimeoutExpired:
            self.counters.add("stop_timeout")
            log.error("network process still alive after stop; killing it")
            proc.kill()
            await loop.run_in_executor(None, proc.wait, STOP_MARGIN_S)
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._writer is not None:
            self._writer.close()
        self._tasks, self._writer, self._ended = [], None, True


def stat_times(stat: Path) -> tuple[float, float, int] | None:
    """(user CPU seconds, system CPU seconds, minor page faults) in a /proc ``stat``
    file, a process's or a thread's (Linux), or None if it cannot be read (the
    process or thread ended)."""
    try:
        fields = stat.read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick, int(fields[7])


def stat_cpu_s(stat: Path) -> float | None:
    """CPU seconds (user + system) in a /proc ``stat`` file (``stat_times``), or None."""
    times = stat_times(stat)
    return None if times is None else times[0] + times[1]


def process_cpu_s(pid: int | None) -> float | None:
    """CPU seconds process ``pid`` has used (Linux), or None."""
    return None if pid is None else stat_cpu_s(Path(f"/proc/{pid}/stat"))


def process_rss_mb(pid: int | None) -> float | None:
    """Resident memory of process ``pid`` in MiB, as ``learn.metrics.rss_mb`` gives the
    node's own (Linux), or None."""
    if pid is None:
        return None
    try:
        pages = int(Path(f"/proc/{pid}/statm").read_text().split()[1])
    except (OSError, IndexError, ValueError):
        return None
    return round(pages * os.sysconf("SC_PAGE_SIZE") / 2**20, 1)


# -- the child ---------------------------------------------------------------------------


async def _serve(sock: socket.socket) -> int:
    """Run the host for the node at the other end of ``sock``; the exit code."""
    from swarmnode.p2p.netshare import batch_thread
    from swarmnode.p2p.transport import GossipTransport

    reader, writer = await asyncio.open_connection(sock=sock)

    def send(kind: str, **fields: Any) -> None:
        writer.write(encode_frame(kind, **fields))

    start = await asyncio.wait_for(read_frame(reader), 30.0)
    if start is None or start["t"] != "start":
        raise LinkError("the node did not send a start frame")
    logging.basicConfig(
        level=int(start["log_level"]),
        format="%(asctime)s %(levelname)s %(name)s [net]: %(message)s",
        datefmt="%H:%M:%S",
        stream=sys.stderr,
    )
    cfg = SwarmConfig.model_validate(start["cfg"])
    if cfg.batch_threads:  # the whole process: none of it is the trainer
        batch_thread()
    transport = GossipTransport(cfg, Path(start["data_dir"]), float(start["startup_timeout"]))
    try:
        await transport.start()
    except Exception as err:  # a key file, a PSK, the host: the node says why, one line
        send("fail", e=str(err) or repr(err))
        await writer.drain()
        return 1
    info = transport.info
    assert info is not None
    send("up", info={"peer_id": info.peer_id, "listen_addrs": info.listen_addrs})
    await writer.drain()

    async def forward() -> None:
        while transport.running:
            item = await transport.receive(0.5)
            n = 0
            while item is not None:
                send("msg", p=item.peer_id, d=item.payload, at=item.received_at)
                n += 1
                item = await transport.receive(0.0) if n < FORWARD_BATCH else None
            await writer.drain()

    async def report_stats() -> None:
        while True:
            send("stats", s=transport.stats())
            await writer.drain()
            await asyncio.sleep(STATS_S)

    async def commands() -> None:
        scores = transport.peer_scores
        while (frame := await read_frame(reader)) is not None:
            kind = frame["t"]
            if kind == "pub":
                try:
                    await transport.publish(frame["d"])
                except (TransportError, WireError) as err:
                    transport.counters.add("netproc.publish_failed")
                    log.warning("publish failed: %s", err)
            elif kind == "verdicts":
                for peer, verdict, n in frame["items"]:
                    scores.report(str(peer), str(verdict), int(n))
            elif kind == "stop":
                return
            else:
                raise LinkError(f"unknown frame {kind!r}")

    tasks = [asyncio.create_task(c) for c in (forward(), report_stats(), commands())]
    done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    failure = next((repr(t.exception()) for t in done if not t.cancelled() and t.exception()), "")
    if not transport.running and not failure:
        failure = "the libp2p thread ended (see the log above)"
    try:
        await transport.stop()
    except TransportError as err:
        failure = failure or str(err)
    send("stats", s=transport.stats())
    with contextlib.suppress(ConnectionError):
        send("bye", e=failure)
        await asyncio.wait_for(writer.drain(), 5.0)
    return 1 if failure else 0


def main(argv: list[str] | None = None) -> None:
    """``python -m swarmnode.p2p.netproc FD``: serve the node at the other end of FD."""
    args = sys.argv[1:] if argv is None else argv
    # Ctrl-C reaches the whole process group, and a service manager may send SIGTERM
    # to every process of the node: the node stops its child itself, through the link.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    sock = socket.socket(fileno=int(args[0]))
    try:
        code = asyncio.run(_serve(sock))
    except BaseException as err:  # the child's top: say why on stderr, exit non-zero
        print(f"swarmnode network process: {err!r}", file=sys.stderr)
        code = 1
    sys.stderr.flush()
    # No interpreter finalization beside py-libp2p's leftover threads (see cli._end_process).
    os._exit(code)


if __name__ == "__main__":
    main()

"""Local control endpoint: a running node's status on a Unix socket, and its client.

Role: a running node (either role) serves its status as JSON on a Unix socket in
its data directory (``<data_dir>/control.sock``, mode 0600: only the owner can ask);
``swarmnode status`` / ``peers`` / ``id`` read it with ``query_status``. The
server gets the daemon's ``status`` method (an ``ops.status`` model) and sends its
``control_json``: ``{"pid", "time", "swarm": the transport's stats or null,
"node": the daemon's part}``.

Protocol: the client sends one line (``status``), the server answers one JSON
line and closes. Nothing but a fixed status view is reachable: no commands that
change the node.

Invariants:
- Loopback only by construction (a Unix socket; nothing listens on TCP).
- Every read and write on both sides has a timeout; requests are capped at
  ``MAX_REQUEST`` bytes.
- A failing status callback is logged and reported in the answer (``node_error``,
  with ``swarm`` null), never hidden and never fatal to the endpoint.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from swarmnode.errors import SwarmnodeError

if TYPE_CHECKING:
    from swarmnode.ops.status import DaemonStatus

log = logging.getLogger("swarmnode.ops.control")

SOCKET_NAME = "control.sock"
MAX_REQUEST = 256
IO_TIMEOUT = 5.0
MAX_REPLY = 16 * 1024 * 1024


class ControlError(SwarmnodeError):
    """The socket cannot be served (data_dir in use), or no running node answered."""


def socket_path(data_dir: Path) -> Path:
    return Path(data_dir) / SOCKET_NAME


class ControlServer:
    """Serves ``status_fn().control_json()`` (with the pid and the time) on the socket."""

    def __init__(self, data_dir: Path, status_fn: Callable[[], DaemonStatus]) -> None:
        self.path = socket_path(data_dir)
        self.status_fn = status_fn
        self._server: asyncio.AbstractServer | None = None

    def status(self) -> dict[str, Any]:
        out: dict[str, Any] = {"pid": os.getpid(), "time": time.time()}
        try:
            out.update(self.status_fn().control_json())
        except Exception as err:  # the node's callback: report, don't kill the endpoint
            log.exception("node status callback failed")
            out["swarm"] = None
            out["node_error"] = f"{err.__class__.__name__}: {err}"
        return out

    async def start(self) -> None:
        if len(os.fsencode(self.path)) >= 100:
            raise ControlError(f"{self.path}: too long for a Unix socket; use a shorter data_dir")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self.path.exists():
            if _answers(self.path):
                raise ControlError(f"{self.path}: another node is running on this data_dir")
            self.path.unlink()  # stale socket from a crashed run
        self._server = await asyncio.start_unix_server(
            self._handle, path=str(self.path), limit=MAX_REQUEST
        )
        os.chmod(self.path, 0o600)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._server.wait_closed(), IO_TIMEOUT)
            self._server = None
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            line = await asyncio.wait_for(reader.readline(), IO_TIMEOUT)
            if line.strip() == b"status":
                reply: dict[str, Any] = self.status()
            else:
                reply = {"error": "unknown request; send 'status'"}
            writer.write(json.dumps(reply, default=str).encode() + b"\n")
            await asyncio.wait_for(writer.drain(), IO_TIMEOUT)
        except (TimeoutError, ConnectionError, ValueError) as err:
            log.warning("control request failed: %s", err.__class__.__name__)
        finally:
            writer.close()
            with contextlib.suppress(TimeoutError, ConnectionError):
                await asyncio.wait_for(writer.wait_closed(), IO_TIMEOUT)


def _answers(path: Path) -> bool:
    try:
        query_status(path.parent, timeout=1.0)
    except ControlError:
        return False
    return True


def query_status(data_dir: Path, timeout: float = IO_TIMEOUT) -> dict[str, Any]:
    """Ask the node running on ``data_dir`` for its status (blocking, with a timeout)."""
    path = socket_path(data_dir)
    if not path.exists():
        raise ControlError(f"no node running on {data_dir} (no {SOCKET_NAME})")
    deadline = time.monotonic() + timeout
    chunks: list[bytes] = []
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(timeout)
            s.connect(str(path))
            s.sendall(b"status\n")
            size = 0
            while time.monotonic() < deadline:
                s.settimeout(max(0.01, deadline - time.monotonic()))
                chunk = s.recv(65536)
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
                if size > MAX_REPLY:
                    raise ControlError("status reply too large")
            else:
                raise ControlError(f"node did not answer within {timeout}s")
    except TimeoutError:
        raise ControlError(f"node did not answer within {timeout}s") from None
    except OSError as err:
        raise ControlError(f"cannot reach node on {path}: {err.strerror or err}") from None
    try:
        reply = json.loads(b"".join(chunks))
    except ValueError:
        raise ControlError("node sent a malformed status reply") from None
    if not isinstance(reply, dict):
        raise ControlError("node sent a malformed status reply")
    return reply

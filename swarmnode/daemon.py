"""The one lifecycle runner of both daemon roles (trainer ``Node``, ``BootstrapNode``).

Role: run a daemon's ``run()`` on an event loop (uvloop when installed) with
SIGINT/SIGTERM wired to its ``stop`` event.

Invariants:
- A signal only sets ``stop``: the daemon's loop notices it within its own poll
  interval and shuts down in its ``finally`` (each step with a timeout); a second
  signal while stopping is ignored rather than interrupting the shutdown.
- Errors are not handled here: they propagate to the caller (``cli.start`` prints a
  ``SwarmnodeError`` as one line with its exit code).
"""

from __future__ import annotations

import asyncio
import logging
import signal
import threading
from typing import Protocol

log = logging.getLogger("swarmnode.daemon")


class Daemon(Protocol):
    stop: threading.Event  # set to stop; worker threads poll it too

    async def run(self) -> None: ...


def _runner() -> asyncio.Runner:
    try:
        import uvloop

        return asyncio.Runner(loop_factory=uvloop.new_event_loop)
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux/macOS
        return asyncio.Runner()


async def _main(daemon: Daemon) -> None:
    loop = asyncio.get_running_loop()

    def on_signal(sig: int) -> None:
        if not daemon.stop.is_set():
            log.warning("%s received: stopping", signal.Signals(sig).name)
            daemon.stop.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, on_signal, sig)
    await daemon.run()


def run_daemon(daemon: Daemon) -> None:
    """Run ``daemon`` until it returns (stopped, or done); its errors propagate."""
    with _runner() as runner:
        runner.run(_main(daemon))

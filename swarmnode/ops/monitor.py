"""The node's HTTP monitor: Prometheus ``/metrics`` and a live, read-only dashboard.

Role: one aiohttp server on the daemon's own event loop (no second loop, no thread)
serving, for GET only:

- ``/metrics``: the Prometheus text format, made by ``prometheus_client`` from a
  registry of this daemon alone (``monitor_view.ViewCollector``) plus the standard
  process metrics;
- ``/``, ``/static/<file>``: the dashboard, files shipped in the package
  (``swarmnode/ops/dashboard``), so it works with no outside network;
- ``/api/state``: the JSON the page polls (the status model's ``view_json``).

Both read one callable the daemon hands over, its ``status`` (an ``ops.status``
model), so ``/metrics`` and the page never disagree and nothing here knows a daemon.

Invariants:
- Read-only: only GET routes exist; nothing reachable changes the node.
- Loopback unless ``monitor.allow_public`` (refused at config load otherwise); a
  public listen address is logged as a warning.
- Pages carry ``Content-Security-Policy: default-src 'self'``: the browser itself
  refuses anything the page might try to load from elsewhere.
- A port that cannot be bound is a ``MonitorError`` (one line, exit 2) at start-up.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable
from importlib import resources
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, ProcessCollector
from prometheus_client.exposition import generate_latest

from swarmnode.config import MonitorConfig
from swarmnode.errors import SwarmnodeError
from swarmnode.ops.monitor_view import ViewCollector
from swarmnode.ops.status import DaemonStatus

log = logging.getLogger("swarmnode.ops.monitor")

STATIC = {  # file -> content type: the whole dashboard
    "index.html": "text/html",
    "dashboard.js": "text/javascript",
    "dashboard.css": "text/css",
}
HEADERS = {
    "Content-Security-Policy": "default-src 'self'",
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-store",
}
SHUTDOWN_S = 5.0

StatusFn = Callable[[], DaemonStatus]


class MonitorError(SwarmnodeError):
    """The monitor cannot serve (its address is in use or not available)."""

    label = "monitor"


def dashboard_file(name: str) -> bytes:
    return (resources.files("swarmnode.ops") / "dashboard" / name).read_bytes()


def finite(value: Any) -> Any:
    """``value`` with NaN and infinities as None (JSON has neither; a diverged loss is NaN).

    >>> finite({"loss": float("nan"), "r": [1.5, float("inf")]})
    {'loss': None, 'r': [1.5, None]}
    """
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite(v) for v in value]
    return value


class MonitorServer:
    """Serves one daemon's status (``status_fn``) on ``cfg.listen``."""

    def __init__(self, cfg: MonitorConfig, status_fn: StatusFn) -> None:
        self.cfg = cfg
        self.status_fn = status_fn
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(ViewCollector(status_fn))
        ProcessCollector(registry=self.registry)
        self._runner: web.AppRunner | None = None
        self.port = 0  # the bound port, once started

    @property
    def url(self) -> str:
        host = self.cfg.host_port()[0]
        return f"http://{f'[{host}]' if ':' in host else host}:{self.port}/"

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/", self._page)
        app.router.add_get("/static/{name}", self._static)
        app.router.add_get("/api/state", self._state)
        app.router.add_get("/metrics", self._metrics)
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=SHUTDOWN_S)
        await runner.setup()
        host, port = self.cfg.host_port()
        site = web.TCPSite(runner, host, port)
        try:
            await site.start()
        except OSError as err:
            await runner.cleanup()
            raise MonitorError(f"cannot listen on {self.cfg.listen}: {err.strerror}") from None
        self._runner = runner
        self.port = runner.addresses[0][1]  # the bound one, also when port 0 was asked
        if not self.cfg.is_loopback():
            log.warning(
                "monitor listens on %s, beyond this machine (monitor.allow_public): anyone "
                "who reaches it sees this node's figures and its peers' ids",
                self.cfg.listen,
            )
        log.info("dashboard and /metrics at %s", self.url)

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    # -- handlers (GET only) -----------------------------------------------------

    async def _page(self, request: web.Request) -> web.Response:
        return self._file("index.html")

    async def _static(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        if name not in STATIC or name == "index.html":
            raise web.HTTPNotFound()
        return self._file(name)

    def _file(self, name: str) -> web.Response:
        return web.Response(
            body=dashboard_file(name), content_type=STATIC[name], charset="utf-8", headers=HEADERS
        )

    async def _state(self, request: web.Request) -> web.Response:
        view = finite(self.status_fn().view_json())
        body = json.dumps(view, separators=(",", ":"), allow_nan=False)
        return web.Response(text=body, content_type="application/json", headers=HEADERS)

    async def _metrics(self, request: web.Request) -> web.Response:
        return web.Response(
            body=generate_latest(self.registry), headers={"Content-Type": CONTENT_TYPE_LATEST}
        )


async def start_monitor(cfg: MonitorConfig, status_fn: StatusFn) -> MonitorServer | None:
    """A started monitor when ``cfg.enabled``, else None."""
    if not cfg.enabled:
        return None
    server = MonitorServer(cfg, status_fn)
    await server.start()
    return server

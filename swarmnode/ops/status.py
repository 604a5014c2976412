"""The typed status of each daemon role: built by the daemon, rendered by every view.

Role: ``TrainerStatus`` (``node.Node.status``) and ``BootstrapStatus``
(``bootstrap.BootstrapNode.status``) are what a running daemon says about itself.
Each daemon builds its own in that one method, from what its parts publish (the
exchange's ``ExchangeStatus``, the transport's ``TransportStats``, its
``RoundHistory``), and hands the method, never itself, to the control socket and the
monitor. The views render the model:

- ``control_json``: the control socket's reply (``{"swarm": ..., "node": ...}``,
  read by ``swarmnode status --json`` and the scripts that poll a node);
- ``view_json``: the dashboard's ``/api/state``; ``monitor_view.ViewCollector``
  reads the model itself for ``/metrics``;
- ``ControlReply.from_json``: a control reply read back for ``swarmnode status`` /
  ``peers`` (``report``), each field an older or partial reply lacks at its default.

Invariants:
- Plain data: nothing here reads a daemon or changes one, and the renderings are
  JSON-able (NaN aside: the monitor maps it to null).
- Imports neither daemon nor the monitor: the daemons import this module, never the
  reverse, so the operator's side has no import circle.
- ``RoundHistory`` is bounded: the last ``HISTORY`` rounds' curve fields; its totals
  are sums since the process started, so they only go up (Prometheus counters).
"""

from __future__ import annotations

import dataclasses
from collections import Counter, deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, cast

from swarmnode.learn.metrics import RoundRecord
from swarmnode.share.exchange import ExchangeStatus, IngestFigures
from swarmnode.share.transport import NO_STATS, TransportStats

HISTORY = 500  # rounds kept for the dashboard's curves
CURVE_FIELDS = (
    "round",
    "time",
    "reward_mean",
    "accuracy",
    "format_reward",
    "gen_seconds",
    "train_seconds",
    "tokens_generated",
    "tokens_trained",
    "local_groups",
    "external_groups",
    "groups_skipped",
    "completed_groups",
    "queue_groups",
    "queue_bytes",
    "peers",
    "mesh",
    "rss_mb",
)
TOTALS = {  # total's name -> the round record's field it sums
    "tokens_generated": "tokens_generated",
    "tokens_trained": "tokens_trained",
    "gen_seconds": "gen_seconds",
    "train_seconds": "train_seconds",
    "groups_local": "local_groups",
    "groups_external": "external_groups",
    "groups_skipped": "groups_skipped",
    "groups_completed": "completed_groups",
}


class RoundHistory:
    """The last ``HISTORY`` round records (their curve fields) and the totals since start."""

    def __init__(self) -> None:
        # CURVE_FIELDS' values only: a whole record is ~4x larger (a soak's RSS trend)
        self.rounds: deque[tuple[Any, ...]] = deque(maxlen=HISTORY)
        self.totals: Counter[str] = Counter()

    def add(self, rec: RoundRecord) -> None:
        self.rounds.append(tuple(getattr(rec, k) for k in CURVE_FIELDS))
        self.totals["rounds"] += 1
        for name, attr in TOTALS.items():
            self.totals[name] += getattr(rec, attr)

    def curves(self) -> list[dict[str, Any]]:
        return [dict(zip(CURVE_FIELDS, r, strict=True)) for r in self.rounds]


def _known(cls: type, data: Mapping[str, Any], *skip: str) -> dict[str, Any]:
    """The items of ``data`` that are fields of the dataclass ``cls``, less ``skip``."""
    names = {f.name for f in dataclasses.fields(cls)} - set(skip)
    return {k: v for k, v in data.items() if k in names}


def stats_from_json(data: Mapping[str, Any]) -> TransportStats:
    """A transport's stats from a reply: the keys it lacks at ``NO_STATS``."""
    return cast(TransportStats, {**NO_STATS, **data})


def network_view(net: TransportStats) -> dict[str, Any]:
    """The network figures the dashboard shows."""
    keep = ("peer_id", "num_peers", "mesh_size", "msgs_in", "msgs_out", "rejected")
    return {k: net.get(k) for k in keep} | {
        "inbox_dropped": net.get("inbox_dropped", 0),
        "net_share": (net.get("reading") or {}).get("net_share"),
    }


@dataclass(frozen=True)
class SapoSummary:
    """How the node composes its updates (``sapo``)."""

    mode: str = "uniform"
    local_groups: int | None = None  # I (None: every group of the round)
    external_groups: int = 0  # J


@dataclass(frozen=True)
class History:
    """The dashboard's part of a trainer's status (the monitor asks for it)."""

    rounds: list[dict[str, Any]]  # RoundHistory.curves
    peers: list[dict[str, Any]]  # the swarm view from gossip (swarmview.PeerBook)


@dataclass(frozen=True)
class TrainerStatus:
    """A trainer node: its rounds, whom it trained on, its network side."""

    role: ClassVar[str] = "trainer"
    name: str = ""
    state: str = "-"  # starting, loading, training, stopping
    round: int = 0  # the last finished round
    max_rounds: int | None = None
    model: str = ""
    swarm: str | None = None  # the swarm's name; None: the node trains alone
    sapo: SapoSummary = SapoSummary()
    last_round: RoundRecord | None = None
    trained_from: dict[str, int] = field(default_factory=dict)  # peer -> groups trained on
    trained_from_forgotten: int = 0  # peers dropped from trained_from (its bound)
    peer_trust: dict[str, float] | None = None  # sapo.mode adaptive only
    peer_trust_forgotten: int = 0  # peers dropped from peer_trust (its bound)
    exchange: ExchangeStatus | None = None  # None: the node trains alone
    totals: dict[str, float] = field(default_factory=dict)  # RoundHistory.totals
    rss_mb: float = 0.0
    gc: dict[str, Any] = field(default_factory=dict)  # ops.gcclock.GcClock.snapshot
    checkpoint_age_s: float | None = None  # None: no checkpoint yet
    now: float = 0.0  # unix seconds when built
    history: History | None = None  # the dashboard's curves and swarm view

    @property
    def network(self) -> TransportStats | None:
        return None if self.exchange is None else self.exchange.network

    def control_json(self) -> dict[str, Any]:
        """The control socket's reply body."""
        node: dict[str, Any] = {
            "role": self.role,
            "name": self.name,
            "state": self.state,
            "round": self.round,
            "max_rounds": self.max_rounds,
            "last_round": None if self.last_round is None else self.last_round.to_json(),
            "trained_from": self.trained_from,
            "trained_from_forgotten": self.trained_from_forgotten,
            "sapo": dataclasses.asdict(self.sapo),
            "gc": self.gc,
        }
        if self.exchange is not None:
            node.update(self.exchange.to_json())
        if self.peer_trust is not None:
            node["peer_trust"] = self.peer_trust
            node["peer_trust_forgotten"] = self.peer_trust_forgotten
        return {"swarm": self.network, "node": node}

    def view_json(self) -> dict[str, Any]:
        """The dashboard's ``/api/state``."""
        ex, hist = self.exchange, self.history
        return {
            "role": self.role,
            "name": self.name,
            "model": self.model,
            "swarm": self.swarm,
            "state": self.state,
            "round": self.round,
            "max_rounds": self.max_rounds,
            "now": self.now,
            "rss_mb": self.rss_mb,
            "checkpoint_age_s": self.checkpoint_age_s,
            "last_round": None if self.last_round is None else self.last_round.to_json(),
            "rounds": [] if hist is None else hist.rounds,
            "totals": self.totals,
            "trained_from": self.trained_from,
            "network": {} if ex is None else network_view(ex.network),
            "ingest": {} if ex is None else dataclasses.asdict(ex.ingest),
            "peers": [] if hist is None else hist.peers,
        }

    @classmethod
    def from_control(cls, node: Mapping[str, Any], swarm: TransportStats | None) -> TrainerStatus:
        """The status a control reply's ``node`` (and ``swarm``) part describes."""
        exchange = None
        if any(k in node for k in ("ingest", "swarm_failure", "published")):
            exchange = ExchangeStatus(
                network=swarm or NO_STATS,
                ingest=IngestFigures(**_known(IngestFigures, node.get("ingest") or {})),
                **_known(ExchangeStatus, node, "network", "ingest"),
            )
        last = node.get("last_round")
        return cls(
            **_known(cls, node, "sapo", "last_round", "exchange", "history"),
            sapo=SapoSummary(**_known(SapoSummary, node.get("sapo") or {})),
            last_round=RoundRecord.from_json(last) if last else None,
            exchange=exchange,
        )


@dataclass(frozen=True)
class BootstrapStatus:
    """A bootstrap node: it routes gossip and serves the DHT; its network is all of it."""

    role: ClassVar[str] = "bootstrap"
    name: str = ""
    state: str = "-"  # starting, routing, stopping
    swarm: str | None = None  # the swarm's name
    network: TransportStats = field(default_factory=lambda: stats_from_json({}))
    rss_mb: float = 0.0
    now: float = 0.0  # unix seconds when built

    def control_json(self) -> dict[str, Any]:
        """The control socket's reply body."""
        node = {"role": self.role, "name": self.name, "state": self.state}
        return {"swarm": self.network, "node": node}

    def view_json(self) -> dict[str, Any]:
        """The dashboard's ``/api/state``."""
        return {
            "role": self.role,
            "name": self.name,
            "swarm": self.swarm,
            "state": self.state,
            "now": self.now,
            "rss_mb": self.rss_mb,
            "network": network_view(self.network),
        }

    @classmethod
    def from_control(cls, node: Mapping[str, Any], swarm: TransportStats | None) -> BootstrapStatus:
        return cls(**_known(cls, node, "network"), network=swarm or NO_STATS)


DaemonStatus = TrainerStatus | BootstrapStatus


@dataclass(frozen=True)
class ControlReply:
    """A control socket reply, read back (``swarmnode status`` / ``peers``)."""

    pid: int | None = None
    swarm: TransportStats | None = None  # None: no transport (a node training alone)
    node: DaemonStatus | None = None  # None: the reply had no node part
    node_error: str | None = None  # the daemon's status failed: why

    @classmethod
    def from_json(cls, reply: Mapping[str, Any]) -> ControlReply:
        """Tolerant of missing keys: an older node, a bootstrap node or one still
        loading answers with fewer fields."""
        swarm = stats_from_json(reply["swarm"]) if reply.get("swarm") else None
        raw = reply.get("node") or None
        node: DaemonStatus | None = None
        if raw is not None:
            kind = BootstrapStatus if raw.get("role") == BootstrapStatus.role else TrainerStatus
            node = kind.from_control(raw, swarm)
        return cls(reply.get("pid"), swarm, node, reply.get("node_error"))

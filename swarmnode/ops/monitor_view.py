"""What the monitor shows: one JSON-able view of a daemon, and its Prometheus metrics.

Role: ``node_view`` / ``bootstrap_view`` read a running daemon into one dict (the
dashboard's ``/api/state``); ``ViewCollector`` turns that same dict into Prometheus
metric families at scrape time, so ``/metrics`` and the page never disagree.
``RoundHistory`` keeps the node's recent rounds and its running totals.

Invariants:
- Read-only: nothing here changes the node; every read is of figures the node
  already keeps (round records, the exchange's and the transport's status).
- Bounded: the history holds the last ``HISTORY`` rounds; totals are sums since the
  process started, so every ``_total`` counter only goes up (a restart resets them,
  which Prometheus' ``rate`` understands).
- Names follow Prometheus' conventions: ``swarmnode_`` prefix, ``_total`` counters,
  base units (``_seconds``, ``_bytes``), reasons and kinds as labels.
"""

from __future__ import annotations

import time
from collections import Counter, deque
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from swarmnode.learn.metrics import RoundRecord, rss_mb

if TYPE_CHECKING:
    from swarmnode.bootstrap import BootstrapNode
    from swarmnode.node import Node

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
TOTALS = {  # counter name -> the round record's field it sums
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
    """The last ``HISTORY`` round records and the totals since start."""

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


def _network(transport: Any) -> dict[str, Any]:
    if transport is None:
        return {}
    st = transport.stats()
    keep = ("peer_id", "num_peers", "mesh_size", "msgs_in", "msgs_out", "rejected")
    return {k: st.get(k) for k in keep} | {
        "inbox_dropped": st.get("inbox_dropped", 0),
        "net_share": (st.get("reading") or {}).get("net_share"),
    }


def _checkpoint_age(node: Node) -> float | None:
    from swarmnode.learn.checkpoint import Checkpointer  # imports torch: never for a bootstrap node

    found = Checkpointer(node.data_dir / "checkpoints").checkpoints()
    return round(time.time() - found[0][1].stat().st_mtime, 1) if found else None


def node_view(node: Node) -> dict[str, Any]:
    """A trainer node: its rounds, totals, ingestion, network and the swarm it hears."""
    last = node.last
    view: dict[str, Any] = {
        "role": "trainer",
        "name": node.cfg.node.name,
        "model": node.cfg.model.name,
        "swarm": node.cfg.swarm.name if node.transport is not None else None,
        "state": node.state,
        "round": node.round,
        "max_rounds": node.cfg.node.max_rounds,
        "now": time.time(),
        "rss_mb": rss_mb(),
        "checkpoint_age_s": _checkpoint_age(node),
        "last_round": None if last is None else last.to_json(),
        "rounds": node.history.curves(),
        "totals": dict(node.history.totals),
        "trained_from": dict(node.trained_from),
        "network": _network(node.transport),
        "ingest": {},
        "peers": [],
    }
    if node.exchange is not None:
        view["ingest"] = node.exchange.queue.report() | node.exchange.guard.report()
        view["peers"] = node.exchange.peers.snapshot(node.trained_from)
    return view


def bootstrap_view(node: BootstrapNode) -> dict[str, Any]:
    """A bootstrap node: the network part only."""
    return {
        "role": "bootstrap",
        "name": node.cfg.node.name,
        "swarm": node.cfg.swarm.name,
        "state": node.state,
        "now": time.time(),
        "rss_mb": rss_mb(),
        "network": _network(node.transport),
    }


def _gauge(name: str, doc: str, value: float | None) -> Iterator[Metric]:
    if value is not None:
        yield GaugeMetricFamily(name, doc, value=value)


def _counter(name: str, doc: str, value: float) -> Metric:
    return CounterMetricFamily(name, doc, value=value)


def _by_label(name: str, doc: str, label: str, values: dict[str, int]) -> Metric:
    fam = CounterMetricFamily(name, doc, labels=[label])
    for key, n in sorted(values.items()):
        fam.add_metric([key], n)
    return fam


class ViewCollector(Collector):
    """Prometheus metrics from a view function (``node_view`` or ``bootstrap_view``)."""

    def __init__(self, view_fn: Any) -> None:
        self.view_fn = view_fn

    def collect(self) -> Iterator[Metric]:
        v = self.view_fn()
        info = GaugeMetricFamily(
            "swarmnode_info", "The daemon's role, name and swarm.", labels=["role", "name", "swarm"]
        )
        info.add_metric([v["role"], v["name"], v.get("swarm") or ""], 1)
        yield info
        yield from _gauge(
            "swarmnode_resident_memory_bytes", "Resident memory.", v["rss_mb"] * 2**20
        )
        net = v.get("network") or {}
        if net:
            yield from self._network(net)
        if v["role"] == "trainer":
            yield from self._trainer(v)

    def _network(self, net: dict[str, Any]) -> Iterator[Metric]:
        yield GaugeMetricFamily("swarmnode_peers", "Connected peers.", value=net["num_peers"] or 0)
        yield GaugeMetricFamily(
            "swarmnode_mesh_peers", "Gossipsub mesh size.", value=net["mesh_size"] or 0
        )
        yield _counter("swarmnode_messages_received", "Messages received.", net["msgs_in"] or 0)
        yield _counter("swarmnode_messages_published", "Messages published.", net["msgs_out"] or 0)
        yield _by_label(
            "swarmnode_messages_rejected",
            "Messages the topic validator rejected, by reason.",
            "reason",
            net.get("rejected") or {},
        )
        yield _counter(
            "swarmnode_inbox_dropped", "Messages dropped from a full inbox.", net["inbox_dropped"]
        )
        yield from _gauge(
            "swarmnode_net_cpu_share",
            "Share of a core spent outside training (capped: swarm.max_net_share).",
            net["net_share"],
        )

    def _trainer(self, v: dict[str, Any]) -> Iterator[Metric]:
        yield GaugeMetricFamily("swarmnode_round", "Last finished round.", value=v["round"])
        yield from _gauge(
            "swarmnode_checkpoint_age_seconds",
            "Age of the newest checkpoint.",
            v["checkpoint_age_s"],
        )
        totals = v["totals"]
        yield _counter("swarmnode_rounds", "Rounds finished since start.", totals.get("rounds", 0))
        for what in ("generated", "trained"):
            yield _counter(
                f"swarmnode_tokens_{what}",
                f"Tokens {what} since start.",
                totals.get(f"tokens_{what}", 0),
            )
        yield _counter(
            "swarmnode_generation_seconds", "Time generating.", totals.get("gen_seconds", 0)
        )
        yield _counter(
            "swarmnode_train_seconds",
            "Time composing and training.",
            totals.get("train_seconds", 0),
        )
        groups = CounterMetricFamily(
            "swarmnode_groups", "Groups since start, by kind.", labels=["kind"]
        )
        for kind in ("local", "external", "skipped", "completed"):
            groups.add_metric([kind], totals.get(f"groups_{kind}", 0))
        yield groups
        last = v["last_round"]
        if last is not None:
            yield from self._last_round(last)
        ingest = v["ingest"]
        if ingest:
            yield GaugeMetricFamily(
                "swarmnode_queue_groups", "Peers' groups waiting.", value=ingest["queue_groups"]
            )
            yield GaugeMetricFamily(
                "swarmnode_queue_bytes", "Size of the waiting groups.", value=ingest["queue_bytes"]
            )
            yield _counter(
                "swarmnode_ingest_accepted_groups",
                "Peers' groups accepted.",
                ingest["ingest_accepted"],
            )
            yield _by_label(
                "swarmnode_ingest_rejected_groups",
                "Peers' groups rejected, by reason.",
                "reason",
                ingest["ingest_rejected"],
            )
            yield GaugeMetricFamily(
                "swarmnode_ingest_time_share",
                "Share of time verifying peers' groups.",
                value=ingest["ingest_time_share"],
            )

    def _last_round(self, last: dict[str, Any]) -> Iterator[Metric]:
        gauges = {
            "reward_mean": "Mean reward of the last round's own rollouts.",
            "accuracy": "Task score of the last round's own rollouts.",
            "format_reward": "Format reward of the last round's own rollouts.",
        }
        for key, doc in gauges.items():
            yield GaugeMetricFamily(f"swarmnode_{key}", doc, value=last[key])
        gen, train = last["gen_seconds"], last["train_seconds"]
        yield GaugeMetricFamily(
            "swarmnode_round_generation_seconds", "Last round's generation time.", value=gen
        )
        yield GaugeMetricFamily(
            "swarmnode_round_train_seconds", "Last round's training time.", value=train
        )
        yield GaugeMetricFamily(
            "swarmnode_tokens_generated_per_second",
            "Last round's generation speed.",
            value=last["tokens_generated"] / gen if gen > 0 else 0.0,
        )
        yield GaugeMetricFamily(
            "swarmnode_tokens_trained_per_second",
            "Last round's training speed.",
            value=last["tokens_trained"] / train if train > 0 else 0.0,
        )

"""What ``/metrics`` shows: a daemon's status model as Prometheus metric families.

Role: ``ViewCollector`` reads the daemon's status (``ops.status``: the same model
the dashboard's ``/api/state`` renders) at scrape time and turns it into metric
families, so ``/metrics`` and the page never disagree.

Invariants:
- Read-only: it calls the status callable it was given, nothing else; it knows no
  daemon.
- Counters come from the status' totals since the process started, so every
  ``_total`` counter only goes up (a restart resets them, which Prometheus' ``rate``
  understands).
- Names follow Prometheus' conventions: ``swarmnode_`` prefix, ``_total`` counters,
  base units (``_seconds``, ``_bytes``), reasons and kinds as labels.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from swarmnode.learn.metrics import RoundRecord
from swarmnode.ops.status import DaemonStatus, TrainerStatus
from swarmnode.share.exchange import IngestFigures
from swarmnode.share.transport import TransportStats


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
    """Prometheus metrics from a daemon's status callable."""

    def __init__(self, status_fn: Callable[[], DaemonStatus]) -> None:
        self.status_fn = status_fn

    def collect(self) -> Iterator[Metric]:
        st = self.status_fn()
        info = GaugeMetricFamily(
            "swarmnode_info", "The daemon's role, name and swarm.", labels=["role", "name", "swarm"]
        )
        info.add_metric([st.role, st.name, st.swarm or ""], 1)
        yield info
        yield from _gauge("swarmnode_resident_memory_bytes", "Resident memory.", st.rss_mb * 2**20)
        if st.network is not None:
            yield from self._network(st.network)
        if isinstance(st, TrainerStatus):
            yield from self._trainer(st)

    def _network(self, net: TransportStats) -> Iterator[Metric]:
        yield GaugeMetricFamily("swarmnode_peers", "Connected peers.", value=net["num_peers"])
        yield GaugeMetricFamily(
            "swarmnode_mesh_peers", "Gossipsub mesh size.", value=net["mesh_size"]
        )
        yield _counter("swarmnode_messages_received", "Messages received.", net["msgs_in"])
        yield _counter("swarmnode_messages_published", "Messages published.", net["msgs_out"])
        yield _by_label(
            "swarmnode_messages_rejected",
            "Messages the topic validator rejected, by reason.",
            "reason",
            net["rejected"],
        )
        yield _counter(
            "swarmnode_inbox_dropped", "Messages dropped from a full inbox.", net["inbox_dropped"]
        )
        yield from _gauge(
            "swarmnode_net_cpu_share",
            "Share of a core spent outside training (capped: swarm.max_net_share).",
            (net.get("reading") or {}).get("net_share"),
        )

    def _trainer(self, st: TrainerStatus) -> Iterator[Metric]:
        yield GaugeMetricFamily("swarmnode_round", "Last finished round.", value=st.round)
        yield from _gauge(
            "swarmnode_checkpoint_age_seconds",
            "Age of the newest checkpoint.",
            st.checkpoint_age_s,
        )
        totals = st.totals
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
        if st.gc:
            gc_cpu = CounterMetricFamily(
                "swarmnode_gc_cpu_seconds",
                "CPU the garbage collector used, by generation and thread (trainer or other).",
                labels=["generation", "thread"],
            )
            for gen, (trainer, other) in enumerate(
                zip(st.gc["trainer_cpu_s"], st.gc["other_cpu_s"], strict=True)
            ):
                gc_cpu.add_metric([str(gen), "trainer"], trainer)
                gc_cpu.add_metric([str(gen), "other"], other)
            yield gc_cpu
        groups = CounterMetricFamily(
            "swarmnode_groups", "Groups since start, by kind.", labels=["kind"]
        )
        for kind in ("local", "external", "skipped", "completed"):
            groups.add_metric([kind], totals.get(f"groups_{kind}", 0))
        yield groups
        if st.last_round is not None:
            yield from self._last_round(st.last_round)
        if st.exchange is not None:
            yield from self._ingest(st.exchange.ingest)

    def _ingest(self, ingest: IngestFigures) -> Iterator[Metric]:
        yield GaugeMetricFamily(
            "swarmnode_queue_groups", "Peers' groups waiting.", value=ingest.queue_groups
        )
        yield GaugeMetricFamily(
            "swarmnode_queue_bytes", "Size of the waiting groups.", value=ingest.queue_bytes
        )
        yield _counter(
            "swarmnode_ingest_accepted_groups", "Peers' groups accepted.", ingest.ingest_accepted
        )
        yield _by_label(
            "swarmnode_ingest_rejected_groups",
            "Peers' groups rejected, by reason.",
            "reason",
            ingest.ingest_rejected,
        )
        yield GaugeMetricFamily(
            "swarmnode_ingest_time_share",
            "Share of time verifying peers' groups.",
            value=ingest.ingest_time_share,
        )

    def _last_round(self, last: RoundRecord) -> Iterator[Metric]:
        gauges = {
            "reward_mean": "Mean reward of the last round's own rollouts.",
            "accuracy": "Task score of the last round's own rollouts.",
            "format_reward": "Format reward of the last round's own rollouts.",
        }
        for key, doc in gauges.items():
            yield GaugeMetricFamily(f"swarmnode_{key}", doc, value=getattr(last, key))
        gen, train = last.gen_seconds, last.train_seconds
        yield GaugeMetricFamily(
            "swarmnode_round_generation_seconds", "Last round's generation time.", value=gen
        )
        yield GaugeMetricFamily(
            "swarmnode_round_train_seconds", "Last round's training time.", value=train
        )
        yield GaugeMetricFamily(
            "swarmnode_tokens_generated_per_second",
            "Last round's generation speed.",
            value=last.tokens_generated / gen if gen > 0 else 0.0,
        )
        yield GaugeMetricFamily(
            "swarmnode_tokens_trained_per_second",
            "Last round's training speed.",
            value=last.tokens_trained / train if train > 0 else 0.0,
        )

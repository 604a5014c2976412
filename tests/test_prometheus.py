"""The shipped Prometheus files (deploy/prometheus/) and a real Prometheus scraping a node.

Fast: ``promtool`` accepts the scrape config and the alerting rules, the rules' own unit
tests pass (``alerts_test.yml``: each alert fires on made-up series of its failure and
not on a healthy node), and every metric and label the rules name is in a real
``/metrics`` rendering of a node's collector (no network, no model).

Slow: Debian's ``prometheus`` (installed with apt-get when root, else skipped) scrapes a
``swarmnode start`` process on loopback with the shipped config and rules; its HTTP API
gives back ``up``, a rising ``swarmnode_round``, per-reason rejection counters from a
raw libp2p peer's bad messages, the rules evaluated, and ``SwarmnodeDown`` pending once
the node is stopped. Prometheus listens on 127.0.0.1, keeps its storage under the
test's temporary folder and is stopped in ``finally``; every wait has a deadline.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from swarmnode.config import parse_config
from swarmnode.learn.groups import ItemRef, RolloutGroup
from swarmnode.learn.metrics import RoundRecord
from swarmnode.learn.tasks import ref_config, regenerate
from swarmnode.node import Node
from swarmnode.ops.monitor import MonitorServer
from swarmnode.share.memory_transport import MemoryNetwork
from swarmnode.share.wire import encode_batch
from tests.helpers import (
    REPO,
    Proc,
    batch,
    free_port,
    kill_live,
    make_group,
    node_config,
    raw_peer,
    tiny_config,
    wait_until,
    write_config,
)

DEPLOY = REPO / "deploy" / "prometheus"
SCRAPE, ALERTS, ALERT_TESTS = (
    DEPLOY / "prometheus.yml",
    DEPLOY / "alerts.yml",
    DEPLOY / "alerts_test.yml",
)
TARGET_LABELS = {"job", "instance"}  # added by Prometheus, not by the node
APT_LOG = Path("/tmp/swarmnode-apt-prometheus.log")


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("promtool")
    if exe is None:
        pytest.skip(
            "no promtool on this machine (scripts/setup.sh --tests installs Debian's prometheus)"
        )
    return subprocess.run([exe, *args], capture_output=True, text=True, timeout=120)


def rules() -> list[dict[str, Any]]:
    doc = yaml.safe_load(ALERTS.read_text(encoding="utf-8"))
    return [rule for group in doc["groups"] for rule in group["rules"]]


def job_name() -> str:
    (job,) = yaml.safe_load(SCRAPE.read_text(encoding="utf-8"))["scrape_configs"]
    return str(job["job_name"])


def test_promtool_accepts_the_scrape_config_and_the_rules() -> None:
    for args in (("check", "config", str(SCRAPE)), ("check", "rules", str(ALERTS))):
        out = promtool(*args)
        assert out.returncode == 0, out.stdout + out.stderr
    assert f"SUCCESS: {len(rules())} rules found" in out.stdout


def test_alerts_fire_on_their_failure_and_not_on_a_healthy_node() -> None:
    out = promtool("test", "rules", str(ALERT_TESTS))
    assert out.returncode == 0, out.stdout + out.stderr
    names = {
        t["alertname"]
        for case in yaml.safe_load(ALERT_TESTS.read_text())["tests"]
        for t in case["alert_rule_test"]
    }
    assert names == {r["alert"] for r in rules()}  # every alert has its test


def rendered_metrics(tmp_path: Path) -> dict[str, dict[str, set[str]]]:
    """sample name -> label -> values, from the collector of a node built (not run) on
    an in-memory transport, after one round, one rejected message and one rejected group."""
    raw = tiny_config(
        tmp_path / "no-model",  # never loaded: the node does not run
        tmp_path / "data",
        swarm={"enabled": True},
        monitor={"enabled": True, "listen": "127.0.0.1:0"},
    )
    transport = MemoryNetwork().transport("A")
    node = Node(parse_config(raw), echo=False, transport=transport)
    rec = RoundRecord(round=1, local_groups=2, external_groups=1, rss_mb=1.0)
    node.history.add(rec)
    node.last, node.round = rec, 1
    transport.offer("X", b"\xc1 not msgpack")  # the gossip validator's path
    assert node.exchange is not None
    assert node.exchange.queue.offer("X", [make_group(3, created=time.time())]) == 0
    text = generate_latest(MonitorServer(node.cfg.monitor, node.status).registry)
    out: dict[str, dict[str, set[str]]] = {}
    for fam in text_string_to_metric_families(text.decode()):
        for s in fam.samples:
            labels = out.setdefault(s.name, {})
            for key, value in s.labels.items():
                labels.setdefault(key, set()).add(value)
    return out


SELECTOR = re.compile(r"\b([a-zA-Z_:][a-zA-Z0-9_:]*)\s*\{([^}]*)\}")
MATCHER = re.compile(r'(\w+)\s*(=~|!~|!=|=)\s*"([^"]*)"')
GROUPING = re.compile(r"\b(?:by|on|ignoring|without)\s*\(([^)]*)\)")


def test_rules_use_only_metrics_and_labels_the_node_exports(tmp_path: Path) -> None:
    exported = rendered_metrics(tmp_path)
    exported["up"] = {}  # Prometheus' own, per target
    job = job_name()
    used: set[str] = set()
    for rule in rules():
        expr = rule["expr"]
        names = set(re.findall(r"\b(?:swarmnode|process)_\w+", expr))
        names |= {"up"} if re.search(r"\bup\b", expr) else set()
        assert names, rule["alert"]
        assert names <= set(exported), (rule["alert"], names - set(exported))
        used |= names
        for name, body in SELECTOR.findall(expr):
            assert name in names, (rule["alert"], name)
            for label, op, value in MATCHER.findall(body):
                if label == "job":
                    assert (op, value) == ("=", job), rule["alert"]  # the shipped scrape job
                    continue
                assert label in exported[name], (rule["alert"], name, label)
                if op == "=" and value:
                    assert value in exported[name][label], (rule["alert"], name, label, value)
        labels = {lab for n in names for lab in exported[n]}
        for grouping in GROUPING.findall(expr):
            wanted = {g.strip() for g in grouping.split(",")} - TARGET_LABELS
            assert wanted <= labels, (rule["alert"], wanted - labels)
    # The per-reason counters are really rendered with their reason label.
    assert exported["swarmnode_messages_rejected_total"]["reason"] == {"msgpack"}
    assert exported["swarmnode_ingest_rejected_groups_total"]["reason"] == {"out_of_catalog"}
    assert {"swarmnode_rounds_total", "swarmnode_resident_memory_bytes"} <= used


# ---- a real Prometheus --------------------------------------------------------------


@pytest.fixture(scope="module")
def prometheus_exe() -> str:
    """Debian's prometheus: found, or installed with apt-get as root, or the test skips."""
    found = shutil.which("prometheus")
    if found:
        return found
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        pytest.skip("no prometheus and no root apt-get (scripts/setup.sh --tests installs it)")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    apt = ["apt-get", "-q", "-o", "DPkg::Lock::Timeout=120"]
    with APT_LOG.open("w") as log:
        try:
            for args in (["update"], ["install", "-y", "--no-install-recommends", "prometheus"]):
                done = subprocess.run(apt + args, stdout=log, stderr=log, env=env, timeout=900)
                if done.returncode != 0:
                    break
        except subprocess.TimeoutExpired:
            pytest.skip(f"apt-get install prometheus timed out (see {APT_LOG})")
    found = shutil.which("prometheus")
    if not found:
        pytest.skip(f"prometheus could not be installed with apt-get (see {APT_LOG})")
    return found


class PrometheusAPI:
    """The few calls of Prometheus' HTTP API the test reads (``/api/v1/...``)."""

    def __init__(self, base: str, proc: subprocess.Popen[bytes], log: Path) -> None:
        self.base, self.proc, self.log = base, proc, log

    def alive(self) -> None:
        assert self.proc.poll() is None, f"prometheus exited:\n{self.log.read_text()[-3000:]}"

    def ready(self) -> bool:
        self.alive()
        try:
            with urllib.request.urlopen(self.base + "/-/ready", timeout=5) as resp:
                return bool(resp.status == 200)
        except (urllib.error.URLError, ConnectionError):
            return False

    def get(self, path: str, **params: str) -> Any:
        self.alive()
        url = f"{self.base}{path}?{urllib.parse.urlencode(params)}"
        with urllib.request.urlopen(url, timeout=10) as resp:
            body = json.load(resp)
        assert body["status"] == "success", body
        return body["data"]

    def value(self, query: str) -> float | None:
        """An instant query's one value (None: no series yet)."""
        result = self.get("/api/v1/query", query=query)["result"]
        if not result:
            return None
        assert len(result) == 1, result
        return float(result[0]["value"][1])

    def at_least(self, query: str, n: float) -> bool:
        value = self.value(query)
        return value is not None and value >= n

    def stored(self, query: str) -> list[float]:
        """The stored samples of a range selector, oldest first."""
        (series,) = self.get("/api/v1/query", query=query)["result"]
        return [float(v) for _, v in series["values"]]

    def rules(self) -> dict[str, dict[str, Any]]:
        groups = self.get("/api/v1/rules")["groups"]
        return {r["name"]: r for g in groups for r in g["rules"]}

    def alerts(self) -> dict[str, str]:
        return {a["labels"]["alertname"]: a["state"] for a in self.get("/api/v1/alerts")["alerts"]}


def scrape_config(path: Path, target: str) -> Path:
    """The shipped prometheus.yml: ``target`` scraped every 2 s, the shipped rules every 1 s."""
    cfg = yaml.safe_load(SCRAPE.read_text(encoding="utf-8"))
    cfg["global"].update(scrape_interval="2s", scrape_timeout="2s", evaluation_interval="1s")
    cfg["rule_files"] = [str(ALERTS)]
    (job,) = cfg["scrape_configs"]
    job["static_configs"] = [{"targets": [target]}]
    path.write_text(yaml.safe_dump(cfg), encoding="utf-8")
    return path


def good_group(raw: dict[str, Any]) -> RolloutGroup:
    """A verifiable group from the node's own catalog: one right answer, one wrong."""
    spec = raw["tasks"]["datasets"][0]
    ref = ItemRef(spec["name"], ref_config(spec["config"], 100_000), 3, 17)
    entry = regenerate(ref)
    return RolloutGroup(
        ref,
        entry["question"],
        [f"<answer>{entry['answer']}</answer>", "<answer>-1</answer>"],
        [1.0, 0.0],
    )


@pytest.mark.slow
def test_prometheus_scrapes_a_running_node(
    prometheus_exe: str, tiny_model_dir: Path, tmp_path: Path
) -> None:
    monitor, web = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    config = node_config(tmp_path, "n", tiny_model_dir)
    raw = yaml.safe_load(config.read_text(encoding="utf-8"))
    raw["monitor"] = {"enabled": True, "listen": monitor}
    write_config(config, raw)
    sends = [
        (encode_batch("default", 9, [good_group(raw)]), True),  # verified, trained on
        (batch(3), True),  # a config this node does not build: ingest, out_of_catalog
        (batch(4), False),  # unsigned: the gossip validator, signature
        (b"\xc1 not msgpack", True),  # the gossip validator, msgpack
    ]
    log = tmp_path / "prometheus.log"
    node = Proc(config, tmp_path / "n")
    prom: subprocess.Popen[bytes] | None = None
    finished = threading.Event()
    sender: threading.Thread | None = None
    seen: dict[str, Any] = {}
    try:
        addr = node.addr()
        wait_until(lambda: node.node().get("state") == "training", "training")
        prom = subprocess.Popen(
            [
                prometheus_exe,
                f"--config.file={scrape_config(tmp_path / 'prometheus.yml', monitor)}",
                f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                f"--web.listen-address={web}",
            ],
            stdout=subprocess.DEVNULL,
            stderr=log.open("wb"),
        )
        api = PrometheusAPI(f"http://{web}", prom, log)
        wait_until(api.ready, "prometheus ready", 60)
        up = 'up{job="swarmnode"}'
        wait_until(lambda: api.value(up) == 1, "up = 1")
        seen["first_round"] = first = api.value("swarmnode_round")
        assert first is not None
        wait_until(lambda: api.at_least("swarmnode_round", first + 3), "swarmnode_round rising")

        sender = threading.Thread(target=raw_peer, args=(addr, sends, finished.is_set), daemon=True)
        sender.start()
        wanted = {
            'swarmnode_messages_rejected_total{reason="signature"}': 1,
            'swarmnode_messages_rejected_total{reason="msgpack"}': 1,
            'swarmnode_ingest_rejected_groups_total{reason="out_of_catalog"}': 1,
            "swarmnode_ingest_accepted_groups_total": 1,
            'swarmnode_groups_total{kind="external"}': 1,
        }
        for query, n in wanted.items():
            wait_until(partial(api.at_least, query, n), query)
            seen[query] = api.value(query)
        finished.set()

        # Every shipped rule loaded and evaluated without error; the node is not down.
        names = {r["alert"] for r in rules()}
        wait_until(
            lambda: (
                all(
                    r["health"] == "ok" and not r["lastEvaluation"].startswith("0001")
                    for r in api.rules().values()
                )
                and set(api.rules()) == names
            ),
            "every rule evaluated",
        )
        assert "SwarmnodeDown" not in api.alerts()
        seen["stored_rounds"] = rounds = api.stored("swarmnode_round[10m]")
        assert rounds == sorted(rounds) and rounds[-1] > rounds[0], rounds
        seen["series"] = sorted(
            {s["__name__"] for s in api.get("/api/v1/series", **{"match[]": '{job="swarmnode"}'})}
        )

        assert node.stop() == 0, node.log.read_text()[-3000:]
        wait_until(lambda: api.value(up) == 0, "up = 0 once the node stopped")
        wait_until(lambda: api.alerts().get("SwarmnodeDown") == "pending", "SwarmnodeDown pending")
        seen["alerts_after_stop"] = api.alerts()
    finally:
        finished.set()
        if sender is not None:
            sender.join(60)
        if prom is not None:
            prom.terminate()
            try:
                prom.wait(timeout=30)
            except subprocess.TimeoutExpired:
                prom.kill()
                prom.wait(timeout=30)
        kill_live()
    print("prometheus read back:", json.dumps(seen, sort_keys=True))
    swarmnode_series = [s for s in seen["series"] if s.startswith("swarmnode_")]
    assert "swarmnode_resident_memory_bytes" in swarmnode_series and "up" in seen["series"]

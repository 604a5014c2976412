"""The monitor of a running node: /metrics in the Prometheus format, the dashboard and its
JSON, a bootstrap node's network metrics, and a non-loopback address refused."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import shutil
import subprocess
import sys
from pathlib import Path

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from swarmnode.bootstrap import BootstrapNode
from swarmnode.config import ConfigError, MonitorConfig, parse_config
from swarmnode.node import Node
from swarmnode.ops.monitor import STATIC, MonitorServer, dashboard_file
from swarmnode.ops.status import BootstrapStatus
from swarmnode.share.memory_transport import MemoryNetwork
from tests.helpers import ENV, REPO, tiny_config, wait_for, write_config

MONITOR = {"enabled": True, "listen": "127.0.0.1:0"}
TRAINER_METRICS = {
    "swarmnode_round",
    "swarmnode_reward_mean",
    "swarmnode_accuracy",
    "swarmnode_format_reward",
    "swarmnode_tokens_generated_per_second",
    "swarmnode_tokens_trained_per_second",
    "swarmnode_round_generation_seconds",
    "swarmnode_round_train_seconds",
    "swarmnode_groups",  # counters: the parser drops _total from the family name
    "swarmnode_tokens_generated",
    "swarmnode_tokens_trained",
    "swarmnode_queue_groups",
    "swarmnode_queue_bytes",
    "swarmnode_ingest_accepted_groups",
    "swarmnode_ingest_rejected_groups",
    "swarmnode_checkpoint_age_seconds",
    "swarmnode_gc_cpu_seconds",
}
NETWORK_METRICS = {
    "swarmnode_peers",
    "swarmnode_mesh_peers",
    "swarmnode_messages_received",
    "swarmnode_messages_published",
    "swarmnode_messages_rejected",
    "swarmnode_resident_memory_bytes",
}


def parse(text: str) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """family name -> {labels: value}, for counters their ``_total`` samples."""
    out: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for fam in text_string_to_metric_families(text):
        out.setdefault(fam.name, {})  # a family by reason may have no sample yet
        for s in fam.samples:
            if fam.type == "counter" and not s.name.endswith("_total"):
                continue  # the _created samples
            out.setdefault(fam.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return out


def counter_names(text: str) -> set[str]:
    return {f.name for f in text_string_to_metric_families(text) if f.type == "counter"}


async def get(url: str) -> tuple[int, str, dict[str, str]]:
    timeout = aiohttp.ClientTimeout(total=10)
    async with aiohttp.ClientSession(timeout=timeout) as session, session.get(url) as resp:
        return resp.status, await resp.text(), dict(resp.headers)


def node(model_dir: Path, data_dir: Path, net: MemoryNetwork, name: str, monitor: bool) -> Node:
    raw = tiny_config(
        model_dir,
        data_dir,
        node={"name": name},
        swarm={"enabled": True, "min_round_s": 0.05},
        train={"learning_rate": 0.001, "format_reward_weight": 0.5},
        sapo={"local_groups": 2, "external_groups": 2},
        checkpoint={"every_rounds": 2},
        monitor=MONITOR if monitor else {},
    )
    return Node(parse_config(raw), echo=False, transport=net.transport(name))


def test_node_serves_metrics_and_dashboard(tiny_model_dir: Path, tmp_path: Path) -> None:
    net = MemoryNetwork()
    a, b = (
        node(tiny_model_dir, tmp_path / "a", net, "A", True),
        node(tiny_model_dir, tmp_path / "b", net, "B", False),
    )
    seen: dict[str, object] = {}

    async def main() -> None:
        runs = []
        for n in (a, b):  # one at a time: transformers' model loading is not thread-safe
            runs.append(asyncio.create_task(n.run()))
            await wait_for(lambda n=n: n.state == "training" or runs[-1].done(), "loading", 60)
        try:
            assert a.monitor is not None
            base = a.monitor.url
            await wait_for(lambda: a.round >= 2 or runs[0].done(), "two rounds", 120)
            seen["first"] = parse((await get(base + "metrics"))[1])
            await wait_for(
                lambda: (a.round >= 4 and a.trained_from["B"] > 0) or runs[0].done(),
                "four rounds, trained on B",
                120,
            )
            status, text, headers = await get(base + "metrics")
            assert status == 200 and headers["Content-Type"].startswith("text/plain")
            seen["second"] = parse(text)
            seen["counters"] = counter_names(text)
            seen["page"] = await get(base)
            seen["files"] = [await get(f"{base}static/{f}") for f in STATIC if f != "index.html"]
            seen["state"] = json.loads((await get(base + "api/state"))[1])
            seen["missing"] = (await get(base + "static/..%2Fmonitor.py"))[0]
            async with aiohttp.ClientSession() as session, session.post(base + "api/state") as r:
                seen["post"] = r.status
        finally:
            for n in (a, b):
                n.stop.set()
            await asyncio.wait_for(asyncio.gather(*runs), 60)

    asyncio.run(main())
    first, second = seen["first"], seen["second"]
    assert isinstance(first, dict) and isinstance(second, dict)
    assert set(second) >= TRAINER_METRICS | NETWORK_METRICS, TRAINER_METRICS - set(second)
    assert "process_resident_memory_bytes" in second
    assert second["swarmnode_round"][()] >= 4
    kinds = {dict(k)["kind"]: v for k, v in second["swarmnode_groups"].items()}
    assert set(kinds) == {"local", "external", "skipped", "completed"} and kinds["external"] > 0
    gc_cpu = {tuple(sorted(dict(k).values())) for k in second["swarmnode_gc_cpu_seconds"]}
    assert gc_cpu == {(g, t) for g in "012" for t in ("other", "trainer")}
    counters = seen["counters"]
    assert isinstance(counters, set) and "swarmnode_tokens_trained" in counters
    for name, samples in first.items():  # counters only go up across rounds
        if name in counters:
            for labels, value in samples.items():
                assert second[name].get(labels, 0) >= value, (name, labels)
    assert second["swarmnode_tokens_generated"][()] > first["swarmnode_tokens_generated"][()]
    # The page, its files and its JSON: everything from this node, nothing from outside.
    status, page, headers = seen["page"]  # type: ignore[misc]
    assert status == 200 and "default-src 'self'" in headers["Content-Security-Policy"]
    texts = [page] + [t for code, t, _ in seen["files"]]  # type: ignore[attr-defined]
    assert all(code == 200 for code, _, _ in seen["files"])  # type: ignore[attr-defined]
    for text in texts:
        urls = set(re.findall(r"(?:https?:)?//[\w.-]+\.\w+[^\s\"')]*", text))
        # The SVG namespace is an identifier, never fetched.
        assert urls <= {"http://www.w3.org/2000/svg"}, urls
    state = seen["state"]
    assert isinstance(state, dict)
    assert state["role"] == "trainer" and state["round"] >= 4 and len(state["rounds"]) >= 4
    assert {"reward_mean", "gen_seconds", "queue_groups", "rss_mb"} <= set(state["rounds"][-1])
    assert state["rounds"][-1]["rss_mb"] > 0
    (peer,) = state["peers"]  # the swarm view: B, from what gossip carried
    assert peer["peer"] == "B" and peer["claimed"] and peer["groups_accepted"] > 0
    assert peer["groups_trained"] == a.trained_from["B"] > 0
    assert seen["missing"] == 404 and seen["post"] == 405  # read-only, fixed files


def test_bootstrap_serves_the_network_part(tmp_path: Path) -> None:
    cfg = parse_config(
        {
            "node": {"name": "boot", "data_dir": str(tmp_path)},
            "swarm": {"enabled": True, "role": "bootstrap"},
            "monitor": MONITOR,
        }
    )
    net = MemoryNetwork()
    boot = BootstrapNode(cfg, transport=net.transport("boot"))
    other = net.transport("X")
    got: list[str] = []

    async def main() -> None:
        run = asyncio.create_task(boot.run())
        await other.start()
        await wait_for(lambda: boot.state == "routing" or run.done(), "routing", 30)
        try:
            assert boot.monitor is not None
            got.append((await get(boot.monitor.url + "metrics"))[1])
            got.append((await get(boot.monitor.url + "api/state"))[1])
        finally:
            boot.stop.set()
            await other.stop()
            await asyncio.wait_for(run, 30)

    asyncio.run(main())
    metrics = parse(got[0])
    assert set(metrics) >= NETWORK_METRICS and "swarmnode_round" not in metrics
    assert metrics["swarmnode_peers"][()] == 1
    assert json.loads(got[1])["role"] == "bootstrap"


def test_non_loopback_needs_the_explicit_setting(tmp_path: Path) -> None:
    with pytest.raises(
        ConfigError, match=re.escape("monitor.listen: 0.0.0.0:9464 is not a loopback")
    ):
        parse_config({"monitor": {"enabled": True, "listen": "0.0.0.0:9464"}})
    ok = parse_config({"monitor": {"listen": "0.0.0.0:9464", "allow_public": True}})
    assert not ok.monitor.is_loopback()
    cfg = write_config(
        tmp_path / "public.yaml",
        {"node": {"data_dir": str(tmp_path)}, "monitor": {"enabled": True, "listen": "[::]:9"}},
    )
    proc = subprocess.run(
        [sys.executable, "-m", "swarmnode.cli", "start", "--config", str(cfg)],
        cwd=REPO,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "is not a loopback address" in lines[0], proc.stderr


def test_public_listen_with_the_setting_warns(caplog: pytest.LogCaptureFixture) -> None:
    cfg = MonitorConfig(enabled=True, listen="0.0.0.0:0", allow_public=True)
    server = MonitorServer(cfg, lambda: BootstrapStatus(name="x"))

    async def main() -> None:
        await server.start()
        await server.stop()

    with caplog.at_level(logging.WARNING, "swarmnode.ops.monitor"):
        asyncio.run(main())
    (warning,) = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert "beyond this machine" in warning.getMessage() and server.port > 0


def test_dashboard_files_ship_in_the_package() -> None:
    for name in STATIC:
        assert dashboard_file(name)
    pyproject = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    assert '"ops/dashboard/*"' in pyproject


def browser_dom(url: str) -> str:
    """The page as headless Chromium renders it, after its scripts ran."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    assert chromium is not None
    args = ["--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=5000"]
    out = subprocess.run(
        [chromium, *args, "--dump-dom", url], capture_output=True, text=True, timeout=90
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


@pytest.mark.skipif(
    not (shutil.which("chromium") or shutil.which("chromium-browser")),
    reason="no chromium on this machine (apt-get install chromium to run the browser test)",
)
def test_dashboard_renders_live_rounds_in_a_browser(tiny_model_dir: Path, tmp_path: Path) -> None:
    a = node(tiny_model_dir, tmp_path / "a", MemoryNetwork(), "A", True)
    doms: list[tuple[int, str]] = []

    async def main() -> None:
        run = asyncio.create_task(a.run())
        try:
            for rounds in (2, 4):
                await wait_for(lambda r=rounds: a.round >= r or run.done(), f"{rounds} rounds", 120)
                assert a.monitor is not None
                doms.append((a.round, await asyncio.to_thread(browser_dom, a.monitor.url)))
        finally:
            a.stop.set()
            await asyncio.wait_for(run, 60)

    asyncio.run(main())
    facts = []
    for seen_round, dom in doms:
        assert "live · updated" in dom  # the script ran and its poll succeeded
        reward = re.search(r'<svg id="chart-reward"[^>]*>(.*?)</svg>', dom, re.S)
        assert reward and reward.group(1).count("<path") == 3  # reward, accuracy, format
        shown = re.search(r"<dt>round</dt><dd>(\d+)", dom)
        assert shown and int(shown.group(1)) >= seen_round
        facts.append(int(shown.group(1)))
    assert facts[1] > facts[0]  # the page follows the rounds

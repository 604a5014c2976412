"""Crossing NAT for real: two trainers behind different NATs share rollouts through a
circuit relay, then DCUtR replaces the relayed connection with a direct one.

The topology (tests/netns.py builds it; every namespace is gone after the test)::

                ns pub: bridge br0 = "the internet", 198.51.100.0/24
                relay (a bootstrap with relay.serve) on 198.51.100.1:4001
                 |                                         |
       198.51.100.2 wan                          198.51.100.3 wan
       ns rtrA: iptables MASQUERADE              ns rtrB: iptables MASQUERADE
       from wan: only ESTABLISHED,RELATED        from wan: only ESTABLISHED,RELATED
       (forwarded or to itself), rest dropped    (forwarded or to itself), rest dropped
       10.1.0.1 lan                              10.2.0.1 lan
                 |                                         |
       10.1.0.2: ns natA, trainer A              10.2.0.2: ns natB, trainer B
                 listens 10.1.0.2:4001                     listens 10.2.0.2:4001

A and B dial out to the relay; neither can dial the other (asserted with plain TCP
connects: B's LAN address has no route from A, and B's router forwards no port).
The relay belongs to another swarm name, so it carries no rollouts itself: with
the same name it would forward A's and B's gossip as a mesh member, and the test
could not tell that path from the relayed one. What the test asserts, from each
node's status and metrics.jsonl:
- AutoNAT: A and B find themselves ``private``, the relay ``public``;
- relay: A and B hold a slot on the relay and advertise a circuit address; they
  connect through it (``relay.dial_ok``), and gossip arrives over the relayed
  connection (``msgs_in_via_relay``);
- rollouts: each trains on groups from the other;
- hole punching: DCUtR (TCP simultaneous open through both NATs) adds a direct
  connection, the relayed one is closed after DCUtR's grace period, and the two
  keep exchanging over the direct one.

Root, ``ip`` and ``iptables`` are needed; without them the test is skipped with the
reason. Minutes of CPU (two tiny-model trainers), so marked slow. The measured
figures are written to ``nat-figures.json`` in the test's tmp dir and printed.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from libp2p.relay.circuit_v2.dcutr import MAX_HOLE_PUNCH_ATTEMPTS

from swarmnode.learn.metrics import read_rounds
from tests.helpers import Proc, cli, kill_live, node_config, wait_until, write_config
from tests.netns import PUBLIC_NET, NatLab, unavailable

PORT = 4001


def _lab(symmetric: bool) -> Iterator[NatLab]:
    why = unavailable()
    if why is not None:
        pytest.skip(f"NAT test needs network namespaces: {why}")
    built = NatLab(symmetric=symmetric)
    try:
        yield built
    finally:
        built.close()


@pytest.fixture
def lab() -> Iterator[NatLab]:
    yield from _lab(symmetric=False)


@pytest.fixture
def symmetric_lab() -> Iterator[NatLab]:
    yield from _lab(symmetric=True)


def _config(tmp: Path, node: str, model: Path, listen: str, boot: str | None, **swarm: Any) -> Path:
    path = node_config(tmp, node, model, boot, role="bootstrap" if boot is None else "trainer")
    cfg = yaml.safe_load(path.read_text())
    cfg["swarm"].update(
        listen=[f"/ip4/{listen}/tcp/{PORT}"],
        dial_timeout_s=3.0,
        discovery_interval_s=1.0,
        min_round_s=1.0,  # two trainers on shared cores: enough rounds, no flood
        **swarm,
    )
    return write_config(path, cfg)


def _first_from(p: Proc, peer: str) -> float | None:
    """Unix time of the first round that trained on a group from ``peer``."""
    for rec in read_rounds(p.data / "metrics.jsonl"):
        if rec.external_by_peer.get(peer):
            return rec.time
    return None


@contextlib.contextmanager
def _relay_and_sites(
    lab: NatLab, model: Path, tmp: Path
) -> Iterator[tuple[Proc, Proc, Proc, float]]:
    """A relay in ``pub`` (another swarm: it carries none of their gossip) and trainers
    A and B behind the two routers, up and listening, and when A and B were started;
    all killed at the end."""
    relay_cfg = _config(
        tmp, "relay", model, f"{PUBLIC_NET}.1", None, name="relays", relay={"serve": True}
    )
    try:
        relay = Proc(relay_cfg, tmp / "relay", prefix=lab.prefix_cmd("pub"))
        relay_addr = relay.addr()
        started = time.time()
        a, b = (
            Proc(
                _config(tmp, site.lower(), model, lab.host_ip(site), relay_addr),
                tmp / site.lower(),
                prefix=lab.prefix_cmd(f"nat{site}"),
            )
            for site in ("A", "B")
        )
        wait_until(lambda: all(p.swarm().get("listen_addrs") for p in (a, b)), "A and B up")
        yield relay, a, b, started
    finally:
        kill_live()


@pytest.mark.slow
def test_two_nodes_behind_nat_share_through_relay_then_punch(
    lab: NatLab, tiny_model_dir: Path, tmp_path: Path
) -> None:
    relay_ip = f"{PUBLIC_NET}.1"
    with _relay_and_sites(lab, tiny_model_dir, tmp_path) as (relay, a, b, started):
        relay_addr = relay.addr()
        assert relay_addr.startswith(f"/ip4/{relay_ip}/tcp/{PORT}/p2p/")
        relay_id = relay_addr.rsplit("/", 1)[-1]
        procs = [relay, a, b]
        ida, idb = str(a.swarm()["peer_id"]), str(b.swarm()["peer_id"])

        # The NATs hold: the relay is reachable, the other site is not, either way.
        assert lab.tcp_connects("natA", relay_ip, PORT)
        for src, dst in (("A", "B"), ("B", "A")):
            assert not lab.tcp_connects(f"nat{src}", lab.host_ip(dst), PORT)
            assert not lab.tcp_connects(f"nat{src}", lab.router_ip(dst), PORT)
        assert not lab.tcp_connects("pub", lab.host_ip("A"), PORT)

        def trained_on_each_other() -> bool:
            return a.metrics_from()[idb] > 0 and b.metrics_from()[ida] > 0

        wait_until(trained_on_each_other, "A and B to train on each other's groups")
        firsts = [_first_from(a, idb), _first_from(b, ida)]
        sa, sb, sr = a.swarm(), b.swarm(), relay.swarm()
        assert sa["nat"]["reachability"] == sb["nat"]["reachability"] == "private", (sa, sb)
        assert sr["nat"]["reachability"] == "public", sr["nat"]
        for s in (sa, sb):
            assert [r["relay"] for r in s["nat"]["relay_reservations"]] == [relay_id]
            assert any(f"/p2p/{relay_id}/p2p-circuit/p2p/" in x for x in s["listen_addrs"])
            # Their groups reached each other over the relayed connection.
            assert s["counters"].get("msgs_in_via_relay", 0) > 0, s["counters"]
        assert sr["nat"]["relay_reservations_served"] == 2
        assert sr["msgs_in"] == 0  # another swarm: the relay never took part in the gossip
        relayed_dials = sum(s["counters"].get("relay.dial_ok", 0) for s in (sa, sb))
        assert relayed_dials >= 1
        peers_text = cli("peers", "--data-dir", str(a.data))
        assert "reachability: private" in peers_text and idb in peers_text, peers_text
        status_text = cli("status", "--data-dir", str(a.data))
        assert f"relay slots: {relay_id[:8]}" in status_text, status_text

        # Hole punching: DCUtR adds a direct connection, and once the relayed leg is
        # closed (DCUtR's grace period) the rollouts keep flowing over the direct one.
        def direct_only() -> bool:
            return (
                a.swarm()["nat"]["connections"].get(idb) == "direct"
                and b.swarm()["nat"]["connections"].get(ida) == "direct"
            )

        wait_until(direct_only, "DCUtR to replace the relayed A-B connection", timeout=180)
        punched = {**a.swarm()["nat"]["hole_punched"], **b.swarm()["nat"]["hole_punched"]}
        assert set(punched) & {ida, idb}, punched
        base = a.metrics_from()[idb], b.metrics_from()[ida]
        wait_until(
            lambda: a.metrics_from()[idb] > base[0] and b.metrics_from()[ida] > base[1],
            "A and B to keep exchanging over the direct connection",
        )
        sa, sb = a.swarm(), b.swarm()
        relayed_at = min(v["at"] - v["after_s"] for v in punched.values())
        figures = {
            "start_to_relayed_s": round(relayed_at - started, 1),
            "relayed_to_first_trained_s": [round(t - relayed_at, 1) for t in firsts if t],
            "first_exchange_s": [round(t - started, 1) for t in firsts if t is not None],
            "groups_a_from_b": a.metrics_from()[idb],
            "groups_b_from_a": b.metrics_from()[ida],
            "msgs_in_via_relay": [s["counters"].get("msgs_in_via_relay", 0) for s in (sa, sb)],
            "msgs_in": [sa["msgs_in"], sb["msgs_in"]],
            "relayed_dials": relayed_dials,
            "hole_punched": {k: v["after_s"] for k, v in punched.items()},
            "punch_attempts": [s["counters"].get("relay.punch_attempts", 0) for s in (sa, sb)],
            "reachability": [sa["nat"]["reachability"], sb["nat"]["reachability"]],
        }
        (tmp_path / "nat-figures.json").write_text(json.dumps(figures, indent=1))
        print("NAT figures:", json.dumps(figures))
        for p in procs:
            assert p.stop() == 0, p.log.read_text()[-3000:]


SYMMETRIC_KEEP_S = 90.0  # how long the relayed exchange is watched after punching gave up


@pytest.mark.slow
def test_symmetric_nats_stay_relayed_and_keep_exchanging(
    symmetric_lab: NatLab, tiny_model_dir: Path, tmp_path: Path
) -> None:
    """Behind NATs that draw a new public port for every flow (carrier-grade NAT),
    the port a peer learns for the other is not the one a punch would come from, so
    DCUtR cannot connect them. Then: the punch attempts stop at py-libp2p's bound,
    the relayed connection is kept (never swapped for a broken direct one), and
    rollouts keep crossing it in both directions for ``SYMMETRIC_KEEP_S``."""
    lab = symmetric_lab
    # The NATs really are symmetric: one local port, two destinations, two public ports.
    for site in ("A", "B"):
        first, second = lab.mapped_ports(site)
        assert first != second, (site, first, second)
    with _relay_and_sites(lab, tiny_model_dir, tmp_path) as (relay, a, b, started):
        procs = [relay, a, b]
        ida, idb = str(a.swarm()["peer_id"]), str(b.swarm()["peer_id"])

        def trained_on_each_other() -> bool:
            return a.metrics_from()[idb] > 0 and b.metrics_from()[ida] > 0

        wait_until(trained_on_each_other, "A and B to train on each other's groups")
        first_exchange = time.time() - started

        def punching_over() -> bool:
            attempts = sum(p.swarm()["counters"].get("relay.punch_attempts", 0) for p in (a, b))
            return attempts >= MAX_HOLE_PUNCH_ATTEMPTS

        wait_until(punching_over, "DCUtR to try (and fail) its attempts", timeout=240)
        base = a.metrics_from()[idb], b.metrics_from()[ida]
        time.sleep(SYMMETRIC_KEEP_S)  # the watch itself; every figure below is read after
        sa, sb = a.swarm(), b.swarm()
        gained = a.metrics_from()[idb] - base[0], b.metrics_from()[ida] - base[1]
        assert min(gained) > 0, gained  # still exchanging, both ways
        assert sa["nat"]["connections"].get(idb) == "relayed", sa["nat"]["connections"]
        assert sb["nat"]["connections"].get(ida) == "relayed", sb["nat"]["connections"]
        assert not sa["nat"]["hole_punched"] and not sb["nat"]["hole_punched"]
        attempts = [s["counters"].get("relay.punch_attempts", 0) for s in (sa, sb)]
        assert sum(s["counters"].get("relay.punch_ok", 0) for s in (sa, sb)) == 0
        assert sum(attempts) <= MAX_HOLE_PUNCH_ATTEMPTS, attempts  # bounded: not retried
        figures = {
            "first_exchange_s": round(first_exchange, 1),
            "punch_attempts": attempts,
            "groups_gained_while_watched": list(gained),
            "watched_s": SYMMETRIC_KEEP_S,
            "msgs_in_via_relay": [s["counters"].get("msgs_in_via_relay", 0) for s in (sa, sb)],
            "relayed_dials": sum(s["counters"].get("relay.dial_ok", 0) for s in (sa, sb)),
        }
        (tmp_path / "symmetric-nat-figures.json").write_text(json.dumps(figures, indent=1))
        print("symmetric NAT figures:", json.dumps(figures))
        for p in procs:
            assert p.stop() == 0, p.log.read_text()[-3000:]

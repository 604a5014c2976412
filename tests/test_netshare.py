"""The libp2p thread's CPU cap (``p2p.netshare``): a simulated thread whose CPU grows
with what it reads, a clock that only moves when told, and peers that read as fast as
they are let."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from swarmnode.p2p.netshare import FLOOR_UNITS_S, NetShare, no_tenure, water_level

COST_S = 0.002  # CPU seconds the simulated thread spends per unit read
STEP_S = 0.01


class Sim:
    """Accounts that want to read ``demand`` units a second; a read waits out the
    debt ``charge`` returns before the account's next one."""

    def __init__(
        self, cap: float, weight: Callable[[str], float] = no_tenure, startup_s: float = 0.0
    ) -> None:
        self.t = self.cpu = 0.0
        self.net = NetShare(
            cap, clock=lambda: self.t, cpu=lambda: self.cpu, weight=weight, startup_s=startup_s
        )
        self.demand: dict[str, float] = {}
        self.due: dict[str, float] = {}
        self.free_at: dict[str, float] = {}
        self.read: dict[str, float] = {}
        self.waited: dict[str, float] = {}

    def run(self, seconds: float) -> None:
        for _ in range(round(seconds / STEP_S)):
            self.t += STEP_S
            for a, rate in self.demand.items():
                while rate > 0 and self.due[a] <= self.t and self.free_at[a] <= self.t:
                    wait = self.net.charge(a, 1.0)
                    self.cpu += COST_S
                    self.read[a] = self.read.get(a, 0.0) + 1
                    self.waited[a] = self.waited.get(a, 0.0) + wait
                    self.free_at[a] = self.t + wait
                    self.due[a] += 1.0 / rate

    def want(self, account: str, rate: float) -> None:
        self.demand[account] = rate
        self.due[account] = self.t  # no backlog from an earlier demand
        self.free_at.setdefault(account, self.t)

    def reset(self) -> None:
        self.read, self.waited = {}, {}


def test_water_level_is_max_min_fair() -> None:
    assert water_level([1.0, 100.0, 100.0], 51.0) == pytest.approx(25.0)
    assert water_level([], 5.0) == float("inf")
    level = water_level([0.5, 3.0, 40.0, 40.0], 20.0)
    assert sum(min(d, level) for d in [0.5, 3.0, 40.0, 40.0]) == pytest.approx(20.0)


def test_the_peer_known_longest_is_held_back_last() -> None:
    """The tiny-model A/B: the heaviest reader was the honest peer, known for half an
    hour, and five Sybils a minute old; 60 units/s each is 1.2x a core against a cap
    of 0.1, so 50 units/s fit. Fair by tenure (weights 30 and 1), the honest peer
    reads 30x what each Sybil does (30 of the 35 shares); split evenly, it got a
    sixth like each of them."""
    minutes = {"honest": 30.0} | {f"sybil{k}": 1.0 for k in range(5)}

    def reads(weight: Callable[[str], float]) -> dict[str, float]:
        sim = Sim(cap=0.1, weight=weight)
        for a in minutes:
            sim.want(a, 60.0)
        sim.run(30)  # converge
        sim.reset()
        sim.run(60)
        return sim.read

    fair = reads(minutes.__getitem__)
    sybil = max(fair[f"sybil{k}"] for k in range(5))
    assert fair["honest"] / sybil == pytest.approx(30.0, rel=0.25)
    assert fair["honest"] == pytest.approx(30 / 35 * 50 * 60, rel=0.2)  # an even split: 1/6
    assert water_level([10.0, 10.0, 1.0], 7.0, [1.0, 4.0, 1.0]) == pytest.approx(1.2)


@pytest.mark.parametrize("minutes", [0.0, 2.0, 90.0])
def test_peers_known_alike_are_not_held_for_each_other(minutes: float) -> None:
    """bench_gossip's case: seven mesh peers forwarding the swarm's traffic and one
    peer outside the mesh sending gossip only, all known as long (newcomers, a couple
    of minutes, past MAX_WEIGHT), 0.12 of a core against a cap of 0.1. Holding them
    back would only delay what must be read: nobody waits, everything is read."""
    sim = Sim(cap=0.1, weight=lambda a: minutes)
    for k in range(7):
        sim.want(f"mesh{k}", 8.0 + k * 0.3)
    sim.want("outside", 0.5)
    sim.run(60)
    assert sim.net.share > 0.11 and sim.net.level is None
    assert sum(sim.waited.values()) == 0.0
    assert sim.read["mesh6"] == pytest.approx(60 * 9.8, abs=2)


def test_newcomers_are_held_for_a_peer_known_twice_as_long() -> None:
    """The same load, with the light peer known 3 minutes and the heavy ones 1: the
    heavy ones are held (TENURE_RATIO) and the light one is read whenever it sends."""
    sim = Sim(cap=0.1, weight=lambda a: 3.0 if a == "old" else 1.0)
    for k in range(7):
        sim.want(f"new{k}", 9.0)
    sim.want("old", 0.5)
    sim.run(60)
    assert sim.net.level is not None and sim.waited.get("old", 0.0) == 0.0
    assert sum(sim.waited.values()) > 0.0


def test_the_nodes_own_start_up_holds_nobody_back() -> None:
    """A node joining a running swarm: 10 s of start-up at a whole core on top of
    seven peers at 8 units/s each (0.11 of a core with the cap at 0.15). In the first
    ``STARTUP_S`` nobody waits, and once it binds there is nothing to hold back; the
    same burst later in the node's life engages the cap."""
    sim = Sim(cap=0.15, weight=lambda a: 10.0 if a == "old" else 1.0, startup_s=30.0)
    for k in range(7):
        sim.want(f"p{k}", 8.0)
    sim.want("old", 0.5)  # one peer known longer: the cap has a peer to keep

    def burst(seconds: float) -> None:
        for _ in range(round(seconds)):
            sim.cpu += 1.0  # a core of its own work
            sim.run(1.0)

    burst(10)
    sim.run(60)
    assert sum(sim.waited.values()) == 0.0 and sim.net.level is None
    burst(10)
    assert sim.net.level is not None  # past start-up, the cap binds


def test_under_the_cap_nobody_waits() -> None:
    sim = Sim(cap=0.5)
    sim.want("a", 50.0)  # 50 x 2 ms = 10% of a core
    sim.want("b", 100.0)
    sim.run(30)
    assert sim.net.level is None and sum(sim.waited.values()) == 0.0
    assert sim.net.share == pytest.approx(0.3, abs=0.02)


def test_five_heavy_accounts_are_held_to_the_cap_and_a_light_one_never_waits() -> None:
    """Five Sybils wanting 200 units/s each (2 cores' worth) and one honest peer at
    1 unit/s: once the cap binds, the thread spends about its cap, the Sybils share
    the rest evenly, and the honest peer is read whenever it sends."""
    sim = Sim(cap=0.1, weight=lambda a: 5.0 if a == "honest" else 1.0)
    for k in range(5):
        sim.want(f"sybil{k}", 200.0)
    sim.want("honest", 1.0)
    sim.run(30)  # converge
    sim.reset()
    cpu0, t0 = sim.cpu, sim.t
    sim.run(60)
    share = (sim.cpu - cpu0) / (sim.t - t0)
    assert share == pytest.approx(0.1, rel=0.2)
    assert sim.waited.get("honest", 0.0) == 0.0 and sim.read["honest"] == pytest.approx(60, abs=1)
    sybils = [sim.read[f"sybil{k}"] for k in range(5)]
    assert max(sybils) / min(sybils) < 1.2  # fair among themselves
    assert sim.net.level is not None and sim.net.report()["net_share_level"] is not None


def test_the_level_relaxes_once_the_flood_stops() -> None:
    sim = Sim(cap=0.1, weight=lambda a: 5.0 if a == "light" else 1.0)
    sim.want("heavy", 500.0)
    sim.want("light", 2.0)
    sim.run(20)
    assert sim.net.level is not None
    sim.want("heavy", 0.0)
    sim.run(60)
    assert sim.net.level is None
    sim.reset()
    sim.want("heavy", 40.0)  # 8% of a core: under the cap, read in full again
    sim.run(20)
    assert sim.waited.get("heavy", 0.0) == 0.0 and sim.read["heavy"] == pytest.approx(800, abs=2)


def test_the_level_never_falls_below_the_floor() -> None:
    """CPU the reads do not explain (here: the thread busy on its own) cannot starve
    the peers: each is still read at the floor rate."""
    sim = Sim(cap=0.05, weight=lambda a: 5.0 if a == "old" else 1.0)
    for k in range(30):  # 30 x the floor is still over MIN_UNITS_S: the level goes all the way
        sim.want(f"p{k}", 50.0)
    sim.want("old", 0.2)
    for _ in range(60):
        sim.cpu += 0.5  # half a core of other work each second
        sim.run(1)
    assert sim.net.level == FLOOR_UNITS_S
    sim.reset()
    sim.run(10)
    assert min(sim.read[f"p{k}"] for k in range(30)) == pytest.approx(10 * FLOOR_UNITS_S, abs=3)


def test_cpu_the_reads_cannot_explain_holds_nobody_back() -> None:
    """A node's own work (its start-up: handshakes, DHT) over the cap while its peers
    send little: nobody waits."""
    sim = Sim(cap=0.05)
    sim.want("honest", 3.0)
    sim.want("other", 5.0)
    for _ in range(30):
        sim.cpu += 0.3
        sim.run(1)
    assert sim.net.share > 0.2 and sim.net.level is None
    assert sum(sim.waited.values()) == 0.0


def test_accounts_are_bounded() -> None:
    t = [0.0]
    net = NetShare(
        0.1, clock=lambda: t[0], cpu=lambda: t[0], max_accounts=8, startup_s=0
    )  # share 1.0
    for k in range(100):
        t[0] += 0.3
        net.charge(f"p{k}", 5.0)
    assert len(net._used) <= 8 and len(net._rate) <= 8 and len(net._buckets) <= 8

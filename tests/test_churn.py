"""Churn: nodes of a real swarm are SIGKILLed and restarted at random, for minutes.

Five ``swarmnode start`` processes on loopback: one bootstrap and four tiny-model
trainers, each on a fixed port, checkpointing after every round. A schedule drawn
from a fixed seed (victim, gap before the kill, time down) kills one node at a time
with SIGKILL (no shutdown, no last checkpoint) and restarts it on the same data
directory; the next kill may come while earlier victims are still rejoining (at
most two nodes away at once). Checked and measured per kill:

- the restarted node has the same peer ID; its first round is its newest
  checkpoint's round + 1, so besides the round in flight at most one recorded round
  is redone (the kill may land between a round's metrics line and its checkpoint);
- it is back in the mesh (its gossipsub mesh is not empty), trains on a peer's
  group, and a survivor trains on one of its groups, each within ``BACK_S`` of the
  restart (a restarted bootstrap: every trainer up redials it);
- meanwhile every trainer that stayed up keeps training, on other nodes' groups;
- nobody graylists anybody for it, nor disconnects a live peer as unresponsive
  (``p2p.liveness``), and every node stops cleanly at the end.

The figures (rounds lost, seconds to the host, the mesh and both directions of
exchange) are printed and quoted in docs/reliability.md. Marked slow: about four
minutes with two loaded cores. Every wait polls with a deadline; the schedule's
sleeps only space the kills.
"""

from __future__ import annotations

import json
import os
import random
import signal
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from swarmnode.learn.checkpoint import Checkpointer
from swarmnode.learn.metrics import RoundRecord
from swarmnode.p2p.identity import identity_path, load_or_create_identity, peer_id_of
from tests.helpers import (
    Proc,
    dump_stacks,
    free_port,
    kill_live,
    node_config,
    wait_until,
    write_config,
)

SEED = 11  # the kill schedule's seed: the same victims, gaps and downtimes every run
KILLS = 6
MAX_AWAY = 2  # nodes down or still rejoining at once
BACK_S = 120.0  # restart -> back in the mesh and exchanging both ways (Python start-up included)
WINDOW_S = 20.0  # after each kill, every trainer that stays up trains on others' groups


class Member:
    """One node of the churned swarm: config, data directory, current process, rounds."""

    def __init__(self, name: str, config: Path, data: Path, peer_id: str, trainer: bool) -> None:
        self.name, self.config, self.data = name, config, data
        self.peer_id, self.trainer = peer_id, trainer
        self.proc = Proc(config, data)
        self.records: list[RoundRecord] = []
        self._offset = 0
        self._inode = 0

    def rounds(self) -> list[RoundRecord]:
        """Every round record in metrics.jsonl (read incrementally, whole lines only).
        A resumed node replaces the file without the rounds its restore undid: then it
        is read again from the start."""
        path = self.data / "metrics.jsonl"
        if path.is_file():
            with path.open("rb") as f:
                st = os.fstat(f.fileno())
                if st.st_ino != self._inode or st.st_size < self._offset:
                    self.records, self._offset, self._inode = [], 0, st.st_ino
                f.seek(self._offset)
                chunk = f.read()
            end = chunk.rfind(b"\n") + 1
            self._offset += end
            for line in chunk[:end].splitlines():
                self.records.append(RoundRecord.from_json(json.loads(line)))
        return self.records

    def newest_checkpoint(self) -> int:
        found = Checkpointer(self.data / "checkpoints").checkpoints()
        return found[0][0] if found else 0


@dataclass
class Kill:
    """One SIGKILL and the victim's way back; times are seconds after the restart."""

    k: int
    victim: Member
    down_s: float
    killed: float  # unix time
    recorded: int  # last round in metrics.jsonl when killed
    checkpoint: int  # newest checkpoint when killed
    restarted: float | None = None
    accepted_at_restart: dict[str, int] = field(default_factory=dict)  # survivor -> from victim
    figures: dict[str, float] = field(default_factory=dict)
    first_round: int | None = None
    back: float | None = None  # unix time when every measure was in

    def wanted(self) -> set[str]:
        if self.victim.trainer:
            return {"host_s", "mesh_s", "receives_s", "sends_s"}
        return {"host_s", "mesh_s", "redialled_s"}


def _trainer_config(tmp: Path, name: str, model: Path, boot: str) -> Path:
    """``node_config`` with a checkpoint after every round (the resume check needs it)."""
    path = node_config(tmp, name, model, boot, port=free_port())
    cfg: dict[str, Any] = yaml.safe_load(path.read_text(encoding="utf-8"))
    cfg["checkpoint"] = {"every_rounds": 1, "keep": 3}
    return write_config(path, cfg)


def _peer_id(data: Path) -> str:
    """Make the node's identity before it starts, so its peer ID is known in advance."""
    data.mkdir(parents=True, exist_ok=True)
    return peer_id_of(load_or_create_identity(identity_path(data))[0])


def _trained_from(m: Member, since: float, until: float = float("inf")) -> set[str]:
    return {p for r in m.rounds() if since < r.time <= until for p in r.external_by_peer}


@pytest.mark.slow
def test_swarm_survives_random_sigkills_and_restarts(tiny_model_dir: Path, tmp_path: Path) -> None:
    port = free_port()
    boot_id = _peer_id(tmp_path / "boot")
    addr = f"/ip4/127.0.0.1/tcp/{port}/p2p/{boot_id}"
    boot_cfg = node_config(tmp_path, "boot", tiny_model_dir, role="bootstrap", port=port)
    members: list[Member] = []
    kills: list[Kill] = []
    try:
        members.append(Member("boot", boot_cfg, tmp_path / "boot", boot_id, trainer=False))
        for i in range(4):
            name = f"t{i}"
            cfg = _trainer_config(tmp_path, name, tiny_model_dir, addr)
            members.append(Member(name, cfg, tmp_path / name, _peer_id(tmp_path / name), True))
        trainers = [m for m in members if m.trainer]
        wait_until(
            lambda: all(len(_trained_from(m, 0.0)) >= 2 for m in trainers),
            "every trainer to train on groups of two peers",
            timeout=240,
        )
        rng = random.Random(SEED)
        schedule = [
            (rng.uniform(4, 12), rng.choice(members), rng.uniform(1, 5)) for _ in range(KILLS)
        ]
        for k, (gap, victim, down_s) in enumerate(schedule):
            start = time.monotonic()
            while (
                time.monotonic() < start + gap
                or any(x.victim is victim for x in kills if x.back is None)
                or sum(x.back is None for x in kills) >= MAX_AWAY
            ):
                _poll(kills, trainers)
                time.sleep(0.5)
            kills.append(_kill(k, victim, down_s))
        while any(x.back is None for x in kills):
            _poll(kills, trainers)
            time.sleep(0.5)
        for m in members:  # everyone, restarted or not, stops cleanly at the end
            swarm = m.proc.swarm()
            assert swarm["graylisted"] == [], (m.name, swarm["graylisted"])
            # a killed peer's socket is reset by its kernel: no live peer was taken for dead
            assert swarm["counters"].get("peers_unresponsive", 0) == 0, (m.name, swarm)
            assert m.proc.stop() == 0, m.proc.log.read_text()[-3000:]
    finally:
        kill_live()
    _check_survivors(kills, trainers)
    _report(kills)


def _up(m: Member, kills: list[Kill]) -> bool:
    """Not killed, or back from every kill (a restarted process counts from zero)."""
    return not any(x.victim is m and x.back is None for x in kills)


def _accepted(receiver: Member, sender: Member) -> int:
    """Groups from ``sender`` that ``receiver`` verified and kept, since it started."""
    row = receiver.proc.swarm().get("peer_scores", {}).get(sender.peer_id, {})
    return int(row.get("verdicts", {}).get("accepted", 0))


def _kill(k: int, victim: Member, down_s: float) -> Kill:
    assert victim.proc.stop(signal.SIGKILL) == -signal.SIGKILL
    before = victim.rounds()
    return Kill(
        k,
        victim,
        down_s,
        killed=time.time(),
        recorded=before[-1].round if before else 0,
        checkpoint=victim.newest_checkpoint(),
    )


def _poll(kills: list[Kill], trainers: list[Member]) -> None:
    """Restart victims whose downtime is over; time the steps of their way back."""
    now = time.time()
    for x in kills:
        if x.back is not None:
            continue
        v = x.victim
        if x.restarted is None:
            if now >= x.killed + x.down_s:
                others = [t for t in trainers if t is not v and _up(t, kills)]
                x.accepted_at_restart = {t.name: _accepted(t, v) for t in others}
                v.proc, x.restarted = Proc(v.config, v.data), time.time()
            continue
        since = now - x.restarted
        if since > BACK_S:
            raise AssertionError(
                f"kill {x.k} ({v.name}) not back in {BACK_S}s: {x.figures}\n{dump_stacks()}"
            )
        got = x.figures
        swarm = v.proc.swarm()  # asserts the process is alive
        if "host_s" not in got and swarm.get("peer_id"):
            assert swarm["peer_id"] == v.peer_id  # same identity, same peer ID
            got["host_s"] = since
        if "mesh_s" not in got and swarm.get("mesh_size", 0) >= 1:
            got["mesh_s"] = since
        if v.trainer:
            if x.first_round is None:
                x.first_round = next((r.round for r in v.rounds() if r.time > x.restarted), None)
            if "receives_s" not in got and _trained_from(v, x.restarted):
                got["receives_s"] = since
            if "sends_s" not in got and any(
                _up(t, kills) and _accepted(t, v) > n
                for t in trainers
                if (n := x.accepted_at_restart.get(t.name)) is not None
            ):
                got["sends_s"] = since
        else:
            up = {t.peer_id for t in trainers if _up(t, kills)}
            if "redialled_s" not in got and up <= set(swarm.get("connected_peers", [])):
                got["redialled_s"] = since
        if x.wanted() <= set(got):
            x.back = time.time()
            if v.trainer:
                assert x.checkpoint <= x.recorded, (x.checkpoint, x.recorded)
                assert x.first_round == x.checkpoint + 1, (x.first_round, x.checkpoint)
                assert x.recorded - x.checkpoint <= 1, (x.recorded, x.checkpoint)
            print(f"churn kill {x.k}: {v.name} {_summary(x)}", flush=True)


def _summary(x: Kill) -> dict[str, Any]:
    out: dict[str, Any] = {"down_s": round(x.down_s, 1)}
    out.update({k: round(v, 1) for k, v in x.figures.items()})
    if x.victim.trainer:
        out["rounds_lost"] = x.recorded - x.checkpoint
    return out


def _check_survivors(kills: list[Kill], trainers: list[Member]) -> None:
    """After each kill, every trainer away at no time in the next WINDOW_S trained on
    at least two rounds, and on groups of other nodes."""
    for x in kills:
        lo, hi = x.killed, x.killed + WINDOW_S
        for t in trainers:
            if any(y.victim is t and y.killed < hi and (y.back or hi) > lo for y in kills):
                continue
            rounds = [r for r in t.rounds() if lo < r.time <= hi]
            assert len(rounds) >= 2, f"{t.name} stalled after kill {x.k}"
            assert _trained_from(t, lo, hi), f"{t.name} trained alone after kill {x.k}"


def _report(kills: list[Kill]) -> None:
    def stat(key: str) -> str:
        xs = [x.figures[key] for x in kills if key in x.figures]
        return f"max {max(xs):.1f} s, median {statistics.median(xs):.1f} s" if xs else "-"

    lost = [x.recorded - x.checkpoint for x in kills if x.victim.trainer]
    both = [max(x.figures["receives_s"], x.figures["sends_s"]) for x in kills if x.victim.trainer]
    print(
        f"churn: {len(kills)} kills survived ({[x.victim.name for x in kills]}); rounds lost per "
        f"kill {lost}; host up {stat('host_s')}; back in the mesh {stat('mesh_s')}; "
        f"exchanging both ways max {max(both):.1f} s, median {statistics.median(both):.1f} s",
        flush=True,
    )

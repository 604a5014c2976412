"""Flood measurement: what a real node experiences when 1 peer or 5 Sybils flood it.

The victim is a ``swarmnode start`` process training a tiny model (swarmnode/lab/tiny.py),
or ``--model`` (e.g. the embedded model a user's node runs), in a swarm, with
``--external`` peer groups per round. An honest peer (a ``GossipTransport`` in this
process) publishes one realistic batch of catalog items each time the victim
finishes a round, as in scripts/bench_swarm.py, within the pace a node keeps
(``OwnPace``: where the victim's rounds are faster than 2.5 a second, the rounds over
it are not published, as a node would not publish them; swarmnode/lab/victim.py).
Flooders run in a separate process (swarmnode/lab/flooder.py): raw py-libp2p hosts
with Ed25519 identities, one each, that join
the topic, wait until the victim is in their mesh, then publish (as fast as their
connection to the victim takes them, or at a set rate) validly signed, well-formed
messages (msgpack built here, never swarmnode's encoder) of real catalog items with
true reward claims, so that nothing but their rate can count against them. Their own
gossipsub spam guard is off, and each counts what its router really queued for the
victim (``sent``) apart from what its outbound queue dropped.

Phases, each ``--phase-s`` seconds from the moment the flooders are meshed: ``calm``;
``5idle`` (five raw hosts meshed with the victim that publish nothing: what five more
peers cost whatever they send, the reference that tells a flood's own cost from the peer
count's; the calm victim has one peer); ``1peer`` (one identity, as fast as it can);
``5sybil`` (five, as fast as they can); ``5sybil_under`` (five, each under the
per-originator rates: ``--under-rate`` messages a second of ``--under-groups`` groups, so
none is rate-limited or graylisted: the ingestion time budget,
``sapo.ingest_max_share``, is what must hold); ``5sybil_apart`` (the same five at the same
rates, flooding a stand-in for the victim in their own process instead: the attack's whole
CPU on the other cores and none of its messages at the victim, the reference that tells
what the node pays for the messages from what the attackers' load costs it through a
shared machine; ``vs_apart``); ``5sybil_far`` (the same five at the same rates from a
network namespace of their own, across a veth pair, each side's received packets
processed on its own CPUs: on loopback the node's kernel runs its peers' TCP input for
what it relays, and its peers' kernels run its own for what it is sent; swarmnode/lab/
farlink.py; ``vs_under``; needs root and ``--pin``, not in the default phases). A flood
phase is valid when the flooders
sent at least 100 messages to the victim and the victim counted at least 100 beyond the
honest peer's (``5idle`` when its hosts were meshed; ``5sybil_apart`` when they sent
100 to the stand-in and the victim counted fewer than 10). A graylisted flooder is cut off
(it keeps redialling, as attackers do): that is the defence working, and the phase still
lasts ``--phase-s``.

Per phase: mean round time over the whole phase (and the median), honest groups accepted
(the honest peer's ``accepted`` verdicts) and trained on (``external_by_peer``), groups
and tokens the victim trained, the victim's counters (msgs_in, dropped.* and rejected.*
by reason, peers_graylisted), ingestion verdicts, the flooders' score verdicts and
seconds to graylist each, the ingest time share and the victim's log growth per minute
(its stderr, default log level). ``--cycles N`` runs the phases N times in turn, so that
the machine's drift and the model's own (its completions, and its rounds with them,
change as it trains) fall on every phase alike; figures are then pooled per kind of
phase. Last line, per phase: round-time ratio to calm (mean, with a 95% bootstrap
interval over rounds; median; each cycle's; and ``vs_5idle``, the same against ``5idle``
where it ran), honest groups accepted/trained, groups/tokens the victim trained, flood
sent and counted, flooders graylisted and seconds to it, ingest time share, the CPU
share outside training, the trainer's involuntary context switches a second (the kernel
gave its core to another thread) and the other threads' wake-ups a second, log bytes
per minute. Goal: ratios <= 1.10. Exit status 1 if a flood phase was not valid.
``--pin`` puts the victim alone on the first CPU and everything else on the others (its
first field, ``victim_cpus``, is the victim's affinity as read from the running
process), so that on a small machine the attackers' own CPU does not count against the
victim.

    nice -n 10 .venv/bin/python scripts/bench_flood.py --phase-s 60
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from swarmnode.lab import REPO
from swarmnode.lab.farlink import FarLink
from swarmnode.lab.farlink import unavailable as farlink_unavailable
from swarmnode.lab.flooder import SILENT
from swarmnode.lab.victim import (
    FRESHNESS_S,
    MODEL_HELP,
    NET_PROCESS_HELP,
    PIN_HELP,
    Victim,
    counted_in,
    deltas,
    honest_peer,
    pin_cpus,
    ratio_interval,
    shut_down,
    start_node,
    thread_spent,
    trainer_figures,
    work_ratio,
)

FLOODERS: list[subprocess.Popen[bytes]] = []  # killed on the way out, whatever happens
UNDER = -1.0  # a phase's rate: --under-rate messages a second of --under-groups groups
PHASES = (  # name, identities, messages/s per identity (0: as fast as it can), groups each
    ("calm", 0, 0.0, 1),
    ("5idle", 5, SILENT, 0),
    ("1peer", 1, 0.0, 1),
    ("5sybil", 5, 0.0, 1),
    ("5sybil_under", 5, UNDER, -1),
    ("5sybil_apart", 5, UNDER, -1),  # the same flood, at a stand-in: the machine's share
    ("5sybil_far", 5, UNDER, -1),  # the same flood, from a namespace of its own: loopback's
)
NEEDS_ROOT = {"5sybil_far"}  # not in the default phases


def start_flooder(
    addr: str,
    identities: int,
    rate: float,
    groups: int,
    seed: int,
    apart: bool = False,
    link: FarLink | None = None,
) -> subprocess.Popen[bytes]:
    """The flooder process (swarmnode/lab/flooder.py); with ``link``, on its far side."""
    argv = [*(link.exec_prefix() if link else []), sys.executable, "-m", "swarmnode.lab.flooder"]
    argv += [addr, "--identities", str(identities), "--rate", str(rate)]
    argv += ["--groups", str(groups), "--seed", str(seed)]
    argv += ["--apart"] if apart else []
    argv += ["--listen-ip", link.far_ip] if link else []
    flooder = subprocess.Popen(
        argv,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    FLOODERS.append(flooder)
    return flooder


async def phase(
    victim: Victim,
    name: str,
    flood: tuple[int, float, int],
    seconds: float,
    addr: str,
    honest: str,
    honest_published: list[int],
    seed: int,
    far_side: tuple[FarLink, str] | None = None,
) -> dict[str, Any]:
    """One phase; ``far_side``: the link and the victim's address on it (``_far``)."""
    identities, rate, groups = flood
    kind = name.rstrip("0123456789")
    apart = kind.endswith("_apart")  # flooding a stand-in, not the victim
    far = None
    if kind.endswith("_far"):  # flooding from the link's far side, to its address there
        assert far_side is not None
        far, addr = far_side
    flooder, flood_ids = None, []
    if identities:
        flooder = start_flooder(addr, identities, rate, groups, seed, apart, far)
        assert flooder.stdout is not None
        line = await asyncio.wait_for(asyncio.to_thread(flooder.stdout.readline), 300)
        flood_ids = json.loads(line)["ready"]  # meshed with the victim: the flood starts
    st0, log0, t0 = victim.status(), victim.log.stat().st_size, time.monotonic()
    cpu0, threads0, switches0 = victim.cpu_s(), victim.thread_times(), victim.thread_switches()
    before, pub0 = victim.rounds(), honest_published[0]
    graylisted_at: dict[str, float] = {}
    shares: list[float] = []  # the CPU share outside training, each second
    levels: list[float | None] = []  # the level the cap held heavy readers to, each second
    while (now := time.monotonic()) < t0 + seconds:
        swarm = victim.status()["swarm"]
        scores = swarm.get("peer_scores", {})
        reading = swarm.get("reading", {})
        if "net_share" in reading:
            shares.append(reading["net_share"])
            levels.append(reading.get("net_share_level"))
        for p in flood_ids:
            if scores.get(p, {}).get("graylisted") and p not in graylisted_at:
                graylisted_at[p] = round(now - t0, 1)
        await asyncio.sleep(1.0)
    st1, log1, t1 = victim.status(), victim.log.stat().st_size, time.monotonic()
    cpu1, threads1, switches1 = victim.cpu_s(), victim.thread_times(), victim.thread_switches()
    spent = thread_spent(threads0, threads1)
    used = {tid: user + sys for tid, (user, sys, _) in spent.items()}
    switched = {
        tid: [n - m for n, m in zip(sw, switches0.get(tid, (0, 0)), strict=True)]
        for tid, sw in switches1.items()
    }
    recs = [before[-1], *victim.rounds()[len(before) :]]
    out: dict[str, Any] = {}
    if flooder is not None:
        flooder.send_signal(signal.SIGINT)  # trio: KeyboardInterrupt, then the figures
        try:  # a loaded machine can take a while to unwind five hosts
            tail = await asyncio.to_thread(flooder.communicate, timeout=20)
        except subprocess.TimeoutExpired:  # its last periodic figures will do
            flooder.kill()
            tail = await asyncio.to_thread(flooder.communicate, timeout=20)
        lines = [ln for ln in tail[0].decode().splitlines() if '"sent"' in ln]
        out.update(json.loads(lines[-1]) if lines else {"sent": 0, "figures_lost": True})
        verdicts: dict[str, int] = {}
        for p in flood_ids:
            for k, v in st1["swarm"]["peer_scores"].get(p, {}).get("verdicts", {}).items():
                verdicts[k] = verdicts.get(k, 0) + v
        out["flooder_verdicts"] = verdicts
        out["flooder_scores"] = [
            st1["swarm"]["peer_scores"].get(p, {}).get("score") for p in flood_ids
        ]
        out["s_to_graylist"] = [graylisted_at.get(p) for p in flood_ids]
    times = [b.time - a.time for a, b in itertools.pairwise(recs)]
    trainer, trainer_figs = trainer_figures(spent, st0, st1, len(times))
    # The status lists the 50 lowest-scored peers only: after enough Sybils the honest
    # peer (high score) drops out of it, and its count is then unknown (None), not 0.
    honest_v = [st["swarm"]["peer_scores"].get(honest) for st in (st0, st1)]
    flood_counted = counted_in(st1) - counted_in(st0) - (honest_published[0] - pub0)
    out.update(
        durations=[round(t, 3) for t in times],
        round_s=round((recs[-1].time - recs[0].time) / max(1, len(times)), 3),
        cpu_s_per_round=round((cpu1 - cpu0) / max(1, len(times)), 4),
        round_s_median=round(statistics.median(times), 3) if times else None,
        rounds=len(times),
        flood_counted=flood_counted,
        # _apart: the flood was sent, and none of it reached the victim
        valid=not identities
        or rate == SILENT
        or (out.get("sent", 0) >= 100 and (flood_counted < 10 if apart else flood_counted >= 100)),
        honest_accepted=None
        if honest_v[0] is None or honest_v[1] is None
        else honest_v[1]["verdicts"].get("accepted", 0)
        - honest_v[0]["verdicts"].get("accepted", 0),
        honest_trained=sum(r.external_by_peer.get(honest, 0) for r in recs[1:]),
        groups_trained=sum(r.groups_trained for r in recs[1:]),
        tokens_trained=sum(r.tokens_trained for r in recs[1:]),
        ingest_time_share_max=max(r.ingest_time_share for r in recs[1:]) if times else None,
        ingest_accepted=recs[-1].ingest_accepted - recs[0].ingest_accepted,
        ingest_rejected=deltas(recs[-1].ingest_rejected, recs[0].ingest_rejected),
        ingest_evicted=deltas(
            st1["node"]["ingest"].get("ingest_evicted", {}),
            st0["node"]["ingest"].get("ingest_evicted", {}),
        ),
        log_bytes_per_min=round((log1 - log0) * 60 / (t1 - t0)),
        counters=deltas(st1["swarm"]["counters"], st0["swarm"]["counters"]),
        reading=st1["swarm"].get("reading", {}),  # CPU share outside training, at the end
        # sampled each second: the share's mean and peak, and the seconds the cap bound
        net_share_mean=round(statistics.fmean(shares), 4) if shares else None,
        net_share_max=max(shares, default=None),
        cap_bound_s=sum(1 for lv in levels if lv is not None),
        # the others' CPU over the phase, a core's share, and in seconds
        outside_training_share=round((sum(used.values()) - used[trainer]) / (t1 - t0), 4),
        others_cpu_s=round(sum(used.values()) - used[trainer], 3),
        phase_s=round(t1 - t0, 1),
        # a second: the times the kernel took the core from the trainer, the others' wake-ups
        trainer_preempted_per_s=round(switched.get(trainer, [0, 0])[1] / (t1 - t0), 1),
        others_woke_per_s=round(
            sum(v for tid, (v, _) in switched.items() if tid != trainer) / (t1 - t0), 1
        ),
        work=[[r.tokens_generated, r.tokens_trained] for r in recs[1:]],
        **trainer_figs,
    )
    print(name, json.dumps(out), flush=True)
    if identities:
        await victim.settle(honest, FRESHNESS_S + 60)
    return out


def per_msg_read(rs: list[dict[str, Any]], counter: str) -> float | None:
    """A counter's total over the phases per message read (``msgs_read``)."""
    msgs = sum(r["counters"].get("msgs_read", 0) for r in rs)
    return round(sum(r["counters"].get(counter, 0) for r in rs) / msgs, 2) if msgs else None


def added_ms_per_msg(calm_rs: list[dict[str, Any]], rs: list[dict[str, Any]]) -> float | None:
    """ms of CPU outside the trainer thread per message read that the phases added to
    calm's: their others' CPU less calm's share of a core over as many seconds, over
    the messages read less calm's rate over as many seconds (absent from a run
    before 2026-12-07: None)."""
    if not all("others_cpu_s" in r for r in (*calm_rs, *rs)):
        return None
    calm_s = sum(r["phase_s"] for r in calm_rs)
    share = sum(r["others_cpu_s"] for r in calm_rs) / calm_s
    rate = sum(r["counters"].get("msgs_read", 0) for r in calm_rs) / calm_s
    secs = sum(r["phase_s"] for r in rs)
    msgs = sum(r["counters"].get("msgs_read", 0) for r in rs) - rate * secs
    cpu = sum(r["others_cpu_s"] for r in rs) - share * secs
    return round(1000 * cpu / msgs, 3) if msgs > 0 else None


def summary(res: dict[str, dict[str, Any]]) -> str:
    """The last line: every phase kind's figures, pooled over the cycles (``calm0``,
    ``calm1``, ... together), ratios against calm first. Without a calm phase (a
    profiling run of one flood, say) there are no ratios, and the line says so."""
    kinds: dict[str, list[dict[str, Any]]] = {}
    for key, r in res.items():
        kinds.setdefault(key.rstrip("0123456789"), []).append(r)
    if "calm" not in kinds:
        return f"no ratios: no calm phase ran (phases: {','.join(kinds) or 'none'})"

    def pooled(rs: list[dict[str, Any]], field: str) -> int | str:
        """The field's sum over the cycles; "?" where a cycle's is unknown (None)."""
        values = [r[field] for r in rs]
        return "?" if None in values else sum(values)

    def durations(rs: list[dict[str, Any]]) -> list[float]:
        return [t for r in rs for t in r["durations"]] or [float("nan")]

    def cpu_per_round(rs: list[dict[str, Any]]) -> float:
        rounds = sum(r["rounds"] for r in rs)
        return sum(r["cpu_s_per_round"] * r["rounds"] for r in rs) / max(1, rounds)

    calm_rs = kinds["calm"]
    calm, calm_cpu = statistics.fmean(durations(calm_rs)), cpu_per_round(calm_rs)
    calm_median = statistics.median(durations(calm_rs))
    parts = [
        f"cycles {len(calm_rs)} calm_round_s {calm:.3f} calm_cpu_s_per_round {calm_cpu:.4f}"
        f" calm rounds {pooled(calm_rs, 'rounds')}"
        f" honest {pooled(calm_rs, 'honest_accepted')}/{pooled(calm_rs, 'honest_trained')}"
        f" trained {pooled(calm_rs, 'groups_trained')}g/{pooled(calm_rs, 'tokens_trained')}t"
        f" log_B_per_min {max(r['log_bytes_per_min'] for r in calm_rs)}"
    ]
    for name, rs in kinds.items():
        if name == "calm":
            continue
        d = durations(rs)
        lo, hi = ratio_interval(durations(calm_rs), d)
        per_cycle = ",".join(
            f"{r['round_s'] / c['round_s']:.2f}" for r, c in zip(rs, calm_rs, strict=False)
        )
        gray = [s for r in rs for s in r["s_to_graylist"]]
        wr, wlo, whi = work_ratio(calm_rs, rs)
        refs = ""  # vs_5idle for every flood; vs_apart for 5sybil_under; vs_under for _far
        for ref, takes in (
            ("5idle", name != "5idle"),
            ("5sybil_apart", name == "5sybil_under"),
            ("5sybil_under", name == "5sybil_far"),
        ):
            if takes and ref in kinds:
                against, label = durations(kinds[ref]), ref.split("_")[-1]
                ilo, ihi = ratio_interval(against, d)
                mean = statistics.fmean(d) / statistics.fmean(against)
                refs += f" vs_{label} {mean:.2f} [{ilo:.2f}, {ihi:.2f}]"
                if ref != "5idle":
                    ar, alo, ahi = work_ratio(kinds[ref], rs)
                    refs += f" work_adjusted_vs_{label} {ar:.3f} [{alo:.3f}, {ahi:.3f}]"
        parts.append(
            f"{name}{'' if all(r['valid'] for r in rs) else ' INVALID'}"
            f" ratio {statistics.fmean(d) / calm:.2f} [{lo:.2f}, {hi:.2f}]"
            f" (median {statistics.median(d) / calm_median:.2f}) per_cycle {per_cycle}{refs}"
            f" node_cpu_per_round_ratio {cpu_per_round(rs) / calm_cpu:.2f}"
            f" work_adjusted {wr:.3f} [{wlo:.3f}, {whi:.3f}]"
            f" outside_training_share {[r['outside_training_share'] for r in rs]}"
            f" (calm {[r['outside_training_share'] for r in calm_rs]})"
            f" others_ms_per_msg_read {added_ms_per_msg(calm_rs, rs)}"
            f" frames_per_msg_read {per_msg_read(rs, 'frames_in')}"
            f" trainer_preempted_per_s {[r['trainer_preempted_per_s'] for r in rs]}"
            f" (calm {[r['trainer_preempted_per_s'] for r in calm_rs]})"
            f" others_woke_per_s {[r['others_woke_per_s'] for r in rs]}"
            f" (calm {[r['others_woke_per_s'] for r in calm_rs]})"
            f" rounds {pooled(rs, 'rounds')}"
            f" flooder_cpu_s {sum(r.get('cpu_s') or 0.0 for r in rs):.1f}"
            f" (flooding {sum(r.get('flood_cpu_s') or 0.0 for r in rs):.1f})"
            f" honest {pooled(rs, 'honest_accepted')}/{pooled(rs, 'honest_trained')}"
            f" trained {pooled(rs, 'groups_trained')}g/{pooled(rs, 'tokens_trained')}t"
            f" sent {pooled(rs, 'sent')} counted {pooled(rs, 'flood_counted')}"
            f" graylisted {sum(1 for s in gray if s is not None)}/{len(gray)} at_s {gray}"
            f" ingest_share {max(r['ingest_time_share_max'] or 0.0 for r in rs)}"
            f" net_share_at_end {[r.get('reading', {}).get('net_share') for r in rs]}"
            f" throttled_net {sum(r['counters'].get('throttled.net_share', 0) for r in rs)}"
            f" log_B_per_min {max(r['log_bytes_per_min'] for r in rs)}"
        )
    return "; ".join(parts)


async def amain(args: argparse.Namespace) -> int:
    from swarmnode.learn.model import cpu_has_bf16  # torch: only the measuring side

    tmp = Path(tempfile.mkdtemp(prefix="bench-flood-"))
    cpus = pin_cpus(args.pin)
    net_share = None if args.max_net_share == "null" else float(args.max_net_share)
    phases = [ph for ph in PHASES if ph[0] in args.phases.split(",")]
    link, listen = None, ["/ip4/127.0.0.1/tcp/0"]
    if any(ph[0] == "5sybil_far" for ph in phases):
        assert cpus is not None  # main: --pin
        link = FarLink(cpus, os.sched_getaffinity(0))  # the victim's CPU, everyone else's
        listen.append(f"/ip4/{link.near_ip}/tcp/0")
    victim = start_node(
        tmp,
        "victim",
        args.external,
        args.questions,
        args.model,
        cpus,
        args.verify,
        net_share,
        not args.no_batch_threads,
        args.net_process,
        args.idontwant,
        listen,
    )
    stop, ids, published = asyncio.Event(), [], [0]  # type: ignore[var-annotated]
    honest_task = None
    res: dict[str, dict[str, Any]] = {}
    try:
        addr = await victim.address()
        far_side = None if link is None else (link, await victim.address(link.near_ip))
        cpus = os.sched_getaffinity(victim.proc.pid)  # what it really runs on
        honest_task = asyncio.create_task(
            honest_peer(addr, tmp, tmp / "victim", stop, args.questions, 8, ids, published)
        )
        await victim.wait_rounds(args.warmup, 1800)
        while not ids:
            await asyncio.sleep(0.1)
        for i, (name, n, rate, groups) in itertools.product(range(args.cycles), phases):
            if rate == UNDER:
                rate, groups = args.under_rate, args.under_groups
            flood, key = (n, rate, groups), f"{name}{i}"
            seed = 5000 + 100 * len(res)  # each phase's flood items new to the victim
            res[key] = await phase(
                victim, key, flood, args.phase_s, addr, ids[0], published, seed, far_side
            )
    finally:
        await shut_down(victim, FLOODERS, stop, honest_task)
        if link is not None:
            link.close()
    print(f"victim data and log: {tmp}" if args.keep else "", flush=True)
    print(
        f"victim_cpus {','.join(map(str, sorted(cpus or ())))} cpu_bf16 {int(cpu_has_bf16())}"
        f" {summary(res)}",
        flush=True,
    )
    if not args.keep:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0 if all(r["valid"] for r in res.values()) else 1


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--phase-s", type=float, default=60.0, help="seconds each phase lasts")
    ap.add_argument("--cycles", type=int, default=1, help="times the phases run, in turn")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument(
        "--phases",
        default=",".join(p[0] for p in PHASES if p[0] not in NEEDS_ROOT),
        help="the phases a cycle runs, comma-separated, in this order: calm,5idle,1peer,5sybil,"
        "5sybil_under,5sybil_apart,5sybil_far (default: all but 5sybil_far, which needs root"
        " and --pin; without calm there are no ratios)",
    )
    ap.add_argument("--questions", type=int, default=2)
    ap.add_argument("--external", type=int, default=1, help="peer groups trained a round")
    ap.add_argument("--keep", action="store_true", help="keep the temp folder (logs)")
    ap.add_argument("--model", help=MODEL_HELP)
    ap.add_argument("--pin", action="store_true", help=PIN_HELP)
    ap.add_argument(
        "--max-net-share",
        default="0.1",
        help="the victim's swarm.max_net_share (default: the default, 0.1; null = no cap)",
    )
    ap.add_argument(
        "--no-batch-threads",
        action="store_true",
        help="the victim's swarm.batch_threads off (its network threads preempt the trainer)",
    )
    ap.add_argument("--net-process", action="store_true", help=NET_PROCESS_HELP)
    ap.add_argument(
        "--idontwant",
        action="store_true",
        help="the victim's swarm.idontwant on: it speaks gossipsub v1.2 and its stock "
        "py-libp2p peers send it an IDONTWANT frame for every message (before 2026-12-07)",
    )
    ap.add_argument(
        "--verify",
        default="on_arrival",
        choices=["on_arrival", "when_drawn"],
        help="the victim's sapo.verify (configs/public.yaml: when_drawn)",
    )
    ap.add_argument(
        "--under-rate", type=float, default=4.0, help="5sybil_under: messages/s per identity"
    )
    ap.add_argument("--under-groups", type=int, default=6, help="5sybil_under: groups per message")
    args = ap.parse_args()
    unknown = set(args.phases.split(",")) - {p[0] for p in PHASES}
    if unknown:
        known = ", ".join(p[0] for p in PHASES)
        ap.error(f"--phases: no phase {', '.join(sorted(unknown))} (known: {known})")
    if "5sybil_far" in args.phases.split(","):
        why = farlink_unavailable() or (None if args.pin else "it needs --pin (each side's CPUs)")
        if why is not None:
            ap.error(f"--phases 5sybil_far: {why}")
    sys.exit(asyncio.run(amain(args)))


if __name__ == "__main__":
    main()

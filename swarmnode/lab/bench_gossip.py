"""Gossip benchmark: N swarmnode transports on loopback, each in its own process.

Each node publishes one realistic round batch every ``--period`` seconds (default
1; random phase per node, as real rounds are not synchronised) for ``--seconds``;
every node records
when each peer's batch arrived. Latency = arrival time (stamped in the receiver's
libp2p thread) minus the ``created`` time the sender wrote just before publishing;
all processes share one clock. Delivery ratio = distinct (sender, round) pairs
received / pairs expected (every batch at every other node).

Topology: one routing-only bootstrap node (in this process) that every node dials;
nodes then learn each other through the DHT.

Each worker also measures its own CPU (user + system) from the start of publishing
to the end of the drain, less what the same time costs it idle (measured over
``IDLE_S`` of silence after the drain), and counts the yamux WINDOW_UPDATE frames it
sent: ``net_cpu_ms_per_msg`` is that CPU divided by the messages the nodes heard
(``cpu_ms_per_msg`` without the idle part taken off). ``--io`` picks yamux's
receive-credit rule in every process: ``swarmnode`` (``p2p/yamux_window``) or
``stock`` (py-libp2p's); ``frames_per_msg`` is the copies the workers read per
message heard. ``--compare stock,swarmnode`` runs the whole bench once per
setting, alternating ``--repeat`` times, and ends with a line that sets them side by
side; a setting may name gossipsub's D_high too (``swarmnode:12``: the rule before
2026-12-03, 2D).

``--buckets N`` adds latency and delivery by N-round bucket of the senders' rounds (a
backlog shows as latency growing from bucket to bucket) and each node's paced reads
(``throttled.*``). ``--join-at S`` starts the last node S seconds into the run: it
joins the running swarm and publishes until the others stop; it is expected to hear
the batches sent from ``JOIN_GRACE_S`` after it was in the mesh, and a ``joiner``
line shows what it heard and how its own batches were heard. ``--max-net-share X``
sets every trainer node's ``swarm.max_net_share`` (0: no cap); the bootstrap node
routes uncapped, as ``swarmnode start`` runs one.

The last line printed is ``name=value`` pairs (p50_ms, p99_ms, delivery, ...).

    .venv/bin/python scripts/bench_gossip.py --seconds 60
    .venv/bin/python scripts/bench_gossip.py --preset large --seconds 30
    .venv/bin/python scripts/bench_gossip.py --nodes 4 --seconds 30 --compare stock,swarmnode
    .venv/bin/python scripts/bench_gossip.py --nodes 12 --compare swarmnode:12,swarmnode
    .venv/bin/python scripts/bench_gossip.py --seconds 150 --buckets 10 --join-at 60
    .venv/bin/python scripts/bench_gossip.py --seconds 60 --buckets 6 --max-net-share 0
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from libp2p.stream_muxer.yamux.yamux import YamuxStream

from swarmnode.config import SwarmConfig
from swarmnode.learn.groups import ItemRef, RolloutGroup
from swarmnode.p2p import yamux_window
from swarmnode.p2p.transport import GossipTransport
from swarmnode.share.wire import decode_batch, encode_batch

PRESETS = {  # groups, completions per group, characters per completion
    "small": (2, 8, 200),
    "large": (8, 8, 2000),
}
DRAIN_S = 5.0
JOIN_GRACE_S = 2.0  # a late node is expected to hear batches sent this long after it is ready
IDLE_S = 8.0  # after the drain: each node's CPU with no messages
IO = ("swarmnode", "stock")  # yamux receive-credit rule: swarmnode's or py-libp2p's


def make_batch(node: int, round_: int, groups: int, completions: int, chars: int) -> bytes:
    rng = random.Random(node * 1_000_003 + round_)
    letters = "abcdefghijklmnopqrstuvwxyz 0123456789"
    gs = [
        RolloutGroup(
            ref=ItemRef("basic_arithmetic", {"min_terms": 2}, node, round_ * groups + i),
            question=f"What is {rng.randrange(1000)} + {rng.randrange(1000)}? " * 3,
            completions=["".join(rng.choices(letters, k=chars)) for _ in range(completions)],
            rewards=[float(rng.random() < 0.5) for _ in range(completions)],
            model="embedded:smollm2-135m",
        )
        for i in range(groups)
    ]
    return encode_batch("bench", round_, gs)


def swarm_cfg(
    bootstrap: list[str], degree: int = 6, high: int | None = None, **overrides: Any
) -> SwarmConfig:
    """A bench node's swarm section; ``overrides`` are further ``swarm.*`` fields
    (``role="bootstrap"`` routes uncapped, as a ``swarmnode start`` bootstrap does)."""
    return SwarmConfig(
        enabled=True,
        mesh_degree=degree,
        mesh_degree_high=high,
        name="bench",
        listen=["/ip4/127.0.0.1/tcp/0"],
        bootstrap=bootstrap,
        discovery_interval_s=1.0,
        inbox_size=4096,
        **overrides,
    )


def cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def use_io(io: str) -> None:
    """swarmnode's yamux credit rule, or py-libp2p's (``stock``)."""
    if io == "stock":
        yamux_window.uninstall()
    else:
        yamux_window.install()


def count_window_updates() -> list[int]:
    """A list that grows by each WINDOW_UPDATE this process sends (call once)."""
    sent: list[int] = []
    original = YamuxStream.send_window_update

    async def counting(self: YamuxStream, increment: int, skip_lock: bool = False) -> None:
        sent.append(increment)
        await original(self, increment, skip_lock)

    YamuxStream.send_window_update = counting  # type: ignore[method-assign]
    return sent


async def worker(args: argparse.Namespace) -> None:
    groups, completions, chars = PRESETS[args.preset]
    use_io(args.io)
    updates = count_window_updates()
    # --max-net-share: 0 is no cap (null); unset, the node's default
    cap = {} if args.max_net_share is None else {"max_net_share": args.max_net_share or None}
    t = GossipTransport(
        swarm_cfg([args.boot], args.degree, args.degree_high, **cap), Path(args.data_dir)
    )
    await t.start()
    deadline = time.monotonic() + 60
    while t.stats()["mesh_size"] < 1 and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    ready_at = time.time()
    print(f"READY {t.peer_id}", flush=True)
    line = await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    words = line.split()
    start_at = float(words[1])
    while time.time() < start_at:
        await asyncio.sleep(0.01)
    cpu0, updates0, busy_t0 = cpu_s(), len(updates), time.monotonic()
    phase = random.Random(args.worker).random()
    arrivals: dict[str, list[tuple[int, float]]] = {}
    sizes: list[int] = []
    sent_at: list[float] = []
    sent = 0
    # a late joiner publishes until the swarm's end (its start-up is not its time)
    end_publish = float(words[2]) if len(words) > 2 else start_at + args.seconds
    next_pub = start_at + phase
    # Waits on the inbox between publications, as a node's exchange does: a poll loop
    # here (it was 10 ms) costs about 0.03 of a core, which the node's CPU cap
    # (swarm.max_net_share, 0.1) counts as its own reading.
    while (now := time.time()) < end_publish + DRAIN_S:
        if now >= next_pub and next_pub < end_publish:
            payload = make_batch(args.worker, sent, groups, completions, chars)
            sizes.append(len(payload))
            sent_at.append(time.time())
            await t.publish(payload)
            sent += 1
            next_pub += args.period
            continue
        until = next_pub if next_pub < end_publish else end_publish + DRAIN_S
        first = await t.receive(timeout=max(0.0, min(until - now, 1.0)))
        for r in ([first] if first is not None else []) + t.inbox.drain():
            b = decode_batch(r.payload)
            lat = r.received_at - b.groups[0].created
            arrivals.setdefault(r.peer_id, []).append((b.round, lat))
    cpu, busy_s = cpu_s() - cpu0, time.monotonic() - busy_t0
    # Then the same wait with nothing sent: what heartbeats and the loop cost anyway.
    idle_t0, idle_cpu0 = time.monotonic(), cpu_s()
    while (left := idle_t0 + IDLE_S - time.monotonic()) > 0:
        await t.receive(timeout=min(left, 1.0))
        t.inbox.drain()
    idle_cpu = (cpu_s() - idle_cpu0) / IDLE_S * busy_s
    st = t.stats()
    print(
        "RESULT "
        + json.dumps(
            {
                "cpu_s": cpu,
                "idle_cpu_s": idle_cpu,
                "window_updates": len(updates) - updates0,
                "peer_id": st["peer_id"],
                "sent": sent,
                "sent_at": sent_at,
                "ready_at": ready_at,
                "joiner": args.joiner,
                "sizes": sizes,
                "arrivals": arrivals,
                "peers": st["num_peers"],
                "mesh": st["mesh_size"],
                "rejected": st["rejected"],
                "inbox_dropped": st["inbox_dropped"],
                "counters": st["counters"],
            }
        ),
        flush=True,
    )
    await t.stop()


def setting(text: str) -> tuple[str, int | None]:
    """A ``--compare`` setting: an ``--io`` name, optionally ``:D_high``.

    >>> setting("swarmnode:12"), setting("stock")
    (('swarmnode', 12), ('stock', None))
    >>> setting("swarmnode:lots")
    Traceback (most recent call last):
    SystemExit: --compare: bad setting 'swarmnode:lots'; an --io name (swarmnode, stock)[:D_high]
    """
    io, _, high = text.partition(":")
    if io not in IO or (high and not high.isdigit()):
        raise SystemExit(
            f"--compare: bad setting {text!r}; an --io name ({', '.join(IO)})[:D_high]"
        )
    return io, int(high) if high else None


async def coordinator(args: argparse.Namespace, name: str) -> dict[str, Any]:
    io, high = setting(name)
    high = high or args.degree_high
    use_io(io)  # the bootstrap node too
    tmp = Path(tempfile.mkdtemp(prefix="bench_gossip_"))
    boot = GossipTransport(swarm_cfg([], args.degree, high, role="bootstrap"), tmp / "boot")
    await boot.start()
    addr = boot.stats()["listen_addrs"][0]

    def spawn(i: int, seconds: int, joiner: bool = False) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "swarmnode.lab.bench_gossip",
                "--worker",
                str(i),
                "--boot",
                addr,
                "--data-dir",
                str(tmp / f"n{i}"),
                "--seconds",
                str(seconds),
                "--preset",
                args.preset,
                "--period",
                str(args.period),
                "--degree",
                str(args.degree),
                "--io",
                io,
                *(["--degree-high", str(high)] if high else []),
                *(
                    ["--max-net-share", str(args.max_net_share)]
                    if args.max_net_share is not None
                    else []
                ),
                *(["--joiner"] if joiner else []),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )

    async def go(ps: list[subprocess.Popen[str]], delay: float, end: str = "") -> float:
        for p in ps:
            assert p.stdout is not None
            line = await asyncio.wait_for(loop.run_in_executor(None, p.stdout.readline), 120)
            if not line.startswith("READY"):
                raise RuntimeError(f"worker failed to start: {line!r}")
        at = time.time() + delay
        for p in ps:
            assert p.stdin is not None
            p.stdin.write(f"GO {at} {end}\n")
            p.stdin.flush()
        return at

    loop = asyncio.get_running_loop()
    first = args.nodes - 1 if args.join_at else args.nodes
    procs = [spawn(i, args.seconds) for i in range(first)]
    try:
        start_at = await go(procs, 3.0)  # let nodes meet each other through the DHT
        if args.join_at:  # one more node joins the running swarm, publishing to its end
            await asyncio.sleep(max(0.0, start_at + args.join_at - time.time()))
            late = spawn(first, max(1, round(start_at + args.seconds - time.time())), True)
            procs.append(late)
            await go([late], 0.0, str(start_at + args.seconds))
        results = []
        timeout = args.seconds + DRAIN_S + IDLE_S + 60
        for p in procs:
            assert p.stdout is not None
            while True:
                line = await asyncio.wait_for(
                    loop.run_in_executor(None, p.stdout.readline), timeout
                )
                if not line:
                    raise RuntimeError("worker exited without a result")
                if line.startswith("RESULT "):
                    results.append(json.loads(line[7:]))
                    break
        boot_stats = boot.stats()
    finally:
        for p in procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
        await boot.stop()
    return report(args, name, results, boot_stats)


def report(
    args: argparse.Namespace, io: str, results: list[dict[str, Any]], boot: Mapping[str, Any]
) -> dict[str, Any]:
    sent = {r["peer_id"]: r["sent"] for r in results}
    lats: list[float] = []
    delivered = expected = 0
    for r in results:
        for sender, s_r in ((s["peer_id"], s) for s in results):
            if sender == r["peer_id"]:
                continue
            due = expected_rounds(s_r, r)
            expected += len(due)
            got = [(rd, lat) for rd, lat in r["arrivals"].get(sender, []) if rd in due]
            delivered += len({rd for rd, _ in got})
            lats.extend(lat for _, lat in got)
    lats.sort()
    if any(r.get("joiner") for r in results):
        print(joiner_line(results))
    sizes = [s for r in results for s in r["sizes"]]

    def pct(q: float) -> float:
        return 1000 * lats[min(len(lats) - 1, int(q * len(lats)))] if lats else float("nan")

    if args.buckets:
        print(bucket_table(results, sent, args.buckets))
    throttled = {
        k: sum(r["counters"].get(k, 0) for r in results)
        for k in ("throttled.reads", "throttled.ms", "throttled.net_share")
    }
    print("workers, summed: " + " ".join(f"{k}={v}" for k, v in throttled.items()))
    for r in results:
        print(
            f"node {r['peer_id'][-6:]}: sent={r['sent']} peers={r['peers']} "
            f"mesh={r['mesh']} rejected={r['rejected']} inbox_dropped={r['inbox_dropped']} "
            f"throttled.reads={r['counters'].get('throttled.reads', 0)} "
            f"throttled.ms={r['counters'].get('throttled.ms', 0)} "
            f"throttled.net_share={r['counters'].get('throttled.net_share', 0)} "
            f"(newcomers {r['counters'].get('throttled.net_share.newcomers', 0)}) "
            f"throttled.pool={r['counters'].get('throttled.pool', 0)} "
            f"frames_in={r['counters'].get('frames_in', 0)} "
            f"bytes_in={r['counters'].get('bytes_in', 0)}"
            + (" (joined late)" if r.get("joiner") else "")
        )
    print(
        f"bootstrap: peers={boot['num_peers']} mesh={boot['mesh_size']} counters={boot['counters']}"
    )
    cpu = sum(r["cpu_s"] for r in results)
    net = cpu - sum(r["idle_cpu_s"] for r in results)
    fig = {
        "cpu_ms_per_msg": 1000 * cpu / max(1, delivered),
        "net_cpu_ms_per_msg": 1000 * net / max(1, delivered),
        "window_updates_per_msg": sum(r["window_updates"] for r in results) / max(1, delivered),
        # copies read per message heard (the workers' frames; about one message a frame)
        "frames_per_msg": sum(r["counters"].get("frames_in", 0) for r in results)
        / max(1, delivered),
        "delivered": delivered,
        "expected": expected,
    }
    print(
        f"io={io} nodes={args.nodes} seconds={args.seconds} preset={args.preset} "
        f"degree={args.degree} period_s={args.period} cpu_s={cpu:.1f} idle_share_s={cpu - net:.1f} "
        f"cpu_ms_per_msg={fig['cpu_ms_per_msg']:.2f} "
        f"net_cpu_ms_per_msg={fig['net_cpu_ms_per_msg']:.2f} "
        f"window_updates_per_msg={fig['window_updates_per_msg']:.2f} "
        f"frames_per_msg={fig['frames_per_msg']:.2f} "
        f"msgs_sent={sum(sent.values())} expected={expected} delivered={delivered} "
        f"delivery={delivered / expected if expected else float('nan'):.4f} "
        f"p50_ms={pct(0.50):.1f} p99_ms={pct(0.99):.1f} max_ms={1000 * max(lats, default=0):.1f} "
        f"mean_ms={1000 * statistics.fmean(lats) if lats else float('nan'):.1f} "
        f"bytes_per_msg={statistics.fmean(sizes) if sizes else 0:.0f}",
        flush=True,
    )
    return fig


def expected_rounds(sender: Mapping[str, Any], receiver: Mapping[str, Any]) -> set[int]:
    """The sender's rounds the receiver should hear: all of them, or for a node that
    joined late, those published from JOIN_GRACE_S after it was in the mesh."""
    since = receiver["ready_at"] + JOIN_GRACE_S if receiver.get("joiner") else 0.0
    return {i for i, at in enumerate(sender["sent_at"]) if at >= since}


def joiner_line(results: list[dict[str, Any]]) -> str:
    """What the node that joined late heard, and how its own batches were heard."""
    j = next(r for r in results if r.get("joiner"))

    def view(pairs: list[tuple[Mapping[str, Any], Mapping[str, Any]]]) -> str:
        lats, got, want = [], 0, 0
        for s, r in pairs:
            due = expected_rounds(s, r)
            want += len(due)
            arr = [(rd, lat) for rd, lat in r["arrivals"].get(s["peer_id"], []) if rd in due]
            got += len({rd for rd, _ in arr})
            lats += [lat for _, lat in arr]
        lats.sort()
        if not lats:
            return f"delivered {got}/{want}"
        p = [1000 * lats[min(len(lats) - 1, int(q * len(lats)))] for q in (0.5, 0.99)]
        top = 1000 * lats[-1]
        return f"p50 {p[0]:.0f} ms, p99 {p[1]:.0f} ms, max {top:.0f} ms, delivered {got}/{want}"

    others = [r for r in results if r is not j]
    return (
        f"joiner ({j['sent']} batches): heard {view([(s, j) for s in others])} | "
        f"its batches at the others: {view([(j, r) for r in others])}"
    )


def bucket_table(results: list[dict[str, Any]], sent: Mapping[str, int], size: int) -> str:
    """Latency and delivery by ``size``-round bucket of the senders' rounds: a backlog
    shows as latency that grows from bucket to bucket."""
    lats: dict[int, list[float]] = {}
    got: dict[int, int] = {}
    want: dict[int, int] = {}
    by_id = {r["peer_id"]: r for r in results}
    for r in results:
        for sender in sent:
            if sender == r["peer_id"]:
                continue
            due = expected_rounds(by_id[sender], r)
            for rd in due:
                want[rd // size] = want.get(rd // size, 0) + 1
            seen = set()
            for rd, lat in r["arrivals"].get(sender, []):
                if rd not in due:
                    continue
                lats.setdefault(rd // size, []).append(lat)
                if rd not in seen:
                    seen.add(rd)
                    got[rd // size] = got.get(rd // size, 0) + 1
    rows = ["| rounds | p50 ms | p99 ms | max ms | delivered |", "|---|---|---|---|---|"]
    for b in sorted(want):
        xs = sorted(lats.get(b, []))

        def q(f: float, xs: list[float] = xs) -> str:
            return f"{1000 * xs[min(len(xs) - 1, int(f * len(xs)))]:.0f}" if xs else "-"

        rows.append(
            f"| {b * size}-{b * size + size - 1} | {q(0.5)} | {q(0.99)} | "
            f"{q(1.0)} | {got.get(b, 0)}/{want[b]} |"
        )
    return "\n".join(rows)


async def compare(args: argparse.Namespace) -> None:
    """Each ``--compare`` setting ``--repeat`` times, alternating; then side by side."""
    ios = args.compare.split(",") if args.compare else [args.io]
    for io in ios:
        setting(io)  # refused before any run
    figs: dict[str, list[dict[str, Any]]] = {io: [] for io in ios}
    for _ in range(args.repeat):
        for io in ios:
            figs[io].append(await coordinator(args, io))
    if len(ios) < 2:
        return
    parts = []
    base = statistics.fmean(f["net_cpu_ms_per_msg"] for f in figs[ios[0]])
    for io in ios:
        cpu = statistics.fmean(f["net_cpu_ms_per_msg"] for f in figs[io])
        wu = statistics.fmean(f["window_updates_per_msg"] for f in figs[io])
        fr = statistics.fmean(f["frames_per_msg"] for f in figs[io])
        got = sum(f["delivered"] for f in figs[io])
        want = sum(f["expected"] for f in figs[io])
        parts.append(
            f"{io}: net_cpu_ms_per_msg {cpu:.2f} ({cpu / base:.2f}x) "
            f"window_updates_per_msg {wu:.2f} frames_per_msg {fr:.2f} delivered {got}/{want}"
        )
    print(f"compare, {args.repeat} run(s) each | " + " | ".join(parts), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", type=int, default=8)
    ap.add_argument("--seconds", type=int, default=60)
    ap.add_argument("--preset", choices=sorted(PRESETS), default="small")
    ap.add_argument("--period", type=float, default=1.0, help="seconds between a node's batches")
    ap.add_argument("--degree", type=int, default=6, help="gossipsub mesh degree D")
    ap.add_argument("--degree-high", type=int, help="gossipsub D_high (default: the node's, D + 2)")
    ap.add_argument("--io", choices=IO, default="swarmnode", help="py-libp2p I/O overrides")
    ap.add_argument(
        "--compare",
        help="comma-separated --io settings to run side by side, each optionally :D_high",
    )
    ap.add_argument("--repeat", type=int, default=1, help="runs per --compare setting")
    ap.add_argument(
        "--buckets", type=int, default=0, metavar="N", help="latency by N-round buckets"
    )
    ap.add_argument(
        "--join-at",
        type=float,
        default=0.0,
        metavar="S",
        help="the last node joins the running swarm S seconds into the run",
    )
    ap.add_argument(
        "--max-net-share",
        type=float,
        help="every node's swarm.max_net_share (0: no cap; default: the node's)",
    )
    ap.add_argument("--joiner", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--boot", help=argparse.SUPPRESS)
    ap.add_argument("--data-dir", help=argparse.SUPPRESS)
    args = ap.parse_args()
    asyncio.run(worker(args) if args.worker is not None else compare(args))


if __name__ == "__main__":
    main()

"""Ingestion benchmark: the CPU a node spends on peers' messages, in one process.

What a message costs after libp2p has handed it over: ``decode_batch`` (the
transport's validator does it once), ``Batch.rollout_groups``, and
``IngestQueue.offer`` (catalog check, regeneration of each item with reasoning-gym,
question match, re-scoring every completion, dedup), and what the round's sampler
then costs to take J groups (``SwarmSampler.compose``: with ``sapo.verify:
when_drawn`` this is where the drawn groups are verified). The messages are what
bench_scale's honest peers send: ``--groups`` catalog groups of G = 8 with true
reward claims, from ``--peers`` senders; a round is composed every
``--round-msgs`` messages (200 peers every ~10 s and ~10 s rounds: 200). Each
``--verify`` mode runs on the same messages in the same run, without group
completion (configs/public.yaml's setting; ``when_drawn`` needs it off).

CPU is the process's own (``time.process_time``), so the figure holds on a loaded
machine where wall time would not. One line per mode, then a last line with each
mode's CPU per message (offer plus its share of the rounds' compose) side by side,
and the groups offered, accepted, verified and taken for training.

    .venv/bin/python scripts/bench_ingest.py --messages 1000
"""

from __future__ import annotations

import argparse
import time

from swarmnode.config import parse_config
from swarmnode.lab.bench_swarm import TASKS
from swarmnode.lab.flooder import flood_payload, flood_pool
from swarmnode.learn.rewards import make_scorer
from swarmnode.learn.tasks import preload
from swarmnode.share.ingest import Catalog, IngestQueue
from swarmnode.share.sampler import SwarmSampler
from swarmnode.share.wire import decode_batch


def payloads(n: int, groups: int) -> list[bytes]:
    """``n`` wire messages of ``groups`` distinct catalog groups each (bench_flood's)."""
    pool = flood_pool(5000, 100, n * groups)  # task seed 5100, as before --flood-seed
    return [flood_payload(pool, i, groups) for i in range(n)]


def run(mode: str, msgs: list[bytes], args: argparse.Namespace) -> dict[str, float]:
    """Offer every message to a fresh queue in ``mode``; compose a round every
    ``round_msgs``. Returns CPU ms per message by step and the counts."""
    cfg = parse_config({"tasks": TASKS, "sapo": {"verify": mode, "external_groups": args.j}})
    queue = IngestQueue(
        cfg.sapo, Catalog([*cfg.tasks.datasets, *cfg.sapo.extra_catalog]), make_scorer(0.0)
    )
    sampler = SwarmSampler(cfg.sapo.model_copy(update={"local_groups": 0}), queue, seed=0)
    cpu = {"decode": 0.0, "groups": 0.0, "offer": 0.0, "compose": 0.0}
    taken = rounds = 0
    for i, data in enumerate(msgs):
        peer = f"peer{i % args.peers}"
        t0 = time.process_time()
        batch = decode_batch(data)
        t1 = time.process_time()
        groups = batch.rollout_groups(peer)
        t2 = time.process_time()
        queue.offer(peer, groups)
        t3 = time.process_time()
        cpu["decode"] += t1 - t0
        cpu["groups"] += t2 - t1
        cpu["offer"] += t3 - t2
        if (i + 1) % args.round_msgs == 0:
            t4 = time.process_time()
            taken += sampler.compose(rounds, []).external
            cpu["compose"] += time.process_time() - t4
            rounds += 1
    rep = queue.report()
    out = {k: 1000 * v / len(msgs) for k, v in cpu.items()}
    out["total"] = sum(out.values())
    out |= {
        "offered": len(msgs) * args.groups,
        "accepted": rep["ingest_accepted"],
        "verified": rep["ingest_accepted"] - rep["ingest_unverified"] + rep["ingest_late_verified"],
        "rejected": sum(rep["ingest_rejected"].values()),
        "rounds": rounds,
        "taken": taken,
    }
    print(
        f"verify {mode}: messages {len(msgs)} groups_offered {out['offered']}"
        f" accepted {out['accepted']} verified {out['verified']} rejected {out['rejected']}"
        f" rounds {rounds} taken {taken} cpu_ms_per_msg {out['total']:.3f}"
        + "".join(f" {k}_ms {out[k]:.3f}" for k in cpu),
        flush=True,
    )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=1000)
    ap.add_argument("--groups", type=int, default=4, help="groups in one message")
    ap.add_argument("--peers", type=int, default=200, help="distinct senders")
    ap.add_argument("--round-msgs", type=int, default=200, help="messages between rounds")
    ap.add_argument("--j", type=int, default=2, help="external groups per round (sapo J)")
    ap.add_argument("--verify", default="on_arrival,when_drawn", help="modes, comma-separated")
    args = ap.parse_args()
    preload()
    msgs = payloads(args.messages, args.groups)
    res = {m: run(m, msgs, args) for m in args.verify.split(",")}
    base = next(iter(res.values()))["total"]
    print(
        " ".join(
            f"{m}: cpu_ms_per_msg {r['total']:.3f} ({r['total'] / base:.2f}x)"
            f" offer_ms {r['offer']:.3f} compose_ms_per_msg {r['compose']:.3f}"
            f" groups offered {r['offered']:.0f} accepted {r['accepted']:.0f}"
            f" verified {r['verified']:.0f} taken {r['taken']:.0f} in {r['rounds']:.0f} rounds;"
            for m, r in res.items()
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()

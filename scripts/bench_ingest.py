"""Ingestion benchmark: the CPU a node spends verifying one peer message, in one process.

What a message costs after libp2p has handed it over: ``decode_batch`` (the
transport's validator does it once), ``Batch.rollout_groups``, and
``IngestQueue.offer`` (catalog check, regeneration of each item with reasoning-gym,
question match, re-scoring every completion, dedup, the answer book for group
completion). The messages are what bench_scale's honest peers send: ``--groups``
catalog groups of G = 8 with true reward claims, from ``--peers`` senders.

CPU is the process's own (``time.process_time``), so the figure holds on a loaded
machine where wall time would not. The last line carries the messages and groups
offered, accepted and rejected, and the CPU per message of each step.

    .venv/bin/python scripts/bench_ingest.py --messages 500
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))

from bench_flood import flood_payload, flood_pool  # noqa: E402
from bench_swarm import TASKS  # noqa: E402

from swarmnode.completion import AnswerBook  # noqa: E402
from swarmnode.config import parse_config  # noqa: E402
from swarmnode.ingest import Catalog, IngestQueue  # noqa: E402
from swarmnode.p2p.wire import decode_batch  # noqa: E402
from swarmnode.rewards import make_scorer  # noqa: E402
from swarmnode.tasks import preload  # noqa: E402


def payloads(n: int, groups: int) -> list[bytes]:
    """``n`` wire messages of ``groups`` distinct catalog groups each (bench_flood's)."""
    pool = flood_pool(100, n * groups)
    return [flood_payload(pool, i, groups) for i in range(n)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=500)
    ap.add_argument("--groups", type=int, default=4, help="groups in one message")
    ap.add_argument("--peers", type=int, default=200, help="distinct senders")
    args = ap.parse_args()
    preload()
    cfg = parse_config({"tasks": TASKS, "sapo": {"complete_groups": True}})
    queue = IngestQueue(
        cfg.sapo,
        Catalog([*cfg.tasks.datasets, *cfg.sapo.extra_catalog]),
        make_scorer(0.0),
        answers=AnswerBook(),
    )
    msgs = payloads(args.messages, args.groups)
    cpu = {"decode": 0.0, "groups": 0.0, "offer": 0.0}
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
    rep = queue.report()
    per_msg = {k: 1000 * v / len(msgs) for k, v in cpu.items()}
    print(
        f"messages {len(msgs)} groups_offered {len(msgs) * args.groups}"
        f" accepted {rep['ingest_accepted']} rejected {sum(rep['ingest_rejected'].values())}"
        f" cpu_ms_per_msg {sum(per_msg.values()):.3f}"
        + "".join(f" {k}_ms {v:.3f}" for k, v in per_msg.items()),
        flush=True,
    )


if __name__ == "__main__":
    main()

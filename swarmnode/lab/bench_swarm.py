"""Swarm cost benchmark: a node's round time in a 4-node swarm vs the same node alone,
and bytes on the wire per round vs one LoRA gradient.

Round time. Two ``swarmnode start`` processes run *side by side*, started together,
with the same config, model and seeds, so they generate and train on exactly the
same groups and machine noise hits both alike:
- ``alone``: ``swarm.enabled: false``.
- ``swarm``: in a 4-node swarm with three peers run by this script (three libp2p
  identities, one process). Every time ``swarm`` finishes a round, each peer
  publishes one realistic batch (same shape as the node's own: Q groups x G
  completions of real catalog items, some right and some wrong, so that the node
  verifies each one by regeneration and re-scores it), within the pace a node keeps
  (``OwnPace``, 2.5 messages a second under the default origin rate: without it, at
  the tiny model's 0.09 s rounds each peer sent 11 a second against the node's
  per-originator limit of 5, and the node heard about one batch a round of the
  three sent). The node publishes its own groups within the same pace, verifies what
  it hears, and ``msgs_in_per_round`` in the output says how much that was. With the
  default ``--external 0`` the update holds only local groups, so the two nodes do
  identical compute and the difference is the price of being in the swarm
  (libp2p thread, encoding, validation, verification). ``--external J`` also trains
  on J external groups (then more compute per round, by design).
Round time = time between consecutive metrics records, after ``--warmup`` rounds;
the figure is the ratio of medians (goal: <= 1.05).

Model: a tiny Llama (swarmnode/lab/tiny.py: 2 layers, hidden 64) by default, because
two embedded-model nodes on this 2-core machine would take minutes per round each;
``--model`` takes any folder or ``embedded:smollm2-135m``.

Bytes. ``msg_bytes`` is the node's own message per round here (tiny model);
``embedded_msg_bytes`` encodes one real round of the embedded SmolLM2-135M with the
default rollout settings (2 questions x 8 completions, <= 48 new tokens);
``lora_grad_bytes`` is the fp32 size of one LoRA gradient of that model (r=16 on every
linear layer but the head), counted on the meta device without loading weights.
A gossip message is sent once to each mesh peer (<= D = 6), so wire bytes per round
are at most ``D x msg_bytes`` out; a gradient-sharing scheme would send the whole
gradient to each peer as well.

    .venv/bin/python scripts/bench_swarm.py --rounds 30
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from swarmnode.config import SwarmConfig, parse_config
from swarmnode.lab import REPO
from swarmnode.learn.groups import RolloutGroup
from swarmnode.learn.metrics import read_rounds
from swarmnode.learn.tasks import TaskMix
from swarmnode.ops.control import ControlError, query_status
from swarmnode.p2p.transport import GossipTransport
from swarmnode.share.publish_rate import OwnPace
from swarmnode.share.wire import encode_batch

TASKS = {
    "datasets": [
        {
            "name": "basic_arithmetic",
            "config": {
                "min_terms": 2,
                "max_terms": 3,
                "min_digits": 1,
                "max_digits": 2,
                "operators": ["+", "-"],
                "allow_parentheses": False,
                "allow_negation": False,
            },
        }
    ]
}


def node_cfg(
    model: str, data: Path, swarm: bool, external: int, q: int, g: int, tokens: int
) -> dict[str, Any]:
    return {
        "node": {"name": data.name, "data_dir": str(data)},
        "model": {"name": model, "device": "cpu", "threads": 1, "lora": {"rank": 4, "alpha": 8}},
        "tasks": TASKS,
        "rollout": {
            "questions_per_round": q,
            "completions_per_question": g,
            "max_new_tokens": tokens,
        },
        "train": {"learning_rate": 0.01},
        "checkpoint": {"every_rounds": 100_000},
        "sapo": {"local_groups": q - external if swarm else None, "external_groups": external},
        "swarm": {
            "enabled": swarm,
            "listen": ["/ip4/127.0.0.1/tcp/0"],
            "discovery_interval_s": 0.5,
        },
    }


def start(cfg: dict[str, Any], path: Path) -> subprocess.Popen[bytes]:
    path.write_text(yaml.safe_dump(cfg))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    log = path.with_suffix(".log").open("wb")
    return subprocess.Popen(
        [sys.executable, "-m", "swarmnode.cli", "start", "--config", str(path)],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=log,
    )


def peer_batch(
    mix: TaskMix, round_: int, q: int, g: int, chars: int, rng: random.Random
) -> list[RolloutGroup]:
    groups = []
    for ref in mix.sample(round_, q):
        entry = mix.regenerate(ref)
        answer = str(entry["answer"])
        comps = []
        for _ in range(g):
            guess = answer if rng.random() < 0.4 else str(int(answer) + rng.choice([-1, 1, 2]))
            text = f"Adding the terms one by one gives {guess}. <answer>{guess}</answer>"
            comps.append(text + " " * max(0, chars - len(text)))
        groups.append(RolloutGroup(ref, entry["question"], comps, [0.0] * g, model="replay"))
    return groups


async def replay_peers(
    args: argparse.Namespace, tmp: Path, node_data: Path, stop: asyncio.Event
) -> None:
    """Three peers that publish one batch each whenever the node finishes a round,
    each within ``OwnPace`` (rounds over it are not published, as a node's are not)."""
    addr = None
    while addr is None:
        try:
            addr = query_status(node_data, timeout=2.0)["swarm"]["listen_addrs"][0]
        except (ControlError, IndexError, KeyError, TypeError):
            await asyncio.sleep(0.5)
    cfg = SwarmConfig(
        enabled=True, listen=["/ip4/127.0.0.1/tcp/0"], bootstrap=[addr], discovery_interval_s=0.5
    )
    peers = [GossipTransport(cfg, tmp / f"peer{i}") for i in range(args.peers)]
    mixes = []
    for i in range(args.peers):
        spec = {**TASKS, "seed": 1000 + i}
        mixes.append(TaskMix(parse_config({"tasks": spec}).tasks))
    for p in peers:
        await p.start()
    paces = [
        OwnPace(cfg.origin_msgs_per_s, cfg.origin_msgs_burst, cfg.origin_groups_per_s)
        for _ in peers
    ]
    rng = random.Random(0)
    seen = 0
    try:
        while not stop.is_set():
            n = len(read_rounds(node_data / "metrics.jsonl"))
            for r in range(seen + 1, n + 1):
                for p, mix, pace in zip(peers, mixes, paces, strict=True):
                    if not pace.admit(args.questions):
                        continue
                    groups = peer_batch(mix, r, args.questions, args.completions, args.chars, rng)
                    await p.publish(encode_batch("default", r, groups))
            seen = n
            await asyncio.sleep(0.05)
    finally:
        for p in peers:
            await p.stop()


def round_times(path: Path, warmup: int, rounds: int) -> list[float]:
    recs = [r for r in read_rounds(path) if r.round <= rounds]
    t = [r.time for r in recs]
    return [b - a for a, b in zip(t[warmup:], t[warmup + 1 :], strict=False)]


def med(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def lora_grad_bytes() -> int:
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoConfig, AutoModelForCausalLM

    from swarmnode.config import ModelConfig
    from swarmnode.learn.model import resolve_source

    cfg = AutoConfig.from_pretrained(resolve_source(ModelConfig()))
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(cfg)
    lora = get_peft_model(model, LoraConfig(r=16, lora_alpha=32, target_modules="all-linear"))
    n = sum(p.numel() for p in lora.parameters() if p.requires_grad)
    return 4 * n


def embedded_msg_bytes() -> tuple[int, int]:
    from swarmnode.learn.model import load_policy
    from swarmnode.learn.trainer import Trainer

    cfg = parse_config({"model": {"device": "cpu", "threads": 2}})
    trainer = Trainer(cfg, load_policy(cfg.model, seed=0))
    groups, _ = trainer.rollout(1)
    return len(encode_batch("default", 1, groups)), sum(len(g.completions) for g in groups)


async def amain(args: argparse.Namespace) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="bench-swarm-"))
    model = args.model
    if model is None:
        from swarmnode.lab.tiny import make_tiny_model

        model = str(make_tiny_model(tmp / "tiny", "llama"))
    shape = (args.questions, args.completions, args.tokens)
    procs = {
        "alone": start(node_cfg(model, tmp / "alone", False, 0, *shape), tmp / "alone.yaml"),
        "swarm": start(
            node_cfg(model, tmp / "swarm", True, args.external, *shape), tmp / "swarm.yaml"
        ),
    }
    stop = asyncio.Event()
    peers = asyncio.create_task(replay_peers(args, tmp, tmp / "swarm", stop))
    status: dict[str, Any] = {}
    deadline = time.monotonic() + args.timeout
    try:
        while any(len(read_rounds(tmp / k / "metrics.jsonl")) < args.rounds for k in procs):
            for k, p in procs.items():
                if p.poll() is not None:
                    raise SystemExit(f"{k} exited: {(tmp / f'{k}.log').read_text()[-2000:]}")
            if time.monotonic() > deadline:
                raise SystemExit(f"timed out after {args.timeout}s")
            if peers.done():
                peers.result()
            await asyncio.sleep(0.5)
        status = query_status(tmp / "swarm", timeout=5.0)
    finally:
        stop.set()
        for p in procs.values():
            p.terminate()
        for p in procs.values():
            p.wait(timeout=60)
        await asyncio.wait_for(peers, 30)
    times = {k: round_times(tmp / k / "metrics.jsonl", args.warmup, args.rounds) for k in procs}
    recs = {k: read_rounds(tmp / k / "metrics.jsonl")[args.warmup : args.rounds] for k in procs}
    sw = recs["swarm"]
    out: dict[str, Any] = {
        "model": "tiny-llama" if args.model is None else args.model,
        "rounds": len(times["swarm"]),
        "alone_round_s": round(med(times["alone"]), 4),
        "swarm_round_s": round(med(times["swarm"]), 4),
        "ratio": round(med(times["swarm"]) / med(times["alone"]), 3),
        "alone_gen_s": round(med([r.gen_seconds for r in recs["alone"]]), 4),
        "swarm_gen_s": round(med([r.gen_seconds for r in recs["swarm"]]), 4),
        "alone_train_s": round(med([r.train_seconds for r in recs["alone"]]), 4),
        "swarm_train_s": round(med([r.train_seconds for r in recs["swarm"]]), 4),
        "external_per_round": round(statistics.mean(r.external_groups for r in sw), 2),
        "peers": sw[-1].peers,
        "msgs_in_per_round": round((sw[-1].msgs_in - sw[0].msgs_in) / max(1, len(sw) - 1), 2),
        "ingest_accepted": sw[-1].ingest_accepted,
        "ingest_rejected": json.dumps(sw[-1].ingest_rejected, separators=(",", ":")),
        "msg_bytes": round(statistics.mean(r.published_bytes for r in sw)),
        "bytes_in_per_round": round(status["swarm"]["bytes_in"] / max(1, status["node"]["round"])),
    }
    if not args.keep:  # kept on failure, for the logs
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--peers", type=int, default=3, help="replay peers (swarm size - 1)")
    ap.add_argument("--questions", type=int, default=4)
    ap.add_argument("--completions", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=32, help="max_new_tokens")
    ap.add_argument("--chars", type=int, default=120, help="characters per peer completion")
    ap.add_argument("--external", type=int, default=0, help="J of the swarm node")
    ap.add_argument("--model", default=None, help="model folder (default: a tiny llama)")
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--keep", action="store_true", help="keep the temporary run folder")
    ap.add_argument("--skip-embedded", action="store_true", help="skip the embedded-model bytes")
    args = ap.parse_args()
    out = asyncio.run(amain(args))
    out["lora_grad_bytes"] = lora_grad_bytes()
    if not args.skip_embedded:
        size, completions = embedded_msg_bytes()
        out["embedded_msg_bytes"] = size
        out["embedded_completions"] = completions
        out["grad_over_msg"] = round(out["lora_grad_bytes"] / size, 1)
    print(json.dumps(out, indent=1), file=sys.stderr)
    print(" ".join(f"{k}={v}" for k, v in out.items()))


if __name__ == "__main__":
    main()

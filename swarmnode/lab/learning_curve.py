"""Learning curve of one node training alone: does the reward rise?

Runs `swarmnode start` on a config (default configs/node.yaml: the embedded
SmolLM2-135M-Instruct on CPU) for --rounds rounds in a fresh data directory, then
prints the reward of every round with its moving average, writes a PNG plot, and
ends with one line of `name=value` figures: the mean reward of the first and the
last 10 rounds and their difference.

    python scripts/learning_curve.py --rounds 60 --out runs/learning_curve
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

from swarmnode.lab import REPO
from swarmnode.lab.plotting import new_figure, save_figure
from swarmnode.learn.metrics import moving_average, read_rounds


def plot(rounds: list[int], rewards: list[float], avg: list[float], path: Path, title: str) -> None:
    fig, (ax,) = new_figure()
    ax.plot(rounds, rewards, ".", alpha=0.4, label="reward per round")
    ax.plot(rounds, avg, "-", linewidth=2, label="moving average")
    ax.set_xlabel("round")
    ax.set_ylabel("mean reward")
    save_figure(fig, path, title)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--config", type=Path, default=REPO / "configs" / "node.yaml")
    ap.add_argument("--rounds", type=int, default=60)
    ap.add_argument("--window", type=int, default=10)
    ap.add_argument("--out", type=Path, default=REPO / "runs" / "learning_curve")
    ap.add_argument("--resume", action="store_true", help="keep an existing run directory")
    args = ap.parse_args()

    data = args.out / "node"
    if data.exists() and not args.resume:
        shutil.rmtree(data)
    args.out.mkdir(parents=True, exist_ok=True)
    cmd = [
        sys.executable,
        "-m",
        "swarmnode.cli",
        "start",
        "--config",
        str(args.config),
        "--max-rounds",
        str(args.rounds),
        "--data-dir",
        str(data),
        "--log-level",
        "warning",
    ]
    proc = subprocess.run(cmd, cwd=REPO, check=False)
    if proc.returncode != 0:
        sys.exit(f"node exited with {proc.returncode}")

    records = read_rounds(data / "metrics.jsonl")
    rounds = [r.round for r in records]
    rewards = [r.reward_mean for r in records]
    avg = moving_average(rewards, args.window)
    print("\nround  reward  moving_avg")
    for r, x, a in zip(rounds, rewards, avg, strict=True):
        print(f"{r:>5}  {x:6.3f}  {a:10.3f}")
    png = args.out / "learning_curve.png"
    plot(rounds, rewards, avg, png, f"{args.config.name}: one node alone, {len(rounds)} rounds")
    print(f"plot: {png}")
    first = sum(rewards[:10]) / max(1, len(rewards[:10]))
    last = sum(rewards[-10:]) / max(1, len(rewards[-10:]))
    secs = sum(r.gen_seconds + r.train_seconds for r in records) / max(1, len(records))
    print(
        f"rounds={len(rounds)} first10_reward={first:.4f} last10_reward={last:.4f} "
        f"delta={last - first:+.4f} mean_round_s={secs:.1f}"
    )


if __name__ == "__main__":
    main()

"""The CLI end to end, as a user runs it: real subprocesses, tiny model."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import yaml

from swarmnode.learn.checkpoint import Checkpointer
from swarmnode.learn.metrics import read_metrics
from tests.helpers import ENV, REPO, start_node, tiny_config, wait_rounds, write_config

KEYS = {
    "round",
    "time",
    "reward_mean",
    "accuracy",
    "groups_trained",
    "groups_skipped",
    "gen_seconds",
    "train_seconds",
    "tokens_generated",
}


def test_start_three_rounds(tiny_model_dir: Path, tmp_path: Path) -> None:
    config = write_config(tmp_path / "node.yaml", tiny_config(tiny_model_dir, tmp_path / "x"))
    data = tmp_path / "data"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "swarmnode.cli",
            "start",
            "--config",
            str(config),
            "--max-rounds",
            "3",
            "--data-dir",
            str(data),
        ],
        cwd=REPO,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    records = read_metrics(data / "metrics.jsonl")
    assert [r["round"] for r in records] == [1, 2, 3]
    assert all(r.keys() >= KEYS for r in records)
    assert proc.stdout.count("round ") == 3  # one progress line per round
    resolved = yaml.safe_load((data / "config.resolved.yaml").read_text())
    assert resolved["node"]["data_dir"] == str(data) and resolved["train"]["max_grad_norm"] == 1.0
    assert not (tmp_path / "x").exists()


def test_sigterm_saves_checkpoint(tiny_model_dir: Path, tmp_path: Path) -> None:
    cfg = tiny_config(tiny_model_dir, tmp_path / "d", checkpoint={"every_rounds": 1000})
    proc = start_node(write_config(tmp_path / "n.yaml", cfg))
    wait_rounds(tmp_path / "d" / "metrics.jsonl", 2, proc, timeout=300)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=120) == 0
    done = max(r["round"] for r in read_metrics(tmp_path / "d" / "metrics.jsonl"))
    ckpts = Checkpointer(tmp_path / "d" / "checkpoints").checkpoints()
    assert ckpts and ckpts[0][0] == done  # the last finished round was saved at shutdown


def test_help_imports_nothing_heavy() -> None:
    code = (
        "import sys, swarmnode.cli; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('torch', 'transformers', 'peft', 'libp2p', 'trio')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, env=ENV, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stderr
    proc = subprocess.run(
        [sys.executable, "-m", "swarmnode.cli", "--help"],
        cwd=REPO,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0 and "start" in proc.stdout


def test_eval_from_data_dir_alone_with_base(tiny_model_dir: Path, tmp_path: Path) -> None:
    import json

    data = tmp_path / "d"
    config = write_config(tmp_path / "n.yaml", tiny_config(tiny_model_dir, data))
    proc = subprocess.run(
        [sys.executable, "-m", "swarmnode.cli", "start", "-c", str(config), "--max-rounds", "1"],
        cwd=REPO,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    base = [sys.executable, "-m", "swarmnode.cli", "eval", "--data-dir", str(data)]
    run = subprocess.run(
        [*base, "--items", "3", "--base", "--json"],
        cwd=REPO,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout)
    assert result["round"] == 1 and result["base_result"]["round"] == 0
    paired = result["paired"]
    assert paired["items"] == result["items"] and paired["unpaired"] == 0
    assert paired["trained"] == round(result["accuracy"], 3)
    assert paired["base"] == round(result["base_result"]["accuracy"], 3)
    saved = json.loads((data / "eval" / "round-000001.json").read_text())
    assert saved["paired"] == paired and saved["base"]["accuracy"] == paired["base"]
    missing = subprocess.run(
        [*base[:-1], str(tmp_path / "nowhere")],
        cwd=REPO,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert missing.returncode == 2 and "no such directory" in missing.stderr
    assert len(missing.stderr.strip().splitlines()) == 1


# A library's daemon thread inside torch when the node's work is done (the -6 aborts
# of tests/test_stop_stress.py): with interpreter finalization after `start`, the
# thread resumes from a torch op once the interpreter is gone and the process aborts
# ("terminate called without an active exception", exit -6) every time.
_THREAD_IN_TORCH = """
import sys, threading, torch
a = torch.randn(128, 128)
def spin():
    while True:
        torch.mm(a, a)
threading.Thread(target=spin, daemon=True, name="a-library-thread").start()
from swarmnode.cli import main
sys.argv = ["swarmnode", *sys.argv[1:]]
main()
"""


def test_start_exits_0_with_a_daemon_thread_inside_torch(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    config = write_config(tmp_path / "node.yaml", tiny_config(tiny_model_dir, tmp_path / "d"))
    proc = subprocess.run(
        [sys.executable, "-c", _THREAD_IN_TORCH, "start", "-c", str(config), "--max-rounds", "1"],
        cwd=REPO,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "terminate called" not in proc.stderr
    assert read_metrics(tmp_path / "d" / "metrics.jsonl")[-1]["round"] == 1
    # a bad config is still one line and its exit code, through the same exit
    bad = write_config(
        tmp_path / "bad.yaml",
        {
            **tiny_config(tiny_model_dir, tmp_path / "e"),
            "model": {"name": str(tmp_path / "no-model")},
        },
    )
    proc = subprocess.run(
        [sys.executable, "-c", _THREAD_IN_TORCH, "start", "-c", str(bad)],
        cwd=REPO,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2 and "terminate called" not in proc.stderr, proc.stderr[-3000:]
    assert proc.stderr.strip().splitlines()[-1].startswith("error: model"), proc.stderr

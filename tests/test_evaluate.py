"""Held-out evaluation: deterministic, disjoint from training items, reads checkpoints."""

from __future__ import annotations

from pathlib import Path

from swarmnode.config import parse_config
from swarmnode.learn.evaluate import HELDOUT_SEED, evaluate, heldout_refs
from tests.helpers import tiny_config


def test_evaluate_is_deterministic_and_held_out(tiny_model_dir: Path, tmp_path: Path) -> None:
    cfg = parse_config(tiny_config(tiny_model_dir, tmp_path))
    refs = heldout_refs(cfg, 4)
    assert len(refs) == 4 and all(r.seed == HELDOUT_SEED > 2**31 - 1 for r in refs)
    first, second = evaluate(cfg, n=4), evaluate(cfg, n=4)
    assert first == second
    assert first["items"] == 4 and set(first["per_dataset"]) == {"basic_arithmetic"}
    assert 0.0 <= first["accuracy"] <= 1.0 and first["round"] == 0


def test_eval_command(tiny_model_dir: Path, tmp_path: Path) -> None:
    import json
    import subprocess
    import sys

    from tests.helpers import ENV, REPO, write_config

    config = write_config(tmp_path / "n.yaml", tiny_config(tiny_model_dir, tmp_path / "d"))
    cmd = [sys.executable, "-m", "swarmnode.cli", "eval", "--config", str(config), "--items", "3"]
    proc = subprocess.run(
        [*cmd, "--json"], cwd=REPO, env=ENV, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["items"] == 3 and set(result["per_dataset"]) == {"basic_arithmetic"}
    text = subprocess.run(cmd, cwd=REPO, env=ENV, capture_output=True, text=True, timeout=300)
    assert (
        "basic_arithmetic" in text.stdout
        and f"{result['accuracy']:.3f}" in text.stdout.strip().splitlines()[-1]
    )

"""The experiment harness runs real node processes and writes its CSV, plot and table."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

from tests.test_checkpoint import ENV, REPO


def test_quick_experiment(tiny_model_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "exp"
    proc = subprocess.run(
        [
            sys.executable,
            "scripts/sapo_experiment.py",
            "--quick",
            "--model",
            str(tiny_model_dir),
            "--configs",
            "none,balanced",
            "--out",
            str(out),
        ],
        cwd=REPO,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = list(csv.DictReader((out / "rewards.csv").open()))
    seen = {(r["config"], r["node"], r["round"]) for r in rows}
    assert seen == {
        (c, str(n), str(r)) for c in ("none", "balanced") for n in (0, 1) for r in (1, 2, 3)
    }
    assert all(r["external_groups"] == "0" for r in rows if r["config"] == "none")
    assert any(int(r["external_groups"]) > 0 for r in rows if r["config"] == "balanced")
    assert (out / "curves.png").stat().st_size > 0
    table = (out / "results.md").read_text()
    assert "| none | 2 / 0 |" in table and "| balanced | 1 / 1 |" in table
    assert proc.stdout.strip().splitlines()[-1].startswith("none_cumulative=")

"""The experiment harness: real node processes per (configuration, seed), resumable runs,
aggregation with paired intervals, and a last line that proves the work was done."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import ENV, REPO


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "scripts/sapo_experiment.py", *args],
        cwd=REPO,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=900,
    )


@pytest.mark.slow  # several node processes for minutes: the second pass
def test_quick_experiment_with_seeds(tiny_model_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "exp"
    common = ["--quick", "--model", str(tiny_model_dir), "--out", str(out)]
    proc = run(*common, "--configs", "none,complete", "--seeds", "2")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = list(csv.DictReader((out / "rewards.csv").open()))
    seen = {(r["config"], r["seed"], r["node"], r["round"]) for r in rows}
    assert seen == {
        (c, str(s), str(n), str(r))
        for c in ("none", "complete")
        for s in (0, 1)
        for n in (0, 1)
        for r in (1, 2, 3)
    }
    assert all(r["external_groups"] == "0" for r in rows if r["config"] == "none")
    assert all(float(r["wall_s"]) > 0 for r in rows)
    held = list(csv.DictReader((out / "heldout.csv").open()))
    assert len(held) == 8 and all(int(h["items"]) >= 2 for h in held)
    table = (out / "results.md").read_text()
    assert "| none | 2 / 0 | 2 (0,1) |" in table and "| complete | 1 / 1 | 2 (0,1) |" in table
    assert (out / "curves.png").stat().st_size > 0
    last = proc.stdout.strip().splitlines()[-1]
    assert "none_runs=2" in last and "complete_tokens_trained=" in last

    # Resuming skips the finished runs; aggregation alone reads what exists.
    again = run(*common, "--configs", "none,complete", "--seeds", "2", "--resume")
    assert again.returncode == 0 and "seed 0:" not in again.stdout, again.stdout
    agg = run(*common, "--aggregate")
    assert agg.returncode == 0 and agg.stdout.strip().splitlines()[-1] == last

"""Held-out evaluation: deterministic, disjoint from training items, reads checkpoints."""

from __future__ import annotations

from pathlib import Path

from swarmnode.config import parse_config
from swarmnode.evaluate import HELDOUT_SEED, evaluate, heldout_refs
from tests.conftest import tiny_config


def test_evaluate_is_deterministic_and_held_out(tiny_model_dir: Path, tmp_path: Path) -> None:
    cfg = parse_config(tiny_config(tiny_model_dir, tmp_path))
    refs = heldout_refs(cfg, 4)
    assert len(refs) == 4 and all(r.seed == HELDOUT_SEED > 2**31 - 1 for r in refs)
    first, second = evaluate(cfg, n=4), evaluate(cfg, n=4)
    assert first == second
    assert first["items"] == 4 and set(first["per_dataset"]) == {"basic_arithmetic"}
    assert 0.0 <= first["accuracy"] <= 1.0 and first["round"] == 0
